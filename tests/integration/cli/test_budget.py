"""A qualification ends within its budget whatever the target does (issue 28 item 3): a run held open (here a
test that never returns, as a turn held by an agent dripping its answer would be) is stopped at ``--budget``
as Ctrl-C stops it, its instances torn down, and qualify exits 1 with no verdict; before, nothing bounded the
run and a release gate waited for ever."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mutants.catalogue import copy_suite

pytestmark = pytest.mark.slow
DEADLINE = 240.0

# A conftest beside the cases: the first test of the run never returns.
HANGING = """
import time

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    while True:
        time.sleep(3600)
"""


def _qualify(tree: Path, reports: Path, *options: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.Popen([sys.executable, "-m", "acceptance.cli", "qualify", "--case", "CP-1",
                             "--reports-dir", str(reports), *options],
                            cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


@pytest.fixture
def hanging_suite(tmp_path) -> Path:
    tree = copy_suite(tmp_path / "tree")
    conftest = tree / "acceptance" / "cases" / "conftest.py"
    conftest.write_text((conftest.read_text() if conftest.exists() else "") + HANGING)
    return tree


def test_a_run_held_open_ends_at_its_budget_with_no_verdict(hanging_suite, tmp_path):
    reports = tmp_path / "reports"
    started = time.monotonic()
    proc = _qualify(hanging_suite, reports, "--budget", "20")
    code = proc.wait(timeout=DEADLINE)
    err = proc.stderr.read()
    assert code == 1, f"exit {code}: {err[-3000:]}"
    assert "qualify ended without a verdict: the run passed its budget of 20s" in err, err[-3000:]
    assert time.monotonic() - started < DEADLINE
    assert not (reports / "verdict.json").exists()


def test_without_a_budget_the_same_run_does_not_end(hanging_suite, tmp_path):
    """The old behaviour, kept reachable as --budget 0: the run is still going well past where the budget would
    have stopped it (and ends only on an interrupt)."""
    proc = _qualify(hanging_suite, tmp_path / "reports", "--budget", "0")
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=45)
    finally:
        os.killpg(proc.pid, 2)  # Ctrl-C to its group: torn down, exit 130
        assert proc.wait(timeout=DEADLINE) == 130, proc.stderr.read()[-3000:]
