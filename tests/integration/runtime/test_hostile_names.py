"""A process's name is whatever it set (``prctl(PR_SET_NAME)``): any 15 bytes, not UTF-8, a ")" among them
(issue 28 item 8). The platform reads /proc/PID/stat for every liveness check (exec, admission, stop, the crash
loop): the read as text raised UnicodeDecodeError for every one of them once an agent named itself so."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from runtime.isolation.cleanup import process_start_time

# The process names itself, says so on stdout, then waits for its stdin to close.
NAMED = r"""
import ctypes, sys
ctypes.CDLL(None).prctl(15, ctypes.c_char_p(bytes.fromhex(sys.argv[1])), 0, 0, 0)
print("named", flush=True)
sys.stdin.read()
"""


def _old_start_time(pid: int) -> int:
    """process_start_time as it was: /proc/PID/stat read as text."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[19])


@pytest.mark.parametrize("name", [b"evil\xff", b"a) 1 2 3 \xfe", b"\xc3("], ids=["invalid-utf8", "paren-and-fields", "cut-utf8"])
def test_a_process_named_with_any_bytes_keeps_its_start_time_readable(name):
    proc = subprocess.Popen([sys.executable, "-c", NAMED, name.hex()], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"named\n"
        assert Path(f"/proc/{proc.pid}/comm").read_bytes().rstrip(b"\n") == name
        with pytest.raises(UnicodeDecodeError):
            _old_start_time(proc.pid)
        started = process_start_time(proc.pid)
        assert isinstance(started, int) and started > 0
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


@pytest.mark.parametrize("name", [b"evil\xff", b"a) 1 2 3 \xfe"], ids=["invalid-utf8", "paren-and-fields"])
def test_the_harness_reads_a_process_of_any_name(name):
    """The same class on the harness's side: a qualification of the hostile agent (tests/support/hostile_agent.py)
    broke PR-1 with UnicodeDecodeError, its host-side listing reading /proc/PID/status as text. Every reader of a
    process's stat, status or comm in the harness and its judges now keeps whatever bytes are there."""
    from acceptance.cases import test_process
    from acceptance.cases.judges import detectors
    from acceptance.contract import checking
    from acceptance.harness import observers

    proc = subprocess.Popen([sys.executable, "-c", NAMED, name.hex()], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"named\n"
        with pytest.raises(UnicodeDecodeError):
            Path(f"/proc/{proc.pid}/status").read_text()  # how they read it before
        seen = observers.process(proc.pid)
        assert seen is not None and seen.pid == proc.pid
        assert checking.alive(proc.pid)
        assert detectors.supplementary_groups(proc.pid) is not None
        assert isinstance(detectors.privilege_problems("named", proc.pid), list)
        assert "Name:" in test_process._read(f"/proc/{proc.pid}/status")
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
