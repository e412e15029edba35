"""RS-1, RS-2: memory and pids limits are enforced, shown by a process dying at them.

A probe dying at the limit shows the limit holds for the cgroup the probe ran in. Other realistic ways the
property breaks that a probe alone would not see: the agent (or a helper it started, or a process the
platform started beside it) running outside that cgroup (spawned before it was moved in, moved to a
sibling, or put in the right cgroup of one controller and not of the other); a limit set on a parent the
instance's processes are not under; a limit shared with sibling instances (so RS-1's allocation runs after a
sibling with a larger limit was woken). So each refusal also enumerates, from the host's own /proc, every
process in the instance's pid namespace while a probe runs, and requires each to sit in the very memory
and pids cgroups of the probe that was shown to be limited (DESIGN §5 rule 8: enumerate, don't sample).
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import threading

import pytest

from acceptance.errors import HarnessTimeout
from acceptance.harness.evidence import attach
from acceptance.harness.wait import until

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
        os.closerange(0, 3)  # the probe's pipes: if the memory limit kills the parent, the probe still ends
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
CONTROLLERS = ("memory", "pids")


def _cgroups(pid: int) -> dict[str, str]:
    """The host's view of ``pid``'s cgroup per controller (v1: one line each; v2: the unified path)."""
    found = {}
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for controller in controllers.split(",") if controllers else ["unified"]:
                found[controller] = path
    return {c: found.get(c, found.get("unified", "")) for c in CONTROLLERS}


def _namespace_members(pid_ns: str) -> dict[int, bytes]:
    """Every host process in the pid namespace ``pid_ns``: host pid -> its command line."""
    members = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{name}/ns/pid") == pid_ns:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    members[int(name)] = f.read()
        except OSError:
            continue  # ended while we looked
    return members


def processes_outside_the_probes_cgroups(target, ref, host) -> tuple[dict, dict[int, dict]]:
    """While a probe sleeps in ``ref``'s sandbox, the cgroups of that probe and of every process in the
    instance's pid namespace, as the host sees them; returns (the probe's cgroups, the processes whose
    cgroups differ). The probe is found by a marker argument only it carries."""
    marker = f"{1 + secrets.randbelow(10**6) / 10**7:.7f}"
    pid_ns = target.identity(ref).namespaces["pid"]
    sleeper = threading.Thread(target=host.run, args=("sleep %s", marker), daemon=True)
    sleeper.start()
    try:
        members: dict = {}

        def probe_seen() -> list[int]:
            members.clear()
            members.update(_namespace_members(pid_ns))
            return [pid for pid, cmd in members.items() if cmd == b"sleep\0" + marker.encode() + b"\0"]

        probe = until(probe_seen, f"the probe 'sleep {marker}' showing up in {ref.key}'s pid namespace", 20, every=0.01)
        own = _cgroups(probe[0])
        others = {}
        for pid, cmd in members.items():
            try:
                seen = _cgroups(pid)
            except OSError:
                continue
            if seen != own:
                others[pid] = {"cmdline": cmd.replace(b"\0", b" ").decode(errors="replace")[:120], **seen}
        if len(members) < 2:
            raise HarnessTimeout(f"only the probe was found in {ref.key}'s pid namespace: the agent is not there")
    finally:
        sleeper.join(timeout=30)
    attach("processes of the instance and their cgroups",
           {"probe": own, "processes_in_namespace": len(members), "outside": others})
    return own, others


@pytest.mark.case("RS-1", "refusal", pair="A")
def test_rs1_allocation_killed_under_256mb(instances, target, sandbox_host, dedicated):
    """Allocating (and touching) 400 MB inside A's 256 MB instance kills the allocating process;
    the agent itself keeps answering. The allocation runs after another instance with a 1 GB limit was
    woken: the limit that stops it must be A's own, not one A shares with its siblings (written on the run's
    parent cgroup, where whichever instance woke last sets it for all)."""
    dedicated("R", "rhea", memory_limit_mb=1024)
    result = sandbox_host(instances["A"]).run("python3 -c %s", ALLOCATE)
    assert "allocated" not in result.stdout
    assert result.rc in KILLED, f"expected SIGKILL from the memory limit, got rc {result.rc}: {result.stderr}"
    assert target.turn(instances["A"], "are you there?")
    _, outside = processes_outside_the_probes_cgroups(target, instances["A"], sandbox_host(instances["A"]))
    assert outside == {}, f"processes of A outside the memory cgroup the limit was shown in: {outside}"


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
    _, outside = processes_outside_the_probes_cgroups(target, instances["A"], sandbox_host(instances["A"]))
    assert outside == {}, f"processes of A outside the pids cgroup the limit was shown in: {outside}"


@pytest.mark.case("RS-2", "P", pair="A")
def test_rs2_normal_forks_work(instances, sandbox_host):
    """Ten processes at once are fine in the same instance."""
    result = sandbox_host(instances["A"]).run("for i in 1 2 3 4 5 6 7 8 9 10; do sleep 0.1 & done; wait; echo done")
    assert result.rc == 0 and result.stdout.strip() == "done"


