"""A controller with its platform (product server, model proxy, provider mock), as the suite runs it."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from runtime.isolation import cleanup

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support.stack import platform_controller, platform_stack  # noqa: E402  (the tests' helpers, shared)


@contextmanager
def state_root() -> Iterator[Path]:
    """A state root of the run's own, removed with whatever is left in it (processes, cgroups, volumes)."""
    # Instance uids must traverse the state root's parents, so not under pytest's 0700 tmp_path.
    root = Path(tempfile.mkdtemp(prefix="pairproof-bench-", dir="/var/tmp"))
    try:
        yield root
    finally:
        cleanup.clean(root, include_live=True)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def controller():
    with state_root() as root, platform_controller(root, f"bench-{os.getpid()}") as c:
        yield c


@pytest.fixture
def stack_of():
    """``stack_of(**controller_options)``: a controller with its platform and its provider mock (to script the
    model), torn down with the test; at most one per test."""
    with ExitStack() as stack:
        def make(**controller_options):
            root = stack.enter_context(state_root())
            return stack.enter_context(platform_stack(root, f"bench-{os.getpid()}", **controller_options))

        yield make
