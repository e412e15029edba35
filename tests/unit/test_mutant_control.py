"""``pairproof mutants --control-results``: a qualification stands for the unmodified control only when it passes
the release gate whole, for the same target, on this very source; anything short of that is refused, naming why."""

from __future__ import annotations

import pytest

from acceptance.catalogue import load
from acceptance.cli.mutants import control_from
from acceptance.harness.pairing import Declared, Outcome, judge
from mutants import runner
from mutants.errors import MutantError
from reports import identity
from reports import verdict as verdict_report


def _results(tmp_path, *, failing: str = "", judged: dict | None = None):
    outcomes = []
    for case_id, case in load().items():
        outcomes.append(Outcome(Declared(f"t.py::{case_id}", case_id, "refusal"),
                                outcome="failed" if case_id == failing else "passed", proofs=1))
        outcomes += [Outcome(Declared(f"t.py::{case_id}-{r}", case_id, r), proofs=1) for r in case.controls]
    v = judge(outcomes, load())
    v.update(run="0badc0de", target="reference", pytest_exit=1 if failing else 0,
             judged=judged if judged is not None else identity.recompute("reference"))
    for case in v["cases"]:
        case["expected_refusals"] = [r["test"] for r in case["refusals"]]
    verdict_report.write(tmp_path / "verdict.json", v)
    return tmp_path


@pytest.mark.parametrize("what,says", [
    ("failing", "pytest ended with exit status 1"),
    ("other-source", "is not a verdict of what this gate judges (target reference): suite"),
    ("no-allure", "no Allure results"),
])
def test_a_qualification_that_does_not_pass_the_gate_whole_is_no_control(tmp_path, what, says):
    source = runner.source_digest()
    judged = identity.recompute("reference")
    if what == "other-source":
        judged = judged | {"suite": "0" * 64}
    folder = _results(tmp_path, failing="FS-1" if what == "failing" else "", judged=judged)
    with pytest.raises(MutantError) as refused:
        control_from(folder, "reference", source)
    assert says in str(refused.value) and "cannot stand for the control" in str(refused.value), str(refused.value)


def test_a_verdict_of_another_copy_than_the_mutants_is_no_control(tmp_path, monkeypatch):
    """Even a verdict the gate passes names the runtime and suite the mutants are copied from, or it is refused."""
    from reports import gate

    monkeypatch.setattr(gate, "judge", lambda *a, **k: gate.GateResult(True))
    folder = _results(tmp_path)
    control = control_from(folder, "reference", runner.source_digest())
    assert control.exit == 0 and set(control.statuses.values()) == {"passed"}
    with pytest.raises(MutantError, match="judged another runtime than the copy"):
        control_from(folder, "reference", runner.source_digest() | {"runtime": "0" * 64})
