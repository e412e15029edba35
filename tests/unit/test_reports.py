"""Reports: Allure results follow the pairing verdict; the verdict file is written whole."""

from __future__ import annotations

import json

from reports import allure_post, verdict


def _result(tmp_path, name: str, nodeid: str, status: str) -> None:
    (tmp_path / f"{name}-result.json").write_text(json.dumps(
        {"name": name, "status": status, "labels": [{"name": "pairproof_nodeid", "value": nodeid}]}))


def test_a_refusal_judged_broken_is_rewritten_broken_with_the_reason(tmp_path):
    _result(tmp_path, "r", "cases.py::test_refusal", "passed")
    _result(tmp_path, "p", "cases.py::test_control", "failed")
    judged = {"cases": [{"refusals": [{"test": "cases.py::test_refusal", "status": "broken",
                                       "reason": "control P (x) failed: cases.py::test_control"}]}]}
    assert allure_post.apply_pairing(tmp_path, judged) == 1
    result = json.loads((tmp_path / "r-result.json").read_text())
    assert result["status"] == "broken"
    assert result["statusDetails"]["message"] == "pairproof: control P (x) failed: cases.py::test_control"
    assert json.loads((tmp_path / "p-result.json").read_text())["status"] == "failed"


def test_a_passed_refusal_stays_passed(tmp_path):
    _result(tmp_path, "r", "cases.py::test_refusal", "passed")
    judged = {"cases": [{"refusals": [{"test": "cases.py::test_refusal", "status": "passed", "reason": ""}]}]}
    assert allure_post.apply_pairing(tmp_path, judged) == 0
    assert json.loads((tmp_path / "r-result.json").read_text())["status"] == "passed"


def test_verdict_is_written_atomically_and_tabled(tmp_path):
    v = {"status": "passed", "counts": {"passed": 1, "not covered": 1},
         "cases": [{"id": "RS-1", "boundary": "resources", "status": "passed",
                    "refusals": [{"status": "passed"}], "controls": {"P": {"status": "passed"}}},
                   {"id": "NT-1", "boundary": "network", "status": "not covered", "refusals": [], "controls": {}}]}
    verdict.write(tmp_path / "v" / "verdict.json", v)
    assert json.loads((tmp_path / "v" / "verdict.json").read_text()) == v
    assert not list((tmp_path / "v").glob("*.tmp"))
    table = verdict.table(v)
    assert "RS-1" in table and "NT-1" not in table and "1 catalogue cases not covered" in table


def test_the_schema_knows_expected_refusals_and_wants_a_run_id():
    """``expected_refusals`` is a list of node ids; a verdict without a run id cannot be tied to its Allure
    results, so the schema refuses it."""
    from pathlib import Path

    from jsonschema import Draft202012Validator
    from support.verdicts import sample_verdict

    schema = json.loads((Path(verdict.__file__).with_name("verdict.schema.json")).read_text())
    v = sample_verdict()
    for case in v["cases"]:
        case["expected_refusals"] = [r["test"] for r in case["refusals"]]
    assert list(Draft202012Validator(schema).iter_errors(v)) == []
    v["cases"][0]["expected_refusals"] = "t::r"
    v["run"] = ""
    errors = sorted(e.json_path for e in Draft202012Validator(schema).iter_errors(v))
    assert errors == ["$.cases[0].expected_refusals", "$.run"]
