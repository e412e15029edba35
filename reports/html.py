"""Our own summary page (``reports/summary.html``): the case catalogue as a matrix (boundary x principal
pair, coloured by status), the pairing graph (each refusal and the controls it rests on), and the
mutant kill matrix when a mutant report exists. One self-contained file, no script, no external asset."""

from __future__ import annotations

import html
import json
from pathlib import Path

COLOURS = {"passed": "#2e7d32", "failed": "#c62828", "broken": "#ef6c00", "skipped": "#9e9e9e",
           "not covered": "#e0e0e0", "not run": "#e0e0e0", "killed": "#2e7d32", "survived": "#c62828",
           "killed_unexpected": "#ef6c00", "error": "#ef6c00"}


def _cell(text: str, status: str) -> str:
    colour = COLOURS.get(status, "#ffffff")
    fg = "#000" if status in ("not covered", "not run", "") else "#fff"
    return f'<td style="background:{colour};color:{fg}" title="{html.escape(status)}">{html.escape(text)}</td>'


def render(verdict: dict, mutants: dict | None = None) -> str:
    e = html.escape
    pairs = sorted({r["pair"] for c in verdict["cases"] for r in c["refusals"] if r["pair"]})
    boundaries = sorted({c["boundary"] for c in verdict["cases"]})
    out = ["<!doctype html><html><head><meta charset='utf-8'><title>pairproof summary</title>",
           "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin-bottom:2em}"
           "td,th{border:1px solid #ccc;padding:4px 8px;font-size:13px}th{background:#f5f5f5}</style></head><body>",
           f"<h1>pairproof: {e(verdict['status'].upper())}</h1>",
           f"<p>run {e(verdict.get('run', '?'))} on target {e(verdict.get('target', '?'))}; "
           + ", ".join(f"{n} {e(s)}" for s, n in sorted(verdict["counts"].items())) + "</p>",
           "<h2 id='matrix'>Case matrix: boundary x principal pair</h2><table><tr><th>boundary</th>"
           + "".join(f"<th>{e(p)}</th>" for p in pairs) + "</tr>"]
    for boundary in boundaries:
        row = [f"<tr><th>{e(boundary)}</th>"]
        for pair in pairs:
            hits = [(c["id"], r["status"]) for c in verdict["cases"] if c["boundary"] == boundary
                    for r in c["refusals"] if r["pair"] == pair]
            if not hits:
                row.append("<td></td>")
            else:
                worst = next((s for s in ("failed", "broken", "skipped") if any(h[1] == s for h in hits)), "passed")
                row.append(_cell(" ".join(sorted({h[0] for h in hits})), worst))
        out.append("".join(row) + "</tr>")
    out.append("</table><h2 id='pairing'>Pairing: each refusal and the controls it rests on</h2>"
               "<table><tr><th>case</th><th>status</th><th>refusal</th><th>controls</th></tr>")
    for c in verdict["cases"]:
        controls = "".join(f"{e(role)}: {e(ctl['description'])} " + _cell(ctl["status"], ctl["status"]).replace("td", "span")
                           + "<br>" for role, ctl in c["controls"].items()) or "(exact check, no control)"
        out.append(f"<tr><td id='{e(c['id'])}'>{e(c['id'])}</td>{_cell(c['status'], c['status'])}"
                   f"<td>{e(c['refusal'])}</td><td>{controls}</td></tr>")
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


def write(reports: Path) -> Path:
    verdict = json.loads((reports / "verdict.json").read_text())
    mutants_path = reports / "mutants.json"
    mutants = json.loads(mutants_path.read_text()) if mutants_path.exists() else None
    target = reports / "summary.html"
    tmp = target.with_name("summary.html.tmp")
    tmp.write_text(render(verdict, mutants))
    tmp.replace(target)
    return target
