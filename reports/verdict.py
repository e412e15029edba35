"""The verdict file and the summary table printed at the end of a run."""

from __future__ import annotations

import json
import os
from pathlib import Path

ICONS = {"passed": "PASS", "failed": "FAIL", "broken": "BROKEN", "skipped": "SKIP", "not covered": "-"}


def write(path: Path, verdict: dict) -> None:
    """Write the verdict and, beside it, ``junit.xml``; atomically: a gate never reads half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(verdict, indent=2, sort_keys=False) + "\n")
    os.replace(tmp, path)
    junit_tmp = path.with_name("junit.xml.tmp")
    junit_tmp.write_text(junit(verdict))
    os.replace(junit_tmp, path.with_name("junit.xml"))


def junit(verdict: dict) -> str:
    """JUnit XML with one test case per catalogue case, for CI systems that read JUnit (the pytest
    results alone would show a refusal passing whose control failed)."""
    import xml.etree.ElementTree as ET

    cases = verdict["cases"]
    suite = ET.Element("testsuite", name="pairproof", tests=str(len(cases)),
                       failures=str(sum(c["status"] == "failed" for c in cases)),
                       errors=str(sum(c["status"] == "broken" for c in cases)),
                       skipped=str(sum(c["status"] in ("skipped", "not covered") for c in cases)))
    for c in cases:
        name = f"{c['id']} {c.get('refusal', '')}".strip()
        case = ET.SubElement(suite, "testcase", classname=f"pairproof.{c['boundary']}", name=name)
        why = "; ".join(r.get("reason", "") for r in c["refusals"] if r.get("reason")) or c["status"]
        if c["status"] == "failed":
            ET.SubElement(case, "failure", message=why)
        elif c["status"] == "broken":
            ET.SubElement(case, "error", message=why)
        elif c["status"] in ("skipped", "not covered"):
            ET.SubElement(case, "skipped", message=f"{c['status']}: {c['reason']}" if c.get("reason") else c["status"])
    return ET.tostring(suite, encoding="unicode")


def table(verdict: dict, *, include_uncovered: bool = False) -> str:
    rows = [("case", "boundary", "status", "refusals", "controls")]
    for c in verdict["cases"]:
        if c["status"] == "not covered" and not include_uncovered and not c.get("lacks"):
            continue
        refusals = f"{sum(r['status'] == 'passed' for r in c['refusals'])}/{len(c['refusals'])} passed"
        controls = " ".join(f"{role}:{ctl['status']}" for role, ctl in c["controls"].items()) or "(none)"
        status = ICONS.get(c["status"], c["status"])
        if c.get("lacks"):
            status = f"NOT COVERED: target lacks {', '.join(c['lacks'])}"
        rows.append((c["id"], c["boundary"], status, refusals, controls))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lacking = [c for c in verdict["cases"] if c.get("lacks")]
    uncovered = verdict["counts"].get("not covered", 0) - len(lacking)
    facets = sorted({f for c in lacking for f in c["lacks"]})
    for c in verdict["cases"]:
        if c["status"] in ("failed", "broken") and c.get("reason"):
            lines.append(f"{c['id']} {c['status']}: {c['reason']}")
    lines.append(f"verdict: {verdict['status'].upper()}  "
                 + ", ".join(f"{n} {s}" for s, n in sorted(verdict["counts"].items()) if s != "not covered")
                 + (f"; {len(lacking)} not covered: target lacks {', '.join(facets)}" if lacking else "")
                 + (f"; {uncovered} catalogue cases not covered by this suite yet" if uncovered else ""))
    return "\n".join(lines)
