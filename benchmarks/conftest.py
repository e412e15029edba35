"""A controller with its platform (product server, model proxy, provider mock), as the suite runs it."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from runtime import cleanup
from runtime.controller import Controller
from runtime.platform import Platform, PlatformConfig
from runtime.provider import ProviderMock


@pytest.fixture
def controller():
    # Instance uids must traverse the state root's parents, so not under pytest's 0700 tmp_path.
    root = Path(tempfile.mkdtemp(prefix="pairproof-bench-", dir="/var/tmp"))
    run = f"bench-{os.getpid()}"
    provider = ProviderMock("bench-provider-key").start()
    (root / "runs" / run).mkdir(parents=True)
    platform = Platform(root / "runs" / run, PlatformConfig(provider.url, "bench-provider-key")).start()
    c = Controller(root, run, platform=platform)
    yield c
    c.close()
    platform.stop()
    provider.stop()
    cleanup.clean(root, include_live=True)
    shutil.rmtree(root, ignore_errors=True)
