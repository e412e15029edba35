"""A mutant's run that goes past its timeout is stopped as an interrupt stops it, and what it prints while it
tears down is read meanwhile: a teardown printing more than a pipe holds once blocked on it, was killed
mid-teardown and left its targets behind; and a timeout crashed the whole runner before (CI, host-tmp-shared)."""

from __future__ import annotations

import os
import sys
import time

import pytest

from mutants import runner

# Runs until interrupted, then prints 256 KiB while "tearing down" and exits 130.
STUBBORN = r"""
import signal, sys, time
def teardown(*_):
    sys.stdout.write("torn down " * 26215 + "\n")
    sys.stdout.flush()
    sys.exit(130)
signal.signal(signal.SIGINT, teardown)
print("running", flush=True)
while True:
    time.sleep(3600)
"""


def test_a_run_past_its_timeout_is_stopped_and_its_teardown_output_kept(tmp_path):
    started = time.monotonic()
    with pytest.raises(runner.TimedOut) as stopped:
        runner._run_contained([sys.executable, "-c", STUBBORN], cwd=tmp_path, env=dict(os.environ), timeout=2)
    assert "running" in stopped.value.output and stopped.value.output.count("torn down") == 26215
    assert time.monotonic() - started < runner.STOP_GRACE
