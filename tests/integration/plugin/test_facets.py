"""Facets through the plugin, from outside with pytester on the local target (the core and no facet): a case
whose facet the target lacks is not covered, naming it, its tests not run; a test that reaches a facet its
case does not declare is broken, naming the facet, even when it catches the error."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

SUPPORT = str(Path(__file__).resolve().parents[2])
CHECKOUT = str(Path(__file__).resolve().parents[3])
MODES = [pytest.param([], id="single"), pytest.param(["-n", "2"], id="xdist")]

# FS-1 needs broken_shared_volume, which the local target does not have.
LACKING = """
import pytest
from pathlib import Path

RAN = Path({ran!r})

@pytest.mark.case("FS-1", "refusal", pair="B->A")
def test_refusal(sandbox_host, instances):
    RAN.joinpath("refusal").touch()
    assert sandbox_host(instances["A"]).run("true").rc == 0

@pytest.mark.case("FS-1", "P", pair="A")
def test_p(sandbox_host, instances):
    RAN.joinpath("P").touch()

@pytest.mark.case("FS-1", "X", pair="B->A")
def test_x(target, principals, instances):
    RAN.joinpath("X").touch()

@pytest.mark.case("RS-1", "refusal", pair="A")
def test_rs1(sandbox_host, instances):
    assert sandbox_host(instances["A"]).run("true").rc == 0

@pytest.mark.case("RS-1", "P", pair="A")
def test_rs1_p(sandbox_host, instances):
    assert sandbox_host(instances["A"]).run("echo ok").stdout.strip() == "ok"
"""

# RS-1 declares no facet; its refusal reaches snapshots.
UNDECLARED = """
import pytest

@pytest.mark.case("RS-1", "refusal", pair="A")
def test_refusal(sandbox_host, instances, target):
    assert sandbox_host(instances["A"]).run("true").rc == 0
    {body}

@pytest.mark.case("RS-1", "P", pair="A")
def test_control(sandbox_host, instances):
    assert sandbox_host(instances["A"]).run("echo ok").stdout.strip() == "ok"
"""


@pytest.fixture
def run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([CHECKOUT, SUPPORT]))

    def go(source: str, *args: str):
        pytester.makepyfile(test_cases=source)
        verdict = pytester.path / "verdict.json"
        result = pytester.runpytest_subprocess(
            "--target", "support.local_target:create", "--pairproof-verdict", str(verdict), "-p", "no:cacheprovider", *args)
        return result, (json.loads(verdict.read_text()) if verdict.exists() else None)
    return go


def _case(verdict: dict, case_id: str) -> dict:
    return next(c for c in verdict["cases"] if c["id"] == case_id)


@pytest.mark.parametrize("mode", MODES)
def test_a_case_whose_facet_the_target_lacks_is_not_covered_naming_it(run, pytester, mode):
    ran = pytester.path / "ran"
    ran.mkdir()
    result, verdict = run(LACKING.format(ran=str(ran)), *mode)
    fs1 = _case(verdict, "FS-1")
    assert (fs1["status"], fs1["lacks"]) == ("not covered", ["broken_shared_volume"])
    assert fs1["reason"].startswith("target lacks broken_shared_volume")
    assert fs1["refusals"] == [] and not any(c["tests"] for c in fs1["controls"].values())
    assert list(ran.iterdir()) == []  # none of its tests ran, the refusal included
    assert _case(verdict, "RS-1")["status"] == "passed"  # a case of the core alone runs on the same target
    assert verdict["status"] == "failed"
    assert result.ret != 0  # pytest saw only skips and passes; the verdict fails the session
    result.stdout.fnmatch_lines(["*FS-1*NOT COVERED: target lacks broken_shared_volume*"])


@pytest.mark.parametrize("body", [
    pytest.param("target.snapshot(instances['A'])", id="raised"),
    pytest.param("try:\n        target.snapshot(instances['A'])\n    except Exception:\n        pass", id="caught"),
])
@pytest.mark.parametrize("mode", MODES)
def test_reaching_an_undeclared_facet_is_broken_naming_it(run, body, mode):
    result, verdict = run(UNDECLARED.format(body=body), *mode)
    [refusal] = _case(verdict, "RS-1")["refusals"]
    assert refusal["status"] == "broken"
    assert "UndeclaredFacetError: RS-1 reached target.snapshot of facet 'snapshots'" in refusal["reason"]
    assert _case(verdict, "RS-1")["status"] == "broken" and result.ret != 0


WHOLE_DRIVER = """
import pytest

@pytest.fixture
def driver(pairproof_target):
    return pairproof_target

@pytest.mark.case("RS-1", "refusal", pair="A")
def test_refusal(sandbox_host, instances, {arg}):
    assert sandbox_host(instances["A"]).run("true").rc == 0

@pytest.mark.case("RS-1", "P", pair="A")
def test_control(sandbox_host, instances):
    assert sandbox_host(instances["A"]).run("echo ok").stdout.strip() == "ok"
"""


@pytest.mark.parametrize("arg,asking", [("pairproof_target", "the test"), ("driver", "fixture driver")])
def test_a_case_that_asks_for_the_whole_driver_is_broken_naming_it(run, arg, asking):
    """The whole driver would reach every facet past the case's view: a case's test, or a fixture a case
    module defines, that asks for it is broken, even when it uses nothing of it."""
    result, verdict = run(WHOLE_DRIVER.format(arg=arg))
    [refusal] = _case(verdict, "RS-1")["refusals"]
    assert refusal["status"] == "broken" and f"{asking}" in refusal["reason"] and "pairproof_target" in refusal["reason"]
    assert _case(verdict, "RS-1")["status"] == "broken" and result.ret != 0
