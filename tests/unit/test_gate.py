"""The release gate against crafted results folders: each case gets the right exit code and message."""

from __future__ import annotations

import json

import pytest

from acceptance import cli
from acceptance.catalogue import load
from acceptance.pairing import Declared, Outcome, judge
from reports import verdict as verdict_report

IDS = ["RS-1", "FS-3"]


def _write(folder, outcomes, *, pytest_exit=0, ids=IDS):
    catalogue = {k: v for k, v in load().items() if k in ids}
    v = judge(outcomes, catalogue)
    v.update(run="0badc0de", target="reference", pytest_exit=pytest_exit)
    verdict_report.write(folder / "verdict.json", v)
    return folder


def _o(case, role, outcome="passed", proofs=1):
    return Outcome(Declared(f"t.py::{case}-{role}", case, role), outcome=outcome, proofs=proofs)


ALL_PASSED = [_o("RS-1", "refusal"), _o("RS-1", "P"), _o("FS-3", "refusal"), _o("FS-3", "P"), _o("FS-3", "X")]


def _gate(capsys, folder, *extra):
    from reports import gate

    original = gate.judge
    code = None
    try:
        gate.judge = lambda results, mutants=None: original(results, mutants, IDS, allure=False)
        code = cli.main(["gate", "--results", str(folder), *extra])
    finally:
        gate.judge = original
    return code, capsys.readouterr().out


def test_all_passed(tmp_path, capsys):
    code, out = _gate(capsys, _write(tmp_path, ALL_PASSED))
    assert code == 0 and "gate: PASSED" in out


@pytest.mark.parametrize("change,expected", [
    (lambda o: [_o("RS-1", "refusal", "failed")] + o[1:], "RS-1: failed"),
    (lambda o: [o[0], _o("RS-1", "P", "failed")] + o[2:], "RS-1: broken: control P"),
    (lambda o: [_o("RS-1", "refusal", "skipped")] + o[1:], "RS-1: skipped"),
    (lambda o: o[2:], "RS-1: not covered"),
    (lambda o: [_o("RS-1", "refusal", proofs=0)] + o[1:], "RS-1: broken: no proof of execution"),
], ids=["failed-case", "control-failed", "skipped-refusal", "missing-case", "no-proof"])
def test_bad_results_fail_with_the_reason(tmp_path, capsys, change, expected):
    code, out = _gate(capsys, _write(tmp_path, change(list(ALL_PASSED))))
    assert code == 1
    assert expected in out


def test_zero_tests(tmp_path, capsys):
    code, out = _gate(capsys, _write(tmp_path, []))
    assert code == 1 and "no case ran" in out


def test_a_run_stopped_by_a_usage_error_leaves_no_verdict_and_fails(tmp_path, capsys):
    code, out = _gate(capsys, tmp_path)
    assert code == 1 and "no verdict" in out


def test_an_interrupted_or_usage_error_exit_fails_even_if_cases_passed(tmp_path, capsys):
    code, out = _gate(capsys, _write(tmp_path, ALL_PASSED, pytest_exit=4))
    assert code == 1 and "exit status 4" in out


def test_a_damaged_verdict_fails(tmp_path, capsys):
    (tmp_path / "verdict.json").write_text('{"schema": "pairproof.verdict/1"}')
    code, out = _gate(capsys, tmp_path)
    assert code == 1 and "does not follow the schema" in out


def test_mutants_must_all_be_killed(tmp_path, capsys):
    folder = _write(tmp_path, ALL_PASSED)
    report = {"control": {"exit": 0}, "summary": "x", "mutants": [{"name": "m1", "status": "killed"},
                                                                   {"name": "m2", "status": "survived", "detail": ""}]}
    (folder / "mutants.json").write_text(json.dumps(report))
    code, out = _gate(capsys, folder, "--mutants", str(folder / "mutants.json"))
    assert code == 1 and "mutant m2: survived" in out


def test_junit_has_one_case_per_catalogue_case(tmp_path):
    import xml.etree.ElementTree as ET

    _write(tmp_path, [_o("RS-1", "refusal", "failed"), _o("RS-1", "P")])
    suite = ET.parse(tmp_path / "junit.xml").getroot()
    assert suite.get("tests") == "2" and suite.get("failures") == "1" and suite.get("skipped") == "1"


def test_allures_own_quality_gate_runs_and_can_fail(tmp_path):
    """With Allure results present, the gate also runs Allure's quality gate (here: too few tests)."""
    from reports import allure_html, gate

    folder = _write(tmp_path, ALL_PASSED)
    results = folder / "allure-results"
    results.mkdir()
    (results / "x-result.json").write_text(json.dumps({"uuid": "x", "name": "t", "status": "passed", "start": 1, "stop": 2}))
    outcome = gate.judge(folder, None, IDS)
    if allure_html.find() is None:
        assert not outcome.passed and any("could not run" in r for r in outcome.reasons)
    else:
        assert not outcome.passed and any("Allure's quality gate failed" in r for r in outcome.reasons), outcome.reasons


def test_allures_own_quality_gate_passes_a_folder_that_meets_it(tmp_path):
    """The other half: enough passed results pass Allure's gate, so the gate's failure above is Allure
    judging, not Allure refusing its arguments (it once refused "--success-rate 1.0" as a usage error)."""
    from reports import allure_html

    if allure_html.find() is None:
        pytest.fail("the npm package allure is not installed: run tools/setup-machine")
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
