"""The target contract's shape: a core and facets, one registry, a checked view per case, and how a case whose
facet the target lacks is judged (not covered, naming it) by the verdict and by the gate."""

from __future__ import annotations

import json

import pytest

from acceptance import catalogue
from acceptance.contract import CORE, FACETS, TargetView, UndeclaredFacetError, view_violations
from acceptance.errors import TargetError
from acceptance.harness import pairing
from acceptance.targets.reference import ReferenceTarget
from reports import gate, html
from reports import verdict as verdict_report


def test_every_contract_method_is_in_the_core_or_exactly_one_facet():
    everywhere = [*CORE, *(m for f in FACETS.values() for m in f.methods)]
    assert len(everywhere) == len(set(everywhere)), sorted({m for m in everywhere if everywhere.count(m) > 1})
    assert 9 <= len(CORE) <= 12, CORE  # a small core
    assert all(f.methods and f.description for f in FACETS.values())
    # one facet per broken arrangement, named as its method
    broken = [m for m in everywhere if m.startswith("broken")]
    assert broken and all(FACETS[m].methods == (m,) for m in broken)


def test_the_reference_target_has_the_core_and_every_facet():
    assert not [m for m in CORE if not hasattr(ReferenceTarget, m)]
    assert not [name for name, f in FACETS.items() if not issubclass(ReferenceTarget, f.protocol)]


def test_a_driver_without_the_snapshot_methods_lacks_exactly_that_facet():
    from support.partial_reference import WithoutSnapshots

    assert [name for name, f in FACETS.items() if not issubclass(WithoutSnapshots, f.protocol)] == ["snapshots"]
    assert not hasattr(WithoutSnapshots, "restore")


def test_every_catalogue_case_names_known_facets_and_the_loader_refuses_unknown_ones(tmp_path):
    cases = catalogue.load()
    assert all(set(c.facets) <= set(FACETS) for c in cases.values())
    assert {c.id for c in cases.values() if "snapshots" in c.facets} >= {"SN-1", "SN-2", "SN-3"}
    bad = tmp_path / "catalogue.toml"
    entry = '[ZZ-1]\nboundary = "x"\nchannel = "y"\nrefusal = "z"\nseverity = "minor"\n'
    bad.write_text(entry + 'facets = ["snapshot"]\n')
    with pytest.raises(ValueError, match=r"ZZ-1 names facets \['snapshot'\]"):
        catalogue.load(bad)
    bad.write_text(entry)
    with pytest.raises(ValueError, match="ZZ-1 does not say which target facets it needs"):
        catalogue.load(bad)


class _Driver:
    name = "fake"

    def provision(self, principal, **_):
        return "ref"

    def snapshot(self, ref, **_):
        return "snap"

    def rotate(self, ref):
        return "rotated"


def test_the_view_shows_the_core_and_declared_facets_only_and_remembers_what_it_refused():
    view = TargetView(_Driver(), "SN-2", ["snapshots"])
    assert (view.name, view.provision(None), view.snapshot("ref")) == ("fake", "ref", "snap")
    with pytest.raises(UndeclaredFacetError, match=r"SN-2 reached target.rotate of facet 'credentials'.*add "
                                                   r"'credentials' to facets of \[SN-2\]"):
        view.rotate("ref")
    try:
        view.rotate("ref")  # a test that catches the error is still found out
    except Exception:
        pass
    with pytest.raises(UndeclaredFacetError, match="not part of the target contract"):
        view.controller  # noqa: B018
    assert len(view_violations(view)) == 3
    # not a finding (assertion) and not a TargetError a test may expect: the plugin counts it broken
    assert not issubclass(UndeclaredFacetError, (AssertionError, TargetError))
    with pytest.raises(AttributeError):
        view.name = "other"


@pytest.mark.parametrize("reach,remembered", [
    pytest.param(lambda v: v._target, True, id="the wrapped driver by name"),
    pytest.param(lambda v: v._violations.clear(), True, id="clearing what it refused"),
    pytest.param(lambda v: v.violations.clear(), True, id="clearing by the old name"),
    pytest.param(lambda v: v.rotate, True, id="getattr"),
    pytest.param(lambda v: v.__dict__, False, id="__dict__"),
    pytest.param(lambda v: vars(v), False, id="vars"),
])
def test_the_views_own_state_is_no_way_past_it(reach, remembered):
    """The driver behind the view, or the record of what the view refused, is not one attribute away: every
    such reach is refused (and a named one remembered like an undeclared facet, so a test that caught it is
    still broken); the view has no ``__dict__`` to read it from."""
    view = TargetView(_Driver(), "SN-2", ["snapshots"])
    with pytest.raises((UndeclaredFacetError, AttributeError, TypeError)):
        reach(view)
    assert bool(view_violations(view)) == remembered
    with pytest.raises(AttributeError):
        del view.snapshot


def _outcome(nodeid, case, role, lacks=()):
    o = pairing.Outcome(pairing.Declared(nodeid, case, role), outcome="skipped" if lacks else "passed", proofs=1)
    o.lacks = list(lacks)
    return o


def test_a_case_whose_facet_the_target_lacks_is_not_covered_naming_it_and_fails_the_verdict():
    cases = catalogue.load()
    sn2 = cases["SN-2"]
    outcomes = [_outcome("t::r", "SN-2", "refusal", ["snapshots"]), _outcome("t::p", "SN-2", "P", ["snapshots"])]
    verdict = pairing.judge(outcomes, {"SN-2": sn2}, {"SN-2": ["t::r"]})
    [case] = verdict["cases"]
    assert (case["status"], case["lacks"], case["refusals"]) == ("not covered", ["snapshots"], [])
    assert case["reason"].startswith("target lacks snapshots")
    assert all(not c["tests"] for c in case["controls"].values())  # its tests did not run: not counted as skipped
    assert verdict["status"] == "failed" and any("target lacks snapshots" in p for p in verdict["problems"])
    state, why = gate._judge_case(case, sn2)
    assert state == "not covered" and "target lacks snapshots" in why[0]
    verdict.update(run="abcd1234", target="partial", pytest_exit=0)
    assert gate._schema_problems(json.loads(json.dumps(verdict))) == []
    # every report says why: the terminal table, the summary page, JUnit
    assert "SN-2  snapshots  NOT COVERED: target lacks snapshots" in verdict_report.table(verdict)
    assert verdict_report.table(verdict).splitlines()[-1].endswith("1 not covered: target lacks snapshots")
    assert "not covered: target lacks snapshots" in html.render(verdict)
    assert 'message="not covered: target lacks snapshots' in verdict_report.junit(verdict)


def test_the_gate_takes_lacks_on_the_verdicts_word_even_if_the_status_was_edited_to_passed():
    sn2 = catalogue.load()["SN-2"]
    entry = {"id": "SN-2", "status": "passed", "reason": "", "lacks": ["snapshots"], "refusals": [],
             "expected_refusals": [], "controls": {"P": {"description": "", "tests": [], "status": "passed"}}}
    state, why = gate._judge_case(entry, sn2)
    assert state == "not covered" and "target lacks snapshots" in why[0]


def test_a_broken_or_failed_case_says_which_test_made_it_so_and_why():
    sn2 = catalogue.load()["SN-2"]
    refusal = pairing.Outcome(pairing.Declared("t::test_refusal", "SN-2", "refusal"), outcome="passed", proofs=1)
    control = pairing.Outcome(pairing.Declared("t::test_p", "SN-2", "P"), outcome="error", proofs=1,
                              message="TargetError: the restore timed out\nmore detail")
    verdict = pairing.judge([refusal, control], {"SN-2": sn2}, {"SN-2": ["t::test_refusal"]})
    [case] = verdict["cases"]
    assert case["status"] == "broken"
    assert case["reason"] == "test_p broken: TargetError: the restore timed out"
    assert "SN-2 broken: test_p broken: TargetError: the restore timed out" in verdict_report.table(verdict)
