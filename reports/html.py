"""Our own summary page (``reports/summary.html``): the case catalogue as a matrix (boundary x principal
pair, every case in its boundary's row with its status, coloured), the pairing graph (each refusal and the
controls it rests on), and the mutant kill matrix when a mutant report exists. One self-contained file, no
script, no external asset."""

from __future__ import annotations

import html
import json
from pathlib import Path

COLOURS = {"passed": "#2e7d32", "failed": "#c62828", "broken": "#ef6c00", "skipped": "#9e9e9e",
           "not covered": "#e0e0e0", "not run": "#e0e0e0", "killed": "#2e7d32", "survived": "#c62828",
           "killed_unexpected": "#ef6c00", "error": "#ef6c00"}


NO_PAIR = "no pair"
_WORST = ("failed", "broken", "skipped", "not covered", "not run", "passed")


def _cell(text: str, status: str, tag: str = "td") -> str:
    colour = COLOURS.get(status, "#ffffff")
    fg = "#000" if status in ("not covered", "not run", "") else "#fff"
    return f'<{tag} style="background:{colour};color:{fg}" title="{html.escape(status)}">{html.escape(text)}</{tag}>'


def _worst(statuses: list[str]) -> str:
    return min(statuses, key=lambda s: _WORST.index(s) if s in _WORST else -1)


def matrix(verdict: dict) -> dict[str, dict[str, dict[str, str]]]:
    """boundary -> column -> case -> status. A case sits under each principal pair its refusals probe, with
    the worst status of those refusals; a case with a refusal that names no pair, or with no refusal at
    all (not covered, say), sits under ``no pair`` with its own status. So every case is in its row."""
    rows: dict[str, dict[str, dict[str, str]]] = {}
    for case in verdict["cases"]:
        row = rows.setdefault(case["boundary"], {})
        by_pair: dict[str, list[str]] = {}
        for r in case["refusals"]:
            by_pair.setdefault(r["pair"] or NO_PAIR, []).append(r["status"])
        if not by_pair:
            by_pair[NO_PAIR] = [case["status"]]
        for pair, statuses in by_pair.items():
            row.setdefault(pair, {})[case["id"]] = _worst(statuses)
    return rows


def _matrix_cell(cases: dict[str, str]) -> str:
    if not cases:
        return "<td></td>"
    worst = _worst(list(cases.values()))
    # Each case keeps its own colour and status (title); the cell's border shows the worst of them.
    return (f'<td style="border:2px solid {COLOURS.get(worst, "#ccc")}" title="{html.escape(worst)}">'
            + " ".join(_cell(case, status, "span") for case, status in cases.items()) + "</td>")


def render(verdict: dict, mutants: dict | None = None) -> str:
    e = html.escape
    rows = matrix(verdict)
    pairs = sorted({p for row in rows.values() for p in row if p != NO_PAIR})
    pairs += [NO_PAIR] if any(NO_PAIR in row for row in rows.values()) else []
    out = ["<!doctype html><html><head><meta charset='utf-8'><title>pairproof summary</title>",
           "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin-bottom:2em}"
           "td,th{border:1px solid #ccc;padding:4px 8px;font-size:13px}th{background:#f5f5f5}"
           "td span{padding:1px 4px;white-space:nowrap;display:inline-block;margin:1px}</style></head><body>",
           f"<h1>pairproof: {e(verdict['status'].upper())}</h1>",
           f"<p>run {e(verdict.get('run', '?'))} on target {e(verdict.get('target', '?'))}; "
           + ", ".join(f"{n} {e(s)}" for s, n in sorted(verdict["counts"].items())) + "</p>",
           "<h2 id='matrix'>Case matrix: boundary x principal pair</h2><table><tr><th>boundary</th>"
           + "".join(f"<th>{e(p)}</th>" for p in pairs) + "</tr>"]
    for boundary in sorted(rows):
        out.append(f"<tr><th>{e(boundary)}</th>" + "".join(_matrix_cell(rows[boundary].get(p, {})) for p in pairs)
                   + "</tr>")
    out.append("</table><h2 id='pairing'>Pairing: each refusal and the controls it rests on</h2>"
               "<table><tr><th>case</th><th>status</th><th>refusal</th><th>controls</th></tr>")
    for c in verdict["cases"]:
        controls = "".join(f"{e(role)}: {e(ctl['description'])} " + _cell(ctl["status"], ctl["status"], "span")
                           + "<br>" for role, ctl in c["controls"].items()) or "(exact check, no control)"
        out.append(f"<tr><td id='{e(c['id'])}'>{e(c['id'])}</td>{_cell(c['status'], c['status'])}"
                   f"<td>{e(c['refusal'])}" + (f"<br><b>{e(c['status'])}: {e(c['reason'])}</b>" if c.get("reason") else "")
                   + f"</td><td>{controls}</td></tr>")
    out.append("</table>")
    if mutants:
        cases = sorted({case for statuses in mutants.get("matrix", {}).values() for case in statuses})
        out.append(f"<h2 id='mutants'>Mutant kill matrix ({e(mutants.get('summary', ''))})</h2><table><tr><th>mutant</th>"
                   f"<th>status</th>" + "".join(f"<th>{e(c)}</th>" for c in cases) + "</tr>")
        for m in mutants.get("mutants", []):
            statuses = mutants.get("matrix", {}).get(m["name"], {})
            out.append(f"<tr><td>{e(m['name'])}</td>{_cell(m['status'], m['status'])}"
                       + "".join(_cell("kill" if statuses.get(c) == "failed" else "", statuses.get(c, "")
                                       if statuses.get(c) != "failed" else "killed") for c in cases) + "</tr>")
        out.append("</table>")
    out.append("</body></html>")
    return "\n".join(out)


def write(reports: Path, mutants: Path | None | str = "beside") -> Path:
    """``reports/summary.html`` from ``reports/verdict.json`` and a mutant report (``mutants``: its path;
    by default ``reports/mutants.json`` if it exists; None for none), written whole (temporary file, then rename)."""
    verdict = json.loads((reports / "verdict.json").read_text())
    path = reports / "mutants.json" if mutants == "beside" else mutants
    kill_matrix = json.loads(Path(path).read_text()) if path is not None and Path(path).exists() else None
    target = reports / "summary.html"
    tmp = target.with_name("summary.html.tmp")
    tmp.write_text(render(verdict, kill_matrix))
    tmp.replace(target)
    return target
