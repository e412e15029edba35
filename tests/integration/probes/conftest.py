"""Fixtures shared by the tests that run the static probe (``probe/ppscan.c``) and the scans built on it."""

from __future__ import annotations

import os
import pathlib
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def probe() -> pathlib.Path:
    """The static probe this tree builds (``tools/build-probe``), built now if missing or older than its source."""
    binary = pathlib.Path(os.environ.get("PAIRPROOF_PROBE", REPO / "build" / "probe" / "ppscan"))
    source = REPO / "probe" / "ppscan.c"
    if not binary.exists() or binary.stat().st_mtime < source.stat().st_mtime:
        built = subprocess.run([str(REPO / "tools" / "build-probe"), str(binary)], capture_output=True, text=True)
        if built.returncode != 0:
            raise RuntimeError(f"tools/build-probe failed: {built.stderr.strip()}")
    return binary
