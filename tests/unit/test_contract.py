"""The target contract's shape: a core and facets, one registry, a checked view per case, and how a case whose
facet the target lacks is judged (not covered, naming it) by the verdict and by the gate."""

from __future__ import annotations

import ast
import inspect
import json
import re
from pathlib import Path

import pytest

from acceptance import catalogue
from acceptance.contract import (
    CORE,
    FACETS,
    Lab,
    Principal,
    Target,
    TargetView,
    UndeclaredFacetError,
    members,
    view_violations,
)
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
    state, why = gate.judge_case(case, sn2)
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
    state, why = gate.judge_case(entry, sn2)
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


CONTRACT = Path(__file__).resolve().parents[2] / "acceptance" / "contract"
# The contract's one consumer of the rest of acceptance (conformance.py's docstring names both arrows).
CONFORMANCE_ARROWS = {("conformance.py", "acceptance.catalogue"), ("conformance.py", "acceptance.harness.lab")}


def _imports(tree: ast.AST) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    return found


def test_the_contract_imports_nothing_of_acceptance_but_its_errors():
    """Drivers and the harness both stand on the contract: it stands on nothing of theirs (at import time or
    inside a function), but for the two arrows of check-driver's runner, named."""
    arrows = set()
    for path in sorted(CONTRACT.rglob("*.py")):
        for name in _imports(ast.parse(path.read_text())):
            if name.startswith("acceptance.") and not name.startswith(("acceptance.contract", "acceptance.errors")):
                arrows.add((path.relative_to(CONTRACT).as_posix(), name))

    def named(where: str, name: str) -> bool:
        return any(where == f and (name == m or name.startswith(m + ".")) for f, m in CONFORMANCE_ARROWS)
    assert sorted(a for a in arrows if not named(*a)) == []
    assert {(f, m) for f, m in CONFORMANCE_ARROWS if any(named(f, n) for g, n in arrows if g == f)} \
        == CONFORMANCE_ARROWS  # the allowance is not stale


def test_every_public_name_of_the_contract_is_exported():
    import acceptance.contract as contract

    assert sorted(contract.__all__) == sorted({*contract.__all__} & set(dir(contract)))
    assert len(contract.__all__) == len(set(contract.__all__))
    assert {"PROOF_NAMESPACES", "Lab", "Target", "FACETS", "TargetView"} <= set(contract.__all__)


def _drivers() -> list[type]:
    import sys

    from support.local_target import LocalTarget
    from support.partial_reference import WithoutSnapshots

    from acceptance.targets.docker import DockerTarget
    from acceptance.targets.hermes import HermesTarget
    from acceptance.targets.hermes.unguarded import HermesUnguardedTarget

    example = Path(__file__).resolve().parents[2] / "examples" / "local-driver"
    sys.path.insert(0, str(example))
    try:
        from nsbox_driver import NsBoxDriver
    finally:
        sys.path.pop(0)
        # Leave no module of the example behind: another test asks whether it imports without that path.
        for name in [n for n, m in sys.modules.items() if str(getattr(m, "__file__", "") or "").startswith(str(example))]:
            del sys.modules[name]
    return [ReferenceTarget, DockerTarget, HermesTarget, HermesUnguardedTarget, NsBoxDriver, LocalTarget,
            WithoutSnapshots]


def test_every_driver_takes_what_the_harness_passes_to_provision():
    """The core signature is the harness's word: ``settings`` (TS-2, MD-3, MD-4), ``memory_limit_mb`` (RS-1),
    ``request_id``; every driver in the tree binds all of them."""
    core = inspect.signature(Target.provision).parameters
    assert [n for n, p in core.items() if p.kind is p.KEYWORD_ONLY] == ["memory_limit_mb", "settings", "request_id"]
    for driver in _drivers():
        inspect.signature(driver.provision).bind(None, Principal("A", "org1", "alice"), memory_limit_mb=512,
                                                 settings={"model": "x"}, request_id="req-1")


def test_the_lab_protocol_is_what_drivers_use_of_the_lab_and_what_the_lab_has():
    from acceptance.harness.lab import Lab as RealLab

    assert inspect.signature(RealLab.connect) == inspect.signature(Lab.connect)
    root = Path(__file__).resolve().parents[2]
    sources = [*(root / "acceptance" / "targets").rglob("*.py"), *(root / "examples").rglob("*.py")]
    used = {m for path in sources for m in re.findall(r"\blab\.(\w+)\(", path.read_text())}
    assert used and used <= set(members(Lab)), used - set(members(Lab))
