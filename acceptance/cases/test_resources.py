"""RS-1, RS-2, RS-3: memory, pids and disk limits are enforced, shown by a process dying or a write stopping at them.

RS-3 (the volume's size, issue 28 item 2) writes 512 MB into an instance's /data every way an agent could (a file,
a new folder, a sparse file filled, a subvolume of its own) and after a restore, and requires each to stop short;
its P control shows a volume beside a full one takes 4 MB whole (the limit is each instance's own).

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
import shlex
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




# -- RS-3: the volume's size ------------------------------------------------------------------------------------

# Each way of writing 512 MB into /data, by the suite's shell (busybox dd, du); each prints "<dd's rc> <KiB allocated>"
# and removes what it wrote. A sparse file costs nothing until it is filled; a new folder is counted like /data.
# ``_fill`` writes in 16 MiB steps, each synced to disk before the next (dd conv=fsync), and stops at the first
# step that fails: what a write leaves in the instance's page cache is bounded by a step, not by the volume's
# limit. A write of the whole at once could leave up to the limit dirty, charged to the instance's memory beside
# its agent (hermes holds ~90 MB of 256), and a slow disk holds it there: in one CI run the sparse write's shell
# was killed (rc -9, nothing printed) before it reported, as the memory limit kills a probe's processes first
# (``sandbox.COMMAND_OOM_SCORE_ADJ``). A write that cannot report itself is an error, never a pass.
FILL_MB = 512


def _fill(mb: int) -> str:
    """The shell function ``fill FILE``: ``mb`` MiB into FILE in steps; sets ``r`` to the failing step's status."""
    return (f"fill() {{ f=$1; i=0; r=0; while [ $i -lt {mb} ]; do n=16; [ $(({mb} - i)) -lt $n ] && n=$(({mb} - i)); "
            "dd if=/dev/zero of=$f bs=1048576 count=$n seek=$i conv=notrunc,fsync 2>/dev/null || { r=$?; break; }; "
            "i=$((i + n)); done; }; ")


WRITES = {
    "a file": "f=/data/.rs3-file; rm -f $f; fill $f; echo $r $(du -sk $f | cut -f1); rm -f $f",
    "a file in a new folder": ("d=/data/.rs3-dir; mkdir -p $d; fill $d/f; echo $r $(du -sk $d | cut -f1); "
                               "rm -rf $d"),
    "a sparse file filled": ("f=/data/.rs3-sparse; truncate -s 1G $f; fill $f; echo $r $(du -sk $f | cut -f1); "
                             "rm -f $f"),
}
# A btrfs subvolume made inside /data (any writer of a folder may make one) is a quota group of its own: a way
# around a limit held by the volume's. Made by ioctl from the sandbox's python3; refused (EPERM), or not btrfs
# (ENOTTY), it prints "refused ERRNO"; made, the 512 MB write runs inside it.
SUBVOLUME = r"""
import fcntl, os, struct
fd = os.open("/data", os.O_RDONLY | os.O_DIRECTORY)
try:
    fcntl.ioctl(fd, 0x5000940E, bytearray(struct.pack("q4088s", 0, b".rs3-subvol")))  # BTRFS_IOC_SUBVOL_CREATE
    print("created")
except OSError as exc:
    print("refused", exc.errno)
"""
IN_SUBVOLUME = "f=/data/.rs3-subvol/f; fill $f; echo $r $(du -sk $f | cut -f1); rm -f $f"


# Every other folder the instance's uid can write that the host's disk backs: each directory mount point of the
# sandbox's own mount table (read-write, not a memory or kernel filesystem, whose size the memory limit or the
# kernel holds) where it can create a file. The agent's whole writable world, not the folders we thought of.
MEMORY_FS = {"tmpfs", "ramfs", "proc", "sysfs", "devtmpfs", "devpts", "mqueue", "cgroup", "cgroup2", "securityfs",
             "debugfs", "tracefs", "pstore", "bpf", "hugetlbfs", "configfs", "fusectl", "binfmt_misc", "nsfs"}
WRITABLE_MOUNTS = ("awk '{for (i = 7; $i != \"-\"; i++); print $5, $6, $(i + 1)}' /proc/self/mountinfo | "
                   "while read -r point opts fstype; do case \"$opts\" in rw*) ;; *) continue;; esac; "
                   "[ -d \"$point\" ] || continue; t=\"$point/.rs3-probe\"; "
                   "if ( : > \"$t\" ) 2>/dev/null; then rm -f \"$t\"; echo \"$fstype $point\"; fi; done")
ELSEWHERE = "f={point}/.rs3-file; fill $f; echo $r $(du -sk $f | cut -f1); rm -f $f"


def _writable_disk_folders(h) -> list[str]:
    """The sandbox's writable, disk-backed mount points other than /data (``WRITABLE_MOUNTS``)."""
    listed = h.run(WRITABLE_MOUNTS)
    if listed.rc != 0:
        raise AssertionError(f"RS-3 could not list the sandbox's mounts: rc {listed.rc} {listed.stderr[-300:]!r}")
    found = [line.split(" ", 1) for line in listed.stdout.splitlines() if " " in line]
    return sorted({point for fstype, point in found if fstype not in MEMORY_FS and point != "/data"})


def _write(h, how: str, script: str, mb: int = FILL_MB) -> dict:
    """Run one write; what it did: dd's exit status and the KiB it left allocated."""
    result = h.run(_fill(mb) + script)
    rc, kib = (result.stdout.split() + ["?", "?"])[:2]
    if result.rc != 0 or not rc.isdigit() or not kib.isdigit():
        raise AssertionError(f"RS-3's write '{how}' did not report itself: rc {result.rc}, {result.stdout!r} "
                             f"{result.stderr[-300:]!r}")
    return {"how": how, "dd_rc": int(rc), "allocated_kib": int(kib)}


def _stopped_short(seen: dict, mb: int = FILL_MB) -> bool:
    return seen["dd_rc"] != 0 and seen["allocated_kib"] < mb * 1024


@pytest.mark.case("RS-3", "refusal", pair="V")
def test_rs3_a_512mb_write_stops_at_the_volumes_limit_every_way(dedicated, target, sandbox_host):
    """In an instance of its own, 512 MB written into /data four ways stops short each time (no space or quota
    left); then a snapshot of it is restored into it and the plain write stops short again: the limit is the
    volume's, not the first folder's, and comes back with a restored one."""
    vera = dedicated("V", "vera")
    h = sandbox_host(vera)
    seen = [_write(h, how, script) for how, script in WRITES.items()]
    made = h.run("python3 -I -c %s", SUBVOLUME) if h.run("command -v python3").rc == 0 else None
    subvolume = made.stdout.strip() if made is not None else "no python3 in the sandbox: not tried"
    if made is not None and (made.rc != 0 or subvolume.split()[:1] not in (["created"], ["refused"])):
        raise AssertionError(f"RS-3's subvolume attempt did not report itself: rc {made.rc}, {made.stdout!r} "
                             f"{made.stderr[-300:]!r}")
    if subvolume == "created":
        seen.append(_write(h, "a file in a subvolume made inside /data", IN_SUBVOLUME))
    elsewhere = _writable_disk_folders(h)
    seen += [_write(h, f"a file in {point}", ELSEWHERE.replace("{point}", shlex.quote(point))) for point in elsewhere]
    restored = target.restore(target.snapshot(vera), into=vera)
    after = _write(sandbox_host(restored), "a file, after a restore", WRITES["a file"])
    attach("RS-3: 512 MB written into a volume", {"writes": seen, "subvolume": subvolume, "after a restore": after,
                                                  "other writable disk-backed folders": elsewhere})
    through = [w for w in [*seen, after] if not _stopped_short(w)]
    assert through == [], f"a {FILL_MB} MB write into the volume was not stopped: {through}"


@pytest.mark.case("RS-3", "P", pair="U")
def test_rs3_a_4mb_write_lands_whole_beside_a_full_volume(dedicated, sandbox_host):
    """A third instance fills its volume (its write stops where it stops), then another writes 4 MB and gets all of
    it: the limit that stops a write is each volume's own, and writing to a volume works."""
    sandbox_host(dedicated("F", "fill")).run(_fill(FILL_MB) + "fill /data/.rs3-fill")
    una = _write(sandbox_host(dedicated("U", "una")), "4 MB", WRITES["a file"], mb=4)
    attach("RS-3 P: 4 MB beside a full volume", una)
    assert una["dd_rc"] == 0 and una["allocated_kib"] >= 4 * 1024, una
