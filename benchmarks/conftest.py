"""A controller with its platform (product server, model proxy, provider mock), as the suite runs it."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from runtime import cleanup

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support.stack import platform_controller  # noqa: E402  (the tests' helpers, shared)


@pytest.fixture
def controller():
    # Instance uids must traverse the state root's parents, so not under pytest's 0700 tmp_path.
    root = Path(tempfile.mkdtemp(prefix="pairproof-bench-", dir="/var/tmp"))
    try:
        with platform_controller(root, f"bench-{os.getpid()}") as c:
            yield c
    finally:
        cleanup.clean(root, include_live=True)
        shutil.rmtree(root, ignore_errors=True)
