"""Removing a guard by hand makes the matching case fail: the suite has teeth.

Each mutant of ``mutants/catalogue.toml`` is applied to a throwaway copy of the runtime; the suite runs
the mutant's cases against that copy and must report them *failed* (a leak found), not merely broken.
The unmodified copy, run the same way, must pass: that is the control of these tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mutants.catalogue import apply, copy_suite, load

MUTANTS = load()
pytestmark = pytest.mark.slow


def _run_suite(tree: Path, cases: list[str], tmp: Path) -> tuple[int, dict, str]:
    verdict = tmp / "verdict.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", str(tree / "acceptance" / "cases"), "--target", "reference",
         "--pairproof-verdict", str(verdict), *(f"--case={c}" for c in cases), "-p", "no:cacheprovider", "-q"],
        cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, text=True, timeout=900)
    assert verdict.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.returncode, json.loads(verdict.read_text()), proc.stdout


def _status(verdict: dict, case_id: str) -> str:
    return next(c["status"] for c in verdict["cases"] if c["id"] == case_id)


def test_unmodified_copy_passes_every_guarded_case(tmp_path):
    """The control: the same copy-and-run path without a mutation passes all the cases the mutants target."""
    cases = sorted({c for m in MUTANTS for c in m.kills})
    code, verdict, out = _run_suite(copy_suite(tmp_path / "tree"), cases, tmp_path)
    assert code == 0, out[-3000:]
    assert {c: _status(verdict, c) for c in cases} == {c: "passed" for c in cases}


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_removing_the_guard_fails_its_case(mutant, tmp_path):
    """With the guard removed, each case the catalogue names is reported failed and the run exits 1."""
    tree = copy_suite(tmp_path / "tree")
    apply(mutant, tree)
    code, verdict, out = _run_suite(tree, list(mutant.kills), tmp_path)
    assert code == 1, out[-3000:]
    assert {c: _status(verdict, c) for c in mutant.kills} == {c: "failed" for c in mutant.kills}, out[-3000:]


def test_a_mutant_that_no_longer_applies_is_an_error(tmp_path):
    from mutants.catalogue import Edit, Mutant
    from mutants.errors import PatchDoesNotApply

    tree = copy_suite(tmp_path / "tree")
    stale = Mutant("stale", "", ("FS-1",), (Edit("sandbox.py", "text that is not in the runtime", ""),))
    with pytest.raises(PatchDoesNotApply, match="no longer applies"):
        apply(stale, tree)
