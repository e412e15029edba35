"""The done-when of issue 13 §1: a driver that wraps the reference target but leaves out the snapshots facet
gets a verdict where exactly the cases whose catalogue entry needs snapshots are not covered, naming the
facet, every other case passes, and the gate fails naming those cases. A whole qualification (about 75 s on
two cores): slow, still run in CI (tox -e unit)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from acceptance import catalogue

pytestmark = pytest.mark.slow
CHECKOUT = Path(__file__).resolve().parents[3]


def test_a_target_without_snapshots_leaves_exactly_the_snapshot_cases_not_covered(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(CHECKOUT), str(CHECKOUT / "tests")])}
    reports = tmp_path / "reports"
    qualify = subprocess.run(
        [sys.executable, "-m", "acceptance.cli", "qualify", "--target", "support.partial_reference:without_snapshots",
         "--reports-dir", str(reports)], cwd=CHECKOUT, env=env, capture_output=True, text=True, timeout=900)
    assert (reports / "verdict.json").exists(), qualify.stdout[-3000:] + qualify.stderr[-3000:]
    verdict = json.loads((reports / "verdict.json").read_text())
    needing = {c.id for c in catalogue.load().values() if "snapshots" in c.facets}
    assert needing >= {"SN-1", "SN-2", "SN-3"}

    by_status = {c["id"]: c for c in verdict["cases"]}
    not_covered = {i for i, c in by_status.items() if c["status"] == "not covered"}
    assert not_covered == needing, qualify.stdout[-3000:]
    for case_id in needing:
        case = by_status[case_id]
        assert case["lacks"] == ["snapshots"] and case["reason"].startswith("target lacks snapshots")
        assert case["refusals"] == [] and not any(c["tests"] for c in case["controls"].values())  # not run
    others = {i: c["status"] for i, c in by_status.items() if i not in needing}
    assert set(others.values()) == {"passed"}, {i: s for i, s in others.items() if s != "passed"}
    assert verdict["status"] == "failed" and qualify.returncode != 0
    assert verdict["target"] == "support.partial_reference:without_snapshots"
    for case_id in needing:  # the terminal and the summary page say why
        assert f"{case_id}: not covered (target lacks snapshots" in qualify.stdout
    assert (reports / "summary.html").read_text().count("not covered: target lacks snapshots") == len(needing)

    gate = subprocess.run([sys.executable, "-m", "acceptance.cli", "gate", "--target",
                           "support.partial_reference:without_snapshots", "--results", str(reports)], cwd=CHECKOUT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert gate.returncode == 1
    lines = {line.split()[0]: line for line in gate.stdout.splitlines() if line[:2].isalpha() and line[2:3] == "-"}
    for case_id in needing:
        assert lines[case_id].split()[1:4] == ["NOT", "COVERED", "target"] and "target lacks snapshots" in lines[case_id]
    assert {i for i, line in lines.items() if line.split()[1] == "PASSED"} == set(by_status) - needing
    assert "gate: FAILED" in gate.stdout
