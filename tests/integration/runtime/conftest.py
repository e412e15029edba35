"""Shared fixtures of the runtime tests."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from support import stack

from runtime.controller import Controller
from runtime.isolation import cleanup


@pytest.fixture
def root():
    """A state root for one test, swept of everything its runs left, then removed.

    Instance uids must traverse the root's parents, so it is not under pytest's 0700 tmp_path."""
    path = Path(tempfile.mkdtemp(prefix="pairproof-test-", dir="/var/tmp"))
    yield path
    cleanup.clean(path, include_live=True)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def controller(root):
    """A controller without a platform (no broker: instances have no way out at all), closed after."""
    c = Controller(root, f"ctl-{os.getpid()}")
    yield c
    c.close()


@pytest.fixture
def platform_controller(root):
    """A controller with its platform (product server, model proxy) and a provider mock, closed after."""
    with stack.platform_controller(root, f"plat-{os.getpid()}") as c:
        yield c
