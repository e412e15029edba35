"""The start-up inputs judge (``acceptance/cases/judges/startup_inputs.py``) and the trace it reads
(``acceptance/targets/reference/starttrace.parse``), on made-up traces: each path read lands in exactly one
class, a file the agent could write or create is a finding, and a trace that saw nothing is a ProofError."""

from __future__ import annotations

import hashlib

import pytest

from acceptance.cases.judges import startup_inputs
from acceptance.contract import InstanceRef, Opened, Principal, StartTrace
from acceptance.errors import ProofError
from acceptance.targets.reference.starttrace import parse

REF = InstanceRef(Principal("T", "org3", "tess"), "org3-tess-0", 1)
PINNED = b"platform's bytes"
VOLUME_ROOT = "/srv/pp/runs/r/instances/org3-tess-0/volume"
MOUNTS = "\n".join([
    "1 0 0:40 / / rw - tmpfs tmpfs rw",
    f"2 1 8:1 {VOLUME_ROOT} /data rw - ext4 /dev/sda1 rw",
    "3 2 8:1 /srv/pp/runs/r/instances/org3-tess-0/pinned/0 /data/home/.env ro - ext4 /dev/sda1 ro",
    "4 1 8:1 /srv/pp/runs/r/instances/org3-tess-0/control /run/agent rw - ext4 /dev/sda1 rw",
    f"5 1 8:1 {VOLUME_ROOT}/managed.json /etc/agent/managed.json ro - ext4 /dev/sda1 ro",
    "6 1 8:1 /usr /usr ro - ext4 /dev/sda1 ro",
])
# path -> (exists, writable, nearest folder writable, that folder, digest), as the probe inside would answer
PROBED = {
    "/data/home/.env": ("1", "0", "1", "/data/home", hashlib.sha256(PINNED).hexdigest()),
    "/data/home/active_profile": ("0", "0", "1", "/data/home", "-"),
    "/data/home/hooks": ("1", "0", "0", "/data/home", "/"),
    "/data/home": ("1", "1", "1", "/data", "/"),
    "/data/managed.json": ("1", "0", "1", "/data", "abc"),
    "/run/agent/runctl.key": ("1", "0", "1", "/run/agent", hashlib.sha256(b"key").hexdigest()),
}


def _agent(script: str, stdin: bytes) -> tuple[int, bytes]:
    if "mountinfo" in script:
        return 0, MOUNTS.encode()
    lines = [("\t".join((*PROBED[p], p)) if p in PROBED else "") for p in stdin.decode().split()]
    return 0, "\n".join(lines).encode()


def _trace(*opened: Opened, written: dict | None = None) -> StartTrace:
    return StartTrace(ref=REF, opened=opened, persistent=("/data", "/run/agent"), state=("/data/home/state.db",),
                      written={"/data/home/.env": hashlib.sha256(PINNED).hexdigest(),
                               "/run/agent/runctl.key": hashlib.sha256(b"key").hexdigest()}
                      if written is None else written, tracer="made up")


READS = (
    Opened("/usr/bin/python3", "EXEC", "ok"),  # the launcher's exec, once let go from its gate
    Opened("/usr/lib/python3/json/__init__.py", "O_RDONLY|O_CLOEXEC", "ok"),
    Opened("/data/home/state.db-wal", "O_RDWR|O_CREAT", "ok"),
    Opened("/data/home/.env", "O_RDONLY", "ok"),
    Opened("/data/home/active_profile", "O_RDONLY", "ENOENT"),
    Opened("/data/home/hooks", "O_RDONLY|O_DIRECTORY", "ok", listed=True),
    Opened("/data/home", "O_RDONLY|O_DIRECTORY", "ok"),
    Opened("/data/home/.tmp-x", "O_RDWR|O_CREAT|O_EXCL", "ok"),
    Opened("/data/home/log", "O_WRONLY|O_APPEND", "ok"),
    Opened("/run/agent/runctl.key", "O_RDONLY", "ok"),
    Opened("/etc/agent/managed.json", "O_RDONLY", "ok"),
)


def test_each_path_read_is_classed_and_the_agents_own_inputs_are_findings():
    judged = startup_inputs.judge(_trace(*READS), _agent)
    assert sorted(judged.findings) == ["/data/home/active_profile", "/data/managed.json"]
    assert "can create it" in judged.findings["/data/home/active_profile"]
    assert "can be replaced" in judged.findings["/data/managed.json"]
    classes = judged.classes
    assert classes["the agent's declared state"] == ["/data/home/state.db-wal"]
    assert classes["written by the platform for this start"] == ["/data/home/.env", "/run/agent/runctl.key"]
    assert classes["unwritable by the agent's uid"] == ["/data/home/hooks"]
    assert any(k.startswith("folder opened, its entries never read") and v == ["/data/home"]
               for k, v in classes.items())
    # written new (O_EXCL) or write-only: no input at all
    assert not any("/data/home/.tmp-x" in v or "/data/home/log" in v for v in classes.values())
    assert judged.unclassified == {}


def test_a_platform_file_with_other_bytes_is_a_finding():
    judged = startup_inputs.judge(_trace(*READS, written={"/run/agent/runctl.key": "0" * 64}), _agent)
    assert "other bytes" in judged.findings["/run/agent/runctl.key"]
    assert "/data/home/.env" not in judged.findings  # not recorded, but a read-only mount point


def test_a_trace_that_saw_nothing_is_a_proof_error():
    with pytest.raises(ProofError, match="no open at all"):
        startup_inputs.judge(_trace(), _agent)
    with pytest.raises(ProofError, match="read nothing under"):
        startup_inputs.judge(_trace(Opened("/usr/bin/x", "EXEC", "ok"), Opened("/usr/lib/x", "O_RDONLY", "ok")), _agent)


def test_a_trace_attached_after_the_start_began_is_a_proof_error():
    """No program run in the trace: the tracer attached after the launcher left its gate (a gate let go before
    the observer was attached), and what was read before is not in it, whatever it shows after."""
    with pytest.raises(ProofError, match="no program run"):
        startup_inputs.judge(_trace(*READS[1:]), _agent)


def test_a_program_run_from_the_agents_home_is_judged_as_an_input():
    judged = startup_inputs.judge(_trace(*READS, Opened("/data/home/bin/tool", "EXEC", "ok")), _agent)
    assert "/data/home/bin/tool" in judged.findings or "/data/home/bin/tool" in judged.unclassified


def test_strace_lines_are_read_with_their_folders(tmp_path):
    (tmp_path / "t.10").write_text(
        'openat(AT_FDCWD</data>, "/etc/ld.so.cache", O_RDONLY|O_CLOEXEC) = 3</etc/ld.so.cache>\n'
        'openat(3</data/home>, "config.yaml", O_RDONLY) = -1 ENOENT (No such file or directory)\n'
        'openat(AT_FDCWD</data>, "/data/home/hooks", O_RDONLY|O_NONBLOCK|O_CLOEXEC|O_DIRECTORY) = 4</data/home/hooks>\n'
        'getdents64(4</data/home/hooks>, 0x55d0 /* 2 entries */, 32768) = 48\n'
        'execve("/data/home/bin/tool", ["tool", "a) b"], 0x7ffd /* 5 vars */) = 0\n'
        'execveat(3</data/home>, "hook", ["hook"], 0x1 /* 1 var */, 0) = -1 ENOENT (No such file or directory)\n'
        '+++ exited with 0 +++\n')
    (tmp_path / "strace.err").write_text("strace: Process 10 attached\n")
    assert parse(tmp_path) == (
        Opened("/etc/ld.so.cache", "O_RDONLY|O_CLOEXEC", "ok"),
        Opened("/data/home/config.yaml", "O_RDONLY", "ENOENT"),
        Opened("/data/home/hooks", "O_RDONLY|O_NONBLOCK|O_CLOEXEC|O_DIRECTORY", "ok", listed=True),
        Opened("/data/home/bin/tool", "EXEC", "ok"),
        Opened("/data/home/hook", "EXEC", "ENOENT"),
    )
