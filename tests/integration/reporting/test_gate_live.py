"""The release gate against crafted results folders and mutant reports: each gets the right exit code and
a message naming the reason.

Each hollow pass of issue 12 is shown twice: the gate as it was (``support.gate_before_issue12``) passes
the crafted input, the gate now refuses it and says why.


The part of tests/unit/test_gate.py that the unit tier cannot hold: they run Allure's command line."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from support import gate_before_issue12 as old_gate

from acceptance.catalogue import load
from acceptance.harness.pairing import Declared, Outcome, judge
from reports import allure_html, gate, identity
from reports import verdict as verdict_report

IDS = ["RS-1", "FS-3"]
RUN = "0badc0de"


def _judged(target: str = "reference") -> dict:
    """What a verdict of ``target`` made from this source names (``reports/identity.py``), as the gate recomputes
    it: these verdicts are this source's, so only what the test changes can fail them."""
    from acceptance import targets
    from acceptance.targets.profiles import load as load_profile

    return identity.of_run(target, targets.driver_module(target), load_profile(targets.default_profile(target)), None)


def _o(case, role, outcome="passed", proofs=1, n=""):
    return Outcome(Declared(f"t.py::{case}-{role}{n}", case, role), outcome=outcome, proofs=proofs)


ALL_PASSED = [_o("RS-1", "refusal"), _o("RS-1", "P"), _o("FS-3", "refusal"), _o("FS-3", "P"), _o("FS-3", "X")]


def _verdict(outcomes, *, pytest_exit=0, ids=IDS, collected=None) -> dict:
    """The verdict the plugin would write: judged by the pairing rules, each case listing the refusals the
    suite collected for it (by default, those that ran)."""
    v = judge(outcomes, {k: c for k, c in load().items() if k in ids})
    v.update(run=RUN, target="reference", pytest_exit=pytest_exit, judged=_judged())
    refusals = collected if collected is not None else [o.declared for o in outcomes if o.declared.role == "refusal"]
    for case in v["cases"]:
        case["expected_refusals"] = [d.nodeid for d in refusals if d.case == case["id"]]
    return v


def _write(folder, outcomes=ALL_PASSED, *, edit: Callable[[dict], object] | None = None, **kwargs):
    v = _verdict(outcomes, **kwargs)
    if edit is not None:
        edit(v)
    verdict_report.write(folder / "verdict.json", v)
    return folder


# -- finding 19: Allure results are tied to the run -------------------------------------------------


def _allure_results(folder, verdict: dict, *, run=RUN, skip=(), more=()) -> None:
    """One passed Allure result per test the verdict judged, labelled as the plugin labels them."""
    results = folder / "allure-results"
    results.mkdir(exist_ok=True)
    tests = [t["test"] for c in verdict["cases"] for t in c["refusals"]]
    tests += [t["test"] for c in verdict["cases"] for ctl in c["controls"].values() for t in ctl["tests"]]
    for i, nodeid in enumerate([t for t in tests if t not in skip] + list(more)):
        labels = [{"name": "pairproof_nodeid", "value": nodeid}]
        if run is not None:
            labels.append({"name": "pairproof_run", "value": run})
        (results / f"r{i}-result.json").write_text(json.dumps(
            {"uuid": f"r{i}", "historyId": f"h{i}", "name": nodeid, "fullName": nodeid, "status": "passed",
             "start": 1, "stop": 2, "labels": labels}))


def _needs_allure():
    if allure_html.find() is None:
        pytest.fail("the npm package allure is not installed: run tools/setup-machine (or set PAIRPROOF_ALLURE)")


def test_allure_results_of_this_run_pass(tmp_path):
    _needs_allure()
    folder = _write(tmp_path)
    _allure_results(folder, json.loads((folder / "verdict.json").read_text()))
    outcome = gate.judge(folder, None, IDS, judged=_judged())
    assert outcome.passed, outcome.reasons


HOLLOW_ALLURE = [
    ({"run": "feedf00d"}, "5 belong to another run than this verdict's 0badc0de: t.py::FS-3-refusal (run feedf00d)"),
    ({"run": None}, "5 carry no pairproof_run label, so nothing ties them to this run"),
    ({"skip": ["t.py::FS-3-X"], "more": ["t.py::FS-3-X-from-yesterday"]},
     "1 are missing: the verdict judged these tests but no Allure result shows them: t.py::FS-3-X"),
    ({"more": ["t.py::RS-1-refusal"]}, "1 are a second result for one test: t.py::RS-1-refusal"),
]


@pytest.mark.parametrize("change,reason", HOLLOW_ALLURE, ids=["other-run", "no-run-label", "missing", "duplicate"])
def test_allure_results_not_of_this_run_fail(tmp_path, change, reason):
    """Passing results of another run, or unlabelled ones, or one missing with a stranger in its place, or
    one twice: Allure's quality gate counts them and passes, and the old gate with it."""
    _needs_allure()
    folder = _write(tmp_path)
    _allure_results(folder, json.loads((folder / "verdict.json").read_text()), **change)
    assert old_gate.judge(folder, None, IDS).passed
    outcome = gate.judge(folder, None, IDS, judged=_judged())
    assert not outcome.passed and any(reason in r for r in outcome.reasons), outcome.reasons


def test_any_passing_results_satisfied_the_old_gate_not_this_one(tmp_path):
    """As many passing results as catalogue cases, from nothing this run did."""
    _needs_allure()
    folder = _write(tmp_path)
    results = folder / "allure-results"
    results.mkdir()
    for i in range(len(IDS)):
        (results / f"x{i}-result.json").write_text(json.dumps(
            {"uuid": f"x{i}", "historyId": f"x{i}", "name": f"t{i}", "fullName": f"t{i}", "status": "passed",
             "start": 1, "stop": 2}))
    assert old_gate.judge(folder, None, IDS).passed
    outcome = gate.judge(folder, None, IDS, judged=_judged())
    assert not outcome.passed
    text = "\n".join(outcome.reasons)
    assert "2 carry no pairproof_run label" in text and "5 are missing" in text, text


def test_an_extra_result_for_a_test_the_verdict_did_not_judge_fails(tmp_path):
    folder = _write(tmp_path)
    _allure_results(folder, json.loads((folder / "verdict.json").read_text()), more=["t.py::RS-1-refusal[old]"])
    outcome = gate.judge(folder, None, IDS, judged=_judged())
    assert any("1 are for a test this verdict did not judge: t.py::RS-1-refusal[old]" in r for r in outcome.reasons)


def test_allures_own_quality_gate_runs_and_can_fail(tmp_path):
    """With Allure results present, the gate also runs Allure's quality gate (here: too few tests)."""
    folder = _write(tmp_path)
    results = folder / "allure-results"
    results.mkdir()
    (results / "x-result.json").write_text(json.dumps({"uuid": "x", "name": "t", "status": "passed", "start": 1, "stop": 2}))
    outcome = gate.judge(folder, None, IDS, judged=_judged())
    if allure_html.find() is None:
        assert not outcome.passed and any("could not run" in r for r in outcome.reasons)
    else:
        assert not outcome.passed and any("Allure's quality gate failed" in r for r in outcome.reasons), outcome.reasons


def test_allures_own_quality_gate_passes_a_folder_that_meets_it(tmp_path):
    """The other half: enough passed results pass Allure's gate, so the gate's failure above is Allure
    judging, not Allure refusing its arguments (it once refused "--success-rate 1.0" as a usage error)."""
    _needs_allure()
    results = tmp_path / "allure-results"
    results.mkdir()
    for i in range(3):
        (results / f"r{i}-result.json").write_text(json.dumps(
            {"uuid": f"r{i}", "historyId": f"h{i}", "name": f"t{i}", "fullName": f"t{i}", "status": "passed",
             "start": 1, "stop": 2}))
    passed, said = allure_html.quality_gate(results, min_tests=3)
    assert passed, said
    passed, said = allure_html.quality_gate(results, min_tests=4)
    assert not passed and "minTestsCount" in said
    results.joinpath("r9-result.json").write_text(json.dumps(
        {"uuid": "r9", "historyId": "h9", "name": "t9", "fullName": "t9", "status": "failed", "start": 1, "stop": 2}))
    passed, said = allure_html.quality_gate(results, min_tests=3)
    assert not passed and "successRate" in said
