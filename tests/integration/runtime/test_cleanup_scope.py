"""clean stays within its state root: another root's live run is never touched, even with --all."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from runtime.controller import Controller
from runtime.isolation import cleanup


def test_clean_all_on_one_root_leaves_another_roots_run_running():
    mine = Path(tempfile.mkdtemp(prefix="pairproof-test-", dir="/var/tmp"))
    theirs = Path(tempfile.mkdtemp(prefix="pairproof-test-", dir="/var/tmp"))
    other = Controller(theirs, "scope-theirs")
    try:
        rec = other.provision("org1", "zoe")
        other.wake(rec.id)
        cleanup.clean(mine, include_live=True)
        assert other.exec(rec.id, ["echo", "alive"]).stdout == b"alive\n"
    finally:
        other.close()
        shutil.rmtree(mine, ignore_errors=True)
        shutil.rmtree(theirs, ignore_errors=True)
