"""RS-1, RS-2: memory and pids limits are enforced, shown by a process dying at them."""

from __future__ import annotations

import errno
import json
import os

import pytest

ALLOCATE = "x = b'\\x01' * (400 << 20); print('allocated', len(x))"
# A bounded fork bomb: fork children that wait, until fork fails or 1000 are alive; report, then reap.
FORK_BOMB = """
import json, os, signal
children, error = [], None
for _ in range(1000):
    try:
        pid = os.fork()
    except OSError as exc:
        error = exc.strerror
        break
    if pid == 0:
        signal.pause()
        os._exit(0)
    children.append(pid)
for pid in children:
    os.kill(pid, signal.SIGKILL)
for pid in children:
    os.waitpid(pid, 0)
print(json.dumps({"forked": len(children), "error": error}))
"""
KILLED = (137, -9)


@pytest.mark.case("RS-1", "refusal", pair="A")
def test_rs1_allocation_killed_under_256mb(instances, target, sandbox_host):
    """Allocating (and touching) 400 MB inside A's 256 MB instance kills the allocating process;
    the agent itself keeps answering."""
    result = sandbox_host(instances["A"]).run("python3 -c %s", ALLOCATE)
    assert "allocated" not in result.stdout
    assert result.rc in KILLED, f"expected SIGKILL from the memory limit, got rc {result.rc}: {result.stderr}"
    assert target.turn(instances["A"], "are you there?")


@pytest.mark.case("RS-1", "P", pair="R")
def test_rs1_same_allocation_lives_under_1gb(sandbox_host, dedicated):
    """The same allocation completes in an instance given 1 GB."""
    roomy = dedicated("R", "roomy", memory_limit_mb=1024)
    result = sandbox_host(roomy).run("python3 -c %s", ALLOCATE)
    assert result.rc == 0 and "allocated 419430400" in result.stdout


@pytest.mark.case("RS-2", "refusal", pair="A")
def test_rs2_fork_bomb_contained(instances, target, sandbox_host):
    """A fork bomb in A's instance hits the pids limit long before 1000 processes: fork fails with EAGAIN
    (the pids controller's answer; running out of memory first would be ENOMEM or a kill, which is the
    memory limit doing another limit's job), and the agent keeps answering."""
    result = sandbox_host(instances["A"]).run("python3 -c %s", FORK_BOMB)
    assert result.rc == 0, f"the fork bomb's parent did not survive to report (rc {result.rc})"
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["error"] == os.strerror(errno.EAGAIN), report
    assert report["forked"] < 1000, report
    assert target.turn(instances["A"], "still there?")


@pytest.mark.case("RS-2", "P", pair="A")
def test_rs2_normal_forks_work(instances, sandbox_host):
    """Ten processes at once are fine in the same instance."""
    result = sandbox_host(instances["A"]).run("for i in 1 2 3 4 5 6 7 8 9 10; do sleep 0.1 & done; wait; echo done")
    assert result.rc == 0 and result.stdout.strip() == "done"


