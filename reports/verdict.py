"""The verdict file and the summary table printed at the end of a run."""

from __future__ import annotations

import json
import os
from pathlib import Path

ICONS = {"passed": "PASS", "failed": "FAIL", "broken": "BROKEN", "skipped": "SKIP", "not covered": "-"}


def write(path: Path, verdict: dict) -> None:
    """Write atomically: a reader (a release gate) never sees half a verdict."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(verdict, indent=2, sort_keys=False) + "\n")
    os.replace(tmp, path)


def table(verdict: dict, *, include_uncovered: bool = False) -> str:
    rows = [("case", "boundary", "status", "refusals", "controls")]
    for c in verdict["cases"]:
        if c["status"] == "not covered" and not include_uncovered:
            continue
        refusals = f"{sum(r['status'] == 'passed' for r in c['refusals'])}/{len(c['refusals'])} passed"
        controls = " ".join(f"{role}:{ctl['status']}" for role, ctl in c["controls"].items()) or "(none)"
        rows.append((c["id"], c["boundary"], ICONS.get(c["status"], c["status"]), refusals, controls))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    uncovered = verdict["counts"].get("not covered", 0)
    lines.append(f"verdict: {verdict['status'].upper()}  "
                 + ", ".join(f"{n} {s}" for s, n in sorted(verdict["counts"].items()) if s != "not covered")
                 + (f"; {uncovered} catalogue cases not covered by this suite yet" if uncovered else ""))
    return "\n".join(lines)
