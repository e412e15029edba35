"""PS-1: the runtime's posture, proven by behaviour from inside the sandbox as the agent meets it.

The CIS Docker Benchmark's §5 isolation items that no other case catches, asked of any sandbox (bubblewrap's or
a container engine's) the same way, by what the agent can do rather than by what a configuration says:

- the root filesystem is read-only: a file created in every folder outside the places the agent is given to
  write (``WRITABLE``, each only where it is a mount of its own) answers EROFS;
- a seccomp filter is installed (``Seccomp: 2``), and the system calls that need no capability but widen the
  kernel surface (keyctl, add_key, request_key, bpf, perf_event_open, userfaultfd, io_uring_setup, unshare)
  answer EPERM or ENOSYS, while ordinary ones (getpid, open) work;
- no device node anywhere in the visible filesystem outside an allowlist (path and numbers);
- no mount with ``shared:`` propagation;
- the UTS and cgroup namespaces are not the host's (the probe's links against the harness's own and pid 1's);
- a CPU hog (one process more than the CPUs it sees, about a second) is throttled at the limit: the kernel's own
  counters of the cgroup (v2 ``cpu.stat`` nr_throttled/throttled_usec, v1 nr_throttled/throttled_time) grow,
  read on the host before and after, over the instance's cgroup and its ancestors.

Enumerated, not sampled: the walk covers every folder and every entry of the visible filesystem (/proc and /sys
left out), and proves it looked (the counts per mount; a create that succeeds in a declared writable mount; the
allowlisted /dev/null seen as a device). Each item has an X control: an intruder's sandbox with that one guard
removed, which the same probe and the same judge find.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import pytest

from acceptance.errors import ProofError
from acceptance.harness.evidence import attach

PROBE = Path(__file__).with_name("inside") / "posture_probe.py"
# Where an agent is given to write, each exempt only where it is a mount of its own (the volume, its run folder,
# a private /tmp and the memory-backed /dev folders a container engine makes); anything else is the root's.
WRITABLE = ("/data", "/run/agent", "/tmp", "/dev", "/dev/shm", "/dev/mqueue", "/dev/pts")
# The device nodes an agent may have: path -> (major, minor); and the pseudo-terminals of its own devpts.
DEVICES = {"/dev/null": (1, 3), "/dev/zero": (1, 5), "/dev/full": (1, 7), "/dev/random": (1, 8),
           "/dev/urandom": (1, 9), "/dev/tty": (5, 0), "/dev/ptmx": (5, 2), "/dev/pts/ptmx": (5, 2),
           "/dev/console": (5, 1)}
PTS_MAJORS = range(136, 144)
REFUSED = ("keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "unshare")
HOST_NS = ("uts", "cgroup")
HOG_TRIES = 3


def posture(host, sections: str) -> dict:
    """Run the posture probe's ``sections`` inside ``host``'s sandbox, as its agent's commands run; its report.
    No report, or one without a section asked, is a harness failure (broken), never a pass."""
    nonce = secrets.token_hex(6)
    args = " ".join(host.backend.quote("%s", a) for a in (nonce, sections, *WRITABLE))
    out = host.backend.run_with_stdin(f"/usr/bin/python3 -I -S - {args}", stdin=PROBE.read_bytes())
    try:
        report = json.loads(out.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise ProofError(f"the posture probe gave no report (rc {out.rc}): {out.stderr[-300:]!r}") from None
    missing = [s for s in sections.split(",") if s not in report]
    if report.get("nonce") != nonce or missing:
        raise ProofError(f"the posture probe's report is not this run's, or lacks {missing}")
    return report


# -- judges: each returns the problems it found (empty: the guard holds), or raises ProofError when it could not look

def root_problems(walk: dict) -> list[str]:
    """Every folder outside the declared writable mounts whose create did not answer EROFS."""
    proof = walk["proof_create"]
    if proof["answer"] != "created":
        raise ProofError(f"the walk's create did not succeed where the agent is given to write ({proof}): it cannot "
                         "tell a writable folder from a read-only one")
    if not any(n for k, n in walk["counts"].items() if not k.endswith(" exempt")):
        raise ProofError("the walk tried no folder outside the declared writable mounts")
    return [f"{folder} (mount {seen['mount']}): {seen['answer']}" for folder, seen in sorted(walk["open"].items())]


def device_problems(walk: dict) -> list[str]:
    """Every device node the walk saw that is not on the allowlist (by path and numbers)."""
    seen = {(d["path"], d["kind"], d["major"], d["minor"]) for d in walk["devices"]}
    if ("/dev/null", "char", 1, 3) not in seen:
        raise ProofError("the walk did not see /dev/null as a device: it cannot tell a device node from a file")
    return [f"{path}: {kind} {major}:{minor}" for path, kind, major, minor in sorted(seen)
            if not (kind == "char" and (DEVICES.get(path) == (major, minor)
                                        or (path.startswith("/dev/pts/") and major in PTS_MAJORS)))]


def seccomp_problems(report: dict) -> list[str]:
    """No filter, or a surface-widening call the kernel was let to look at."""
    if report.get("error"):
        raise ProofError(f"the seccomp probe could not run: {report['error']}")
    broken = {k: v for k, v in report["ordinary"].items() if v != "ok"}
    if broken:
        raise ProofError(f"ordinary system calls failed in the sandbox ({broken}): the probe cannot judge a filter")
    problems = [] if report["Seccomp"] == "2" else [f"no seccomp filter (Seccomp: {report['Seccomp']})"]
    return problems + [f"{name}: {report['calls'].get(name, 'not tried')}" for name in REFUSED
                       if report["calls"].get(name) not in ("EPERM", "ENOSYS")]


def propagation_problems(report: dict) -> list[str]:
    if not report["mounts"]:
        raise ProofError("the probe read no mount")
    return list(report["shared"])


def host_namespaces() -> dict[str, set[str]]:
    """The host's UTS and cgroup namespaces, as the harness sees them (its own, and pid 1's)."""
    found: dict[str, set[str]] = {}
    for kind in HOST_NS:
        for pid in ("self", "1"):
            try:
                found.setdefault(kind, set()).add(os.readlink(f"/proc/{pid}/ns/{kind}"))
            except OSError:
                continue
    return found


def namespace_problems(report: dict, host: dict[str, set[str]]) -> list[str]:
    problems = []
    for kind in HOST_NS:
        inside = report["ns"].get(kind, "")
        if not inside.startswith(f"{kind}:[") or not host.get(kind):
            raise ProofError(f"cannot compare the {kind} namespace: inside {inside!r}, host {host.get(kind)}")
        if inside in host[kind]:
            problems.append(f"the sandbox's {kind} namespace is the host's ({inside})")
    return problems


def _cpu_stat_dirs(pid: int) -> list[Path]:
    """Every folder whose ``cpu.stat`` counts throttling of ``pid``'s cgroup: its own and its ancestors', in the
    v1 hierarchy that has the cpu controller and in the v2 one, as the host mounts them."""
    mounts: list[tuple[Path, str, set[str]]] = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, rfields = left.split(), right.split()
            if len(rfields) >= 3 and rfields[0] in ("cgroup", "cgroup2") and fields[3] == "/":
                mounts.append((Path(fields[4]), rfields[0], set(rfields[2].split(","))))
    dirs = []
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f.read().splitlines():
            _, controllers, path = line.split(":", 2)
            for mount, fstype, options in mounts:
                if (controllers == "" and fstype == "cgroup2") or (fstype == "cgroup" and "cpu" in controllers.split(",")
                                                                   and "cpu" in options):
                    rel = Path(path.lstrip("/"))
                    for depth in range(len(rel.parts), 0, -1):
                        folder = mount.joinpath(*rel.parts[:depth])
                        if (folder / "cpu.stat").exists():
                            dirs.append(folder)
    return dirs


def throttle_counters(pid: int) -> dict[str, dict[str, int]]:
    """``nr_throttled`` and the throttled time of each cgroup folder that counts ``pid``'s."""
    out = {}
    for folder in _cpu_stat_dirs(pid):
        stat = dict(line.split() for line in (folder / "cpu.stat").read_text().splitlines() if len(line.split()) == 2)
        out[str(folder)] = {k: int(stat[k]) for k in ("nr_periods", "nr_throttled", "throttled_usec", "throttled_time")
                            if k in stat}
    return out


def hog(target, host, ref) -> dict:
    """Run the CPU hog inside ``ref``'s sandbox; the counters before and after, and how much CPU it got."""
    pid = target.identity(ref).host_pid
    before = throttle_counters(pid)
    if not before:
        raise ProofError(f"the host finds no cgroup folder counting CPU throttling for {ref.key} (pid {pid})")
    report = posture(host, "hog")["hog"]
    after = throttle_counters(pid)
    grew = {folder: {k: after[folder][k] - v for k, v in counts.items() if after[folder].get(k, v) != v}
            for folder, counts in before.items() if folder in after}
    return {"hog": report, "grew": {f: g for f, g in grew.items() if g}}


def throttled(samples: list[dict]) -> bool:
    return any(g.get("nr_throttled", 0) > 0 for s in samples for g in s["grew"].values())


def enforced(samples: list[dict]) -> bool:
    """The kernel ran a bandwidth period for the cgroup while the hog ran: ``nr_periods`` counts only under a
    quota (without one no period timer runs, and every counter of cpu.stat stays where it was)."""
    return any(g.get("nr_periods", 0) > 0 for s in samples for g in s["grew"].values())


def cpu_problems(samples: list[dict]) -> list[str]:
    """Empty when the hog was throttled; otherwise what it got and whether any quota was enforced at all."""
    if throttled(samples):
        return []
    used = max(s["hog"]["cpus_used"] or 0 for s in samples)
    return [f"a CPU hog of {samples[0]['hog']['workers']} processes was not throttled in {len(samples)} tries "
            f"(it used up to {used} CPUs; nr_throttled did not grow" +
            ("; the kernel did run bandwidth periods for it)" if enforced(samples)
             else "; no bandwidth period ran for it either: no CPU quota is enforced)")]


# -- the refusal: each item from inside A, as its agent

@pytest.mark.case("PS-1", "refusal", pair="A")
def test_ps1_root_is_read_only_and_no_device_beyond_the_allowlist(instances, sandbox_host):
    """Every folder of A's visible filesystem outside the places it is given to write answers EROFS to a create,
    and no device node anywhere is outside the allowlist."""
    walk = posture(sandbox_host(instances["A"]), "walk")["walk"]
    attach("PS-1 A walk", walk)
    assert root_problems(walk) == []
    assert device_problems(walk) == []


@pytest.mark.case("PS-1", "refusal", pair="A")
def test_ps1_seccomp_filter_refuses_surface_widening_calls(instances, sandbox_host):
    """A's processes run under a seccomp filter, and every surface-widening call answers EPERM or ENOSYS while
    ordinary calls work."""
    report = posture(sandbox_host(instances["A"]), "seccomp")["seccomp"]
    attach("PS-1 A seccomp", report)
    assert seccomp_problems(report) == []


@pytest.mark.case("PS-1", "refusal", pair="A")
def test_ps1_no_shared_mount_propagation(instances, sandbox_host):
    """No mount of A's sandbox propagates to or from a peer (no ``shared:`` in its mountinfo)."""
    report = posture(sandbox_host(instances["A"]), "mounts")["mounts"]
    attach("PS-1 A mounts", report)
    assert propagation_problems(report) == []


@pytest.mark.case("PS-1", "refusal", pair="A")
def test_ps1_uts_and_cgroup_namespaces_are_not_the_hosts(instances, sandbox_host):
    """A's UTS and cgroup namespaces, read from inside, are neither the harness's nor the host pid 1's."""
    report = posture(sandbox_host(instances["A"]), "ns")["ns"]
    host = host_namespaces()
    attach("PS-1 A namespaces", {"inside": report, "host": {k: sorted(v) for k, v in host.items()}})
    assert namespace_problems(report, host) == []


@pytest.mark.case("PS-1", "refusal", pair="A")
def test_ps1_cpu_hog_is_throttled_at_the_limit(instances, target, sandbox_host):
    """A CPU hog in A's sandbox (one process more than the CPUs it sees, about a second) is throttled: the cgroup's
    own throttling counters grow. A busy machine may not let the hog reach the limit: tried up to three times;
    a hog never throttled fails when no bandwidth period ran for the cgroup at all (no quota enforced) or when it
    had every CPU of the machine (a limit it cannot reach is none). On a host too busy for the hog to reach the
    limit, only the enforcement of a finite quota is proven, and the attachment says so (the level is judged
    where the hog has the machine, as on a quiet CI host)."""
    ref = instances["A"]
    samples = []
    for _ in range(HOG_TRIES):
        samples.append(hog(target, sandbox_host(ref), ref))
        if not cpu_problems(samples):
            break
    problems = cpu_problems(samples)
    busy = max(s["hog"]["cpus_used"] or 0 for s in samples) < (os.cpu_count() or 1) - 0.5
    proven = ("throttled at the limit" if not problems else
              "a busy host never let the hog reach the limit: only that a finite quota is enforced (the kernel ran "
              "bandwidth periods for the cgroup) is proven" if enforced(samples) and busy else "nothing")
    attach("PS-1 A CPU hog", {"samples": samples, "proven": proven})
    if problems and enforced(samples) and busy:
        return
    assert problems == []


# -- the X controls: one guard removed each, the same probe and judge see it

@pytest.mark.case("PS-1", "X", pair="B")
def test_ps1_broken_writable_root_is_detected(principals, target, sandbox_host):
    """A sandbox whose root stays writable: the walk's create succeeds in a root folder."""
    with target.broken_writable_root(intruder=principals["B"]) as leaky:
        walk = posture(sandbox_host(leaky), "walk")["walk"]
    attach("PS-1 X writable root", walk)
    assert root_problems(walk) != []


@pytest.mark.case("PS-1", "X", pair="B")
def test_ps1_broken_no_seccomp_is_detected(principals, target, sandbox_host):
    """A sandbox without a seccomp filter: no filter in its status, and the calls reach the kernel."""
    with target.broken_no_seccomp(intruder=principals["B"]) as leaky:
        report = posture(sandbox_host(leaky), "seccomp")["seccomp"]
    attach("PS-1 X no seccomp", report)
    problems = seccomp_problems(report)
    assert problems != []
    assert [p for p in problems if not p.startswith("no seccomp")] != []


@pytest.mark.case("PS-1", "X", pair="B")
def test_ps1_broken_host_device_is_detected(principals, target, sandbox_host):
    """A sandbox given the host's /dev/kmsg: the walk lists it as a device beyond the allowlist."""
    with target.broken_host_device(intruder=principals["B"]) as leaky:
        walk = posture(sandbox_host(leaky), "walk")["walk"]
    attach("PS-1 X host device", walk)
    assert [p for p in device_problems(walk) if p.startswith("/dev/kmsg:")] != []


@pytest.mark.case("PS-1", "X", pair="B")
def test_ps1_broken_shared_propagation_is_detected(principals, target, sandbox_host):
    """A sandbox whose /data mount is shared: its mountinfo line carries ``shared:``."""
    with target.broken_shared_propagation(intruder=principals["B"]) as leaky:
        report = posture(sandbox_host(leaky), "mounts")["mounts"]
    attach("PS-1 X shared propagation", report)
    assert propagation_problems(report) != []


@pytest.mark.case("PS-1", "X", pair="B")
def test_ps1_broken_host_uts_cgroup_ns_is_detected(principals, target, sandbox_host):
    """A sandbox in the host's UTS and cgroup namespaces: both are found to be the host's."""
    with target.broken_host_uts_cgroup_ns(intruder=principals["B"]) as leaky:
        report = posture(sandbox_host(leaky), "ns")["ns"]
    attach("PS-1 X host uts and cgroup namespaces", report)
    assert len(namespace_problems(report, host_namespaces())) == len(HOST_NS)


@pytest.mark.case("PS-1", "X", pair="B")
def test_ps1_broken_no_cpu_limit_is_detected(principals, target, sandbox_host):
    """A sandbox whose cgroup has no CPU quota: the same hog is not throttled."""
    with target.broken_no_cpu_limit(intruder=principals["B"]) as leaky:
        samples = [hog(target, sandbox_host(leaky), leaky)]
    attach("PS-1 X no CPU limit", samples)
    assert cpu_problems(samples) != []
