"""``pairproof expect`` against made-up verdicts: exactly the expected failures (with their evidence) exit 0; a
new failure, an expected failure that passes, is broken or not covered, or lacks its evidence exit 1; a bad
expectation or results folder exits 2 with one line. And the checked-in expectation of hermes-unguarded loads."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from acceptance import cli
from acceptance.catalogue import load as load_catalogue
from acceptance.harness.pairing import Declared, Outcome, judge
from reports import expectation, identity
from reports import verdict as verdict_report

IDS = ["TS-2", "TS-3", "RS-1"]
ROOT = Path(__file__).resolve().parents[2]


def _o(case, role, outcome="passed", message="", proofs=1):
    return Outcome(Declared(f"t.py::{case}-{role}", case, role), outcome=outcome, proofs=proofs, message=message,
                   assertion=message if outcome == "failed" else "")


def _outcomes(**status) -> list[Outcome]:
    """Each case of IDS with its refusal and P control; ``status`` gives a case's refusal outcome and message,
    ``<case>_P`` its control's."""
    out = []
    for case in IDS:
        outcome, message = status.get(case.replace("-", "_"), ("passed", ""))
        out.append(_o(case, "refusal", outcome, message))
        out.append(_o(case, "P", status.get(case.replace("-", "_") + "_P", ("passed", ""))[0]))
    return out


TS2_FAILS = ("failed", "assert {'add-mcp-server': [\"offered but not intended: ['mcp__mirror__notes_get']\"]} == {}")
TS3_FAILS = ("failed", "assert {'truncated': 'started', 'not-utf8': 'started'} == {}")


def _results(tmp_path, *, target="hermes-unguarded", pytest_exit=1, **status) -> Path:
    catalogue = {k: c for k, c in load_catalogue().items() if k in IDS}
    outcomes = _outcomes(**status)
    v = judge(outcomes, catalogue)
    v.update(run="0badc0de", target=target, pytest_exit=pytest_exit, judged=RECOMPUTE(target))
    for case in v["cases"]:
        case["expected_refusals"] = [o.declared.nodeid for o in outcomes
                                     if o.declared.case == case["id"] and o.declared.role == "refusal"]
    folder = tmp_path / "results"
    verdict_report.write(folder / "verdict.json", v)
    return folder


def _expected(tmp_path, text: str | None = None) -> Path:
    path = tmp_path / "expected.toml"
    path.write_text(text if text is not None else """
target = "hermes-unguarded"
[fails.TS-2]
why = "hermes merges the user's config leaf by leaf: an added mcp_servers entry brings its tools"
evidence = ["add-mcp-server", "mcp__mirror__"]
[fails.TS-3]
why = "hermes ignores a malformed managed file with a warning and starts anyway"
evidence = ["not-utf8", "started"]
""")
    return path


def _expect(capsys, results, expected) -> tuple[int, str, str]:
    code = cli.main(["expect", "--expected", str(expected), "--results", str(results)])
    out, err = capsys.readouterr()
    return code, out, err


# What a verdict of this source names, per target: hermes's is a hash of its whole venv (a second or two), so
# taken once per module here, by the made-up verdicts and by findings/expect alike.
RECOMPUTE = functools.cache(identity.recompute)


@pytest.fixture(autouse=True)
def _recompute_once(monkeypatch):
    monkeypatch.setattr(identity, "recompute", RECOMPUTE)

@pytest.fixture(autouse=True)
def _narrow_catalogue(monkeypatch):
    """The expectation's case names are checked against these cases only (the made-up verdicts hold no other)."""
    real = expectation.load
    monkeypatch.setattr(expectation, "load", lambda path, ids=None: real(path, ids or IDS))
    import acceptance.catalogue

    whole = acceptance.catalogue.load()
    monkeypatch.setattr(acceptance.catalogue, "load", lambda *a, **k: {i: c for i, c in whole.items() if i in IDS})


def test_exactly_the_expected_failures_with_their_evidence_exit_0(tmp_path, capsys):
    code, out, _ = _expect(capsys, _results(tmp_path, TS_2=TS2_FAILS, TS_3=TS3_FAILS), _expected(tmp_path))
    assert code == 0, out
    assert "TS-2: failed, as expected" in out and "RS-1: passed, as expected" in out
    assert "AS EXPECTED" in out


def test_a_new_failure_exits_1(tmp_path, capsys):
    results = _results(tmp_path, TS_2=TS2_FAILS, TS_3=TS3_FAILS, RS_1=("failed", "assert 1 == 0"))
    code, out, _ = _expect(capsys, results, _expected(tmp_path))
    assert code == 1
    assert "RS-1: a new failure" in out and "NOT AS EXPECTED" in out


def test_an_expected_failure_that_passes_exits_1(tmp_path, capsys):
    code, out, _ = _expect(capsys, _results(tmp_path, TS_2=TS2_FAILS), _expected(tmp_path))
    assert code == 1
    assert "TS-3: expected to fail, passed" in out and "vanished" in out


def test_an_expected_failure_whose_control_is_broken_exits_1(tmp_path, capsys):
    """Issue 27 item 5: a failure whose control did not pass shows nothing about the agent (the probe may see
    nothing, the allowed path may not work): not an expected failure. It used to be noted and passed."""
    results = _results(tmp_path, TS_2=TS2_FAILS, TS_3=TS3_FAILS, TS_3_P=("error", ""))
    code, out, _ = _expect(capsys, results, _expected(tmp_path))
    assert code == 1, out
    assert "TS-3: failed, but control P" in out and "shows nothing about the agent" in out


def test_an_expected_failure_whose_failing_refusal_carried_no_proof_exits_1(tmp_path, capsys):
    """Issue 27 item 5: the failing refusal must have proved it ran where it was meant to."""
    results = _results(tmp_path, TS_2=TS2_FAILS, TS_3=TS3_FAILS)
    v = json.loads((results / "verdict.json").read_text())
    next(c for c in v["cases"] if c["id"] == "TS-3")["refusals"][0]["proofs"] = 0
    (results / "verdict.json").write_text(json.dumps(v))
    code, out, _ = _expect(capsys, results, _expected(tmp_path))
    assert code == 1 and "TS-3: failed, but no failing refusal carried proof of execution" in out, out


def test_a_case_expected_to_pass_is_judged_by_the_gate_not_its_status(tmp_path, capsys):
    """Issue 27 item 5: RS-1 recorded passed, but its refusal has no proof: the gate does not pass it, so
    neither does expect (it used to read the status string)."""
    results = _results(tmp_path, TS_2=TS2_FAILS, TS_3=TS3_FAILS)
    v = json.loads((results / "verdict.json").read_text())
    next(c for c in v["cases"] if c["id"] == "RS-1")["refusals"][0]["proofs"] = 0
    (results / "verdict.json").write_text(json.dumps(v))
    code, out, _ = _expect(capsys, results, _expected(tmp_path))
    assert code == 1 and "RS-1: broken: refusal t.py::RS-1-refusal passed with no proof" in out, out


def test_a_verdict_cut_down_to_some_cases_is_not_as_expected(tmp_path, capsys):
    """A verdict holding fewer cases than the catalogue (edited down) is not the catalogue judged."""
    results = _results(tmp_path, TS_2=TS2_FAILS, TS_3=TS3_FAILS)
    v = json.loads((results / "verdict.json").read_text())
    v["cases"] = [c for c in v["cases"] if c["id"] != "RS-1"]
    (results / "verdict.json").write_text(json.dumps(v))
    code, out, _ = _expect(capsys, results, _expected(tmp_path))
    assert code == 1 and "RS-1: absent from the verdict" in out, out


def test_a_verdict_of_another_source_is_not_as_expected(tmp_path, capsys):
    """Issue 27 items 1 and 5: expect ties the verdict to this source and target as the gate does."""
    results = _results(tmp_path, TS_2=TS2_FAILS, TS_3=TS3_FAILS)
    v = json.loads((results / "verdict.json").read_text())
    v["judged"]["catalogue"] = "0" * 64
    (results / "verdict.json").write_text(json.dumps(v))
    code, out, _ = _expect(capsys, results, _expected(tmp_path))
    assert code == 1 and "the verdict is not of this source and target: catalogue:" in out, out


def test_an_expected_failure_whose_case_is_broken_exits_1(tmp_path, capsys):
    results = _results(tmp_path, TS_2=TS2_FAILS, TS_3=("error", "TargetError: hermes did not start"))
    code, out, _ = _expect(capsys, results, _expected(tmp_path))
    assert code == 1
    assert "TS-3: expected to fail, is broken" in out and "a broken case is never an expected failure" in out


def test_an_expected_failure_not_covered_exits_1(tmp_path, capsys):
    results = _results(tmp_path, TS_2=TS2_FAILS, TS_3=TS3_FAILS)
    v = json.loads((results / "verdict.json").read_text())
    case = next(c for c in v["cases"] if c["id"] == "TS-3")
    case.update(status="not covered", refusals=[], reason="target lacks tools")
    (results / "verdict.json").write_text(json.dumps(v))
    code, out, _ = _expect(capsys, results, _expected(tmp_path))
    assert code == 1 and "TS-3: expected to fail, not covered" in out


def test_an_expected_failure_without_its_evidence_exits_1(tmp_path, capsys):
    """TS-2 fails, but for another reason than the one expected (the product's tools dropped, not a mirror)."""
    other = ("failed", "assert {'drop-product-tool': ['intended but not offered']} == {}")
    code, out, _ = _expect(capsys, _results(tmp_path, TS_2=other, TS_3=TS3_FAILS), _expected(tmp_path))
    assert code == 1
    assert ("TS-2: failed, but what its proven failing refusals asserted or recorded does not show 'add-mcp-server', "
            "'mcp__mirror__'") in out


def test_evidence_only_in_an_allure_attachment_is_not_evidence(tmp_path, capsys):
    """Issue 27 item 5: a test attaches what it read, leak or not (TS-1's list of intended tools names
    ``terminal`` on every run): words found only in an attachment are not the failure's evidence. They used to be."""
    results = _results(tmp_path, TS_2=TS2_FAILS, TS_3=("failed", "assert {'not-utf8': 'started'} == {}"))
    allure = results / "allure-results"
    allure.mkdir()
    (allure / "a-attachment.txt").write_text("managed scope: failed to parse ... IGNORING this managed file")
    (allure / "r-result.json").write_text(json.dumps({
        "labels": [{"name": "pairproof_nodeid", "value": "t.py::TS-3-refusal"}],
        "attachments": [{"name": "hermes on its managed file", "source": "a-attachment.txt", "type": "text/plain"}]}))
    expected = _expected(tmp_path, """
target = "hermes-unguarded"
[fails.TS-2]
why = "leaf by leaf"
evidence = ["mcp__mirror__"]
[fails.TS-3]
why = "ignored with a warning"
evidence = ["started", "IGNORING this managed file"]
""")
    code, out, _ = _expect(capsys, results, expected)
    assert code == 1 and "does not show 'IGNORING this managed file'" in out, out


def test_evidence_in_the_whole_assertion_beyond_its_500_character_reason(tmp_path, capsys):
    """The verdict keeps a failed refusal's whole assertion: a word past the reason's 500 characters counts."""
    long = ("failed", "assert {" + ", ".join(f"'v{i}': 'started'" for i in range(60)) + ", 'not-utf8': 'started'} == {}")
    code, out, _ = _expect(capsys, _results(tmp_path, TS_2=TS2_FAILS, TS_3=long), _expected(tmp_path))
    assert code == 0, out


def test_a_verdict_of_another_target_is_bad_input(tmp_path, capsys):
    code, _, err = _expect(capsys, _results(tmp_path, target="hermes"), _expected(tmp_path))
    assert code == 2
    assert err.count("\n") == 1 and "target 'hermes'" in err


@pytest.mark.parametrize("text, says", [
    ("target = \"hermes-unguarded\"\n[fails.ZZ-9]\nwhy = \"x\"\nevidence = [\"y\"]\n", "not a case"),
    ("target = \"hermes-unguarded\"\n[fails.TS-2]\nevidence = [\"y\"]\n", "why must be one line"),
    ("target = \"hermes-unguarded\"\n[fails.TS-2]\nwhy = \"x\"\nevidence = []\n", "evidence must be a non-empty list"),
    ("target = \"hermes-unguarded\"\n[fails.TS-2]\nwhy = \"x\"\nevidence = [\"y\"]\nseverity = 1\n", "unexpected"),
    ("[fails.TS-2]\nwhy = \"x\"\nevidence = [\"y\"]\n", "target"),
    ("target = [", "not TOML"),
])
def test_a_bad_expectation_is_bad_input(tmp_path, capsys, text, says):
    code, out, err = _expect(capsys, _results(tmp_path, TS_2=TS2_FAILS, TS_3=TS3_FAILS), _expected(tmp_path, text))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and says in err and "expected.toml" in err


def test_missing_expectation_or_results_is_bad_input(tmp_path, capsys):
    code, _, err = _expect(capsys, _results(tmp_path), tmp_path / "nope.toml")
    assert code == 2 and "no such file" in err
    code, _, err = _expect(capsys, tmp_path / "no-results", _expected(tmp_path))
    assert code == 2 and "no such folder" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = _expect(capsys, empty, _expected(tmp_path))
    assert code == 2 and "no verdict.json" in err


def test_qualify_refuses_an_expectation_of_another_target_before_running(tmp_path, capsys):
    code = cli.main(["qualify", "--target", "reference", "--expected", str(_expected(tmp_path)),
                     "--reports-dir", str(tmp_path / "r"), "--state-dir", str(tmp_path / "s")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert not (tmp_path / "r").exists()


def test_the_checked_in_expectation_of_hermes_unguarded_loads():
    loaded = expectation.load(ROOT / "acceptance" / "targets" / "expectations" / "hermes-unguarded.toml", list(load_catalogue()))
    assert loaded.target == "hermes-unguarded"
    assert {"TS-2", "TS-3"} <= set(loaded.fails)
    assert all(f.why and f.evidence for f in loaded.fails.values())
