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
