"""Reconcile Allure results with the pairing verdict.

allure-pytest writes a result per test as the test ends, before the controls of a refusal may have run
(and on xdist, in another process). Once the verdict is known, a refusal whose controls did not pass is
rewritten from ``passed`` to ``broken`` with the reason, so a report reader never sees a pass the
pairing rules do not support.

It does not add the ``pairproof_run`` label that ties a result to its run (``pairproof gate`` refuses a
result without it): that label is written by the test's own process as the result is made. Stamped here,
after the fact, it would also land on a stale result of an earlier run left in the same folder, the very
result the label exists to refuse.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def _nodeid_of(result: dict) -> str | None:
    # allure-pytest's fullName is "path.to.module#test_name[param]"; the verdict keeps pytest node ids.
    for label in result.get("labels", []):
        if label.get("name") == "pairproof_nodeid":
            return label.get("value")
    return None


def apply_pairing(results_dir: Path, verdict: dict) -> int:
    """Rewrite refusals judged broken or failed by pairing; return how many results changed."""
    judged = {r["test"]: r for case in verdict["cases"] for r in case["refusals"]}
    changed = 0
    for path in results_dir.glob("*-result.json"):
        result = json.loads(path.read_text())
        nodeid = _nodeid_of(result)
        entry = judged.get(nodeid or "")
        if entry is None or result.get("status") != "passed" or entry["status"] == "passed":
            continue
        result["status"] = "broken" if entry["status"] != "failed" else "failed"
        result.setdefault("statusDetails", {})["message"] = f"pairproof: {entry['reason']}"
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(result))
        os.replace(tmp, path)
        changed += 1
    return changed
