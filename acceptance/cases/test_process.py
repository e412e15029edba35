"""PR-1, PR-2, PR-3: processes, host identities and namespaces are per instance, and the agent makes none."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from acceptance.cases.judges.detectors import identity_problems, shared_identities
from acceptance.errors import ProofError
from acceptance.harness.evidence import attach
from canaries.detect import walk_tree

pytestmark = pytest.mark.usefixtures("planted")

PROBE = Path(__file__).with_name("inside") / "process_probe.py"


@dataclass(frozen=True)
class HostProcess:
    """One process of an instance as the host sees it: its host pid, its pid at every pid-namespace level
    (``NSpid``, outermost first) and its start time (clock ticks since boot, the same in every view)."""

    host_pid: int
    nspids: tuple[int, ...]
    start: int
    cmdline: str


def instance_processes(target, ref) -> list[HostProcess]:
    """Every process of ``ref`` from the host's side: those in its pid namespace, and those in its cgroup
    (a process of the instance that escaped its pid namespace is still its process)."""
    ident = target.identity(ref)
    # The instance's own cgroups: its lines that the harness's own process does not share (a v1 hierarchy
    # the platform does not use puts everything at "/").
    cgroups = set(_read(f"/proc/{ident.host_pid}/cgroup").splitlines()) - set(_read("/proc/self/cgroup").splitlines())
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            in_ns = os.readlink(f"/proc/{name}/ns/pid") == ident.namespaces["pid"]
            in_cgroup = bool(cgroups & set(_read(f"/proc/{name}/cgroup").splitlines()))
            if not (in_ns or in_cgroup):
                continue
            status = dict(line.split(":", 1) for line in _read(f"/proc/{name}/status").splitlines() if ":" in line)
            start = int(_read(f"/proc/{name}/stat").rsplit(")", 1)[1].split()[19])
            cmdline = _read(f"/proc/{name}/cmdline").replace("\0", " ").strip()
        except (FileNotFoundError, ProcessLookupError):
            continue  # exited while listed
        except PermissionError:
            continue  # not ours to read (the machine's own supervisors); the run's own processes always are
        found.append(HostProcess(int(name), tuple(int(p) for p in status["NSpid"].split()), start, cmdline))
    if not any(p.host_pid == ident.host_pid for p in found):
        raise ProofError(f"the host-side listing of {ref.key}'s processes missed its own sandbox pid {ident.host_pid}")
    return found


def _read(path: str) -> str:
    """A /proc file as text, its bytes kept readable whatever they are (a process names itself: any bytes)."""
    with open(path, errors="replace") as f:
        return f.read()


def probe_processes(host, pids) -> dict:
    """Run the process probe inside ``host``'s sandbox on ``pids``; its report. No report, or one that did
    not try every pid asked, is a harness failure (broken), never an empty pass."""
    pids = sorted(set(pids))
    quoted = " ".join(host.backend.quote("%s", str(p)) for p in pids)
    out = host.backend.run_with_stdin(f"/usr/bin/python3 -I -S - {quoted}", stdin=PROBE.read_bytes())
    try:
        report = json.loads(out.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise ProofError(f"the process probe gave no report (rc {out.rc}): {out.stderr[-300:]!r}") from None
    missing = [p for p in pids if str(p) not in report["tried"]]
    if missing or "/proc" not in report["views"] or not report["views"]["/proc"].get("pids"):
        raise ProofError(f"the process probe did not look: pids not tried {missing}, views {list(report['views'])}")
    return report


def sightings(report: dict, processes: list[HostProcess]) -> list[str]:
    """Where the probe saw one of ``processes``: a pid in some procfs view whose number is that process's pid
    at some namespace level and whose start time is its start time."""
    ids = {(n, p.start) for p in processes for n in p.nspids}
    return [f"{point}/{pid}" for point, seen in report["views"].items() for pid, start in seen.get("pids", {}).items()
            if (int(pid), start) in ids]


def reached(report: dict, processes: list[HostProcess]) -> list[str]:
    """Pids the probe signalled or traced ("ok") that name one of ``processes`` (same number, same start)."""
    ids = {(n, p.start) for p in processes for n in p.nspids}
    return [f"{pid}: kill {r['kill']}, ptrace {r['ptrace']}" for pid, r in report["tried"].items()
            if (int(pid), r["start"]) in ids and "ok" in (r["kill"], r["ptrace"])]


def _intruders(case: str):
    return [pytest.param(name, marks=pytest.mark.case(case, "refusal", pair=f"{name}->A"), id=name)
            for name in ("B", "C")]


@pytest.mark.parametrize("intruder", _intruders("PR-1"))
def test_pr1_cannot_see_signal_or_ptrace_a(intruder, instances, target, sandbox_host):
    """No process of A (every one the host finds in A's pid namespace or cgroup) shows in any procfs view of
    the intruder's sandbox, and every number any of A's processes has, at any pid-namespace level, is
    tried from the intruder with kill(0) and ptrace: where the intruder's sandbox has no process of that
    number the answer is ESRCH, and where it has one, it is the intruder's own (a different start time).
    Every pid the intruder can see is tried too.

    Ways it could fail that the probe looks for: a pid namespace shared with the host or with A; the host's
    /proc bound into the sandbox at another path; a process of A outside A's pid namespace that B's
    namespace can see; a uid B shares with A, which would turn EPERM into success."""
    a_processes = instance_processes(target, instances["A"])
    numbers = {n for p in a_processes for n in p.nspids}
    report = probe_processes(sandbox_host(instances[intruder]), numbers)
    attach(f"PR-1 {intruder}->A", {"A's processes (host side)": [vars(p) for p in a_processes],
                                   "pids tried from the intruder": len(report["tried"]),
                                   "procfs views": {k: len(v.get("pids", {})) for k, v in report["views"].items()},
                                   "report": report})
    assert sightings(report, a_processes) == []
    assert reached(report, a_processes) == []
    unexpected = {str(n): report["tried"][str(n)] for n in numbers if report["tried"][str(n)]["start"] is None
                  and (report["tried"][str(n)]["kill"], report["tried"][str(n)]["ptrace"]) != ("ESRCH", "ESRCH")}
    assert unexpected == {}, "a pid with no process in the intruder's view did not answer ESRCH"


@pytest.mark.case("PR-1", "P", pair="A->A")
def test_pr1_owner_sees_and_signals_its_agent(agent_profile, instances, target, sandbox_host):
    """The same probe from A sees every process of A's pid namespace (number and start time), its agent among
    them (the profile's command), and both signals and traces each one."""
    own = [p for p in instance_processes(target, instances["A"]) if len(p.nspids) > 1]
    command = agent_profile.process  # what the agent runs once started (its launcher may exec it)
    if not [p for p in own if command in p.cmdline and not p.cmdline.startswith("bwrap")]:
        raise ProofError(f"the host found no agent process in A's pid namespace: {[p.cmdline[:60] for p in own]}")
    report = probe_processes(sandbox_host(instances["A"]), {p.nspids[-1] for p in own})
    attach("PR-1 A->A", {"A's processes in its namespace": [vars(p) for p in own], "report": report})
    assert len(sightings(report, own)) == len(own)
    assert len(reached(report, own)) == len(own)
    assert {(report["tried"][str(p.nspids[-1])]["kill"], report["tried"][str(p.nspids[-1])]["ptrace"]) for p in own} \
        == {("ok", "ok")}


@pytest.mark.case("PR-1", "X", pair="B->A")
def test_pr1_broken_shared_pid_ns_is_detected(instances, principals, target, sandbox_host):
    """A sandbox sharing the host's pid namespace: the same probe sees A's processes, and signalling them
    answers EPERM (visible, not permitted), not ESRCH."""
    a_processes = instance_processes(target, instances["A"])
    with target.broken_shared_pid_ns(intruder=principals["B"]) as leaky:
        report = probe_processes(sandbox_host(leaky), {n for p in a_processes for n in p.nspids})
    attach("PR-1 X", {"A's processes": [vars(p) for p in a_processes], "report": report})
    assert sightings(report, a_processes)
    assert {report["tried"][str(p.host_pid)]["kill"] for p in a_processes} == {"EPERM"}


@pytest.mark.case("PR-2", "refusal", pair="A,B,C")
def test_pr2_each_instance_has_its_own_unprivileged_uid(instances, target, sandbox_host):
    """A, B and C run as three distinct host uids and gids, with no supplementary group that is a host group or
    is shared between them, none root or an existing account or group, and none
    able to take another host identity: each user namespace maps exactly that one uid to itself, or, with no
    user namespace of its own (a container engine without remapping), the process holds no capability in any
    set, the bounding set included, and runs under no_new_privs. The probe inside runs as it (see its proof)."""
    identities = {name: target.identity(ref) for name, ref in instances.items()}
    assert shared_identities(identities) == []
    problems = [p for name, ident in identities.items() for p in identity_problems(name, ident)]
    assert problems == []
    for name, ref in instances.items():
        assert sandbox_host(ref).run("id -u").stdout.strip() == str(identities[name].uid)


@pytest.mark.case("PR-2", "P", pair="A->A")
def test_pr2_uid_inside_is_own_and_owns_its_files(instances, target, sandbox_host):
    """The uid the agent runs as is A's host uid, and the files it wrote are owned by it on the host."""
    ident = target.identity(instances["A"])
    host = sandbox_host(instances["A"])
    assert host.user().uid == ident.uid
    volume = target.artifacts().volumes[instances["A"].key]
    # Every entry as it is (a link's own owner, not its target's), at any depth (an iterative walk).
    owners = {os.lstat(os.path.join(folder, name)).st_uid
              for folder, dirs, files in walk_tree(str(volume)) for name in dirs + files} | {volume.lstat().st_uid}
    assert owners == {ident.uid}


@pytest.mark.case("PR-2", "X", pair="B->A")
def test_pr2_broken_same_uid_is_detected(instances, principals, target, sandbox_host):
    """A sandbox run under A's uid is reported by the same check as sharing A's identity, and one run under
    an existing host account (nobody) is reported by the same identity check the refusal applies; the probe
    inside each runs as that uid."""
    with target.broken_same_uid(owner=instances["A"], intruder=principals["B"]) as leaky:
        sandbox_host(leaky).run("id -u")
        identities = {"A": target.identity(instances["A"]), "B'": target.identity(leaky)}
        assert shared_identities(identities) == [("A", "B'")]
    with target.broken_host_account_uid(intruder=principals["B"], account="nobody") as service:
        ident = target.identity(service)
        assert sandbox_host(service).run("id -u").stdout.strip() == str(ident.uid)
        problems = identity_problems("B'", ident)
    attach("PR-2 X", {"identity of the service-account sandbox": vars(ident), "problems": problems})
    assert [p for p in problems if "host account" in p] != []


USERNS_PROBE = Path(__file__).with_name("inside") / "userns_probe.py"
# Every kind of namespace the probe tries, alone and (but user) together with a new user namespace.
NAMESPACE_KINDS = ("user", "mnt", "pid", "net", "ipc", "uts", "cgroup", "time")
# A user namespace through each call that makes one (a filter refusing ``unshare`` leaves ``clone``/``clone3``).
DOORS = ("clone:user", "clone3:user", "clone:user+mnt")
ATTEMPTS = (*NAMESPACE_KINDS, *(f"user+{k}" for k in NAMESPACE_KINDS if k != "user"), *DOORS)


def probe_namespaces(target, host, ref) -> dict:
    """Run the namespace probe inside ``ref``'s sandbox, as its agent's commands run; its report. A report
    that did not try every kind, left one unanswered, or came from another user namespace than the one the
    host sees the sandbox in is a harness failure (broken), never a pass."""
    out = host.backend.run_with_stdin("/usr/bin/python3 -I -S -", stdin=USERNS_PROBE.read_bytes())
    try:
        report = json.loads(out.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise ProofError(f"the namespace probe gave no report (rc {out.rc}): {out.stderr[-300:]!r}") from None
    unanswered = [a for a in ATTEMPTS if report["tried"].get(a, {}).get("result", "no answer") == "no answer"]
    if unanswered:
        raise ProofError(f"the namespace probe did not try, or got no answer for: {unanswered}")
    seen = target.identity(ref).namespaces.get("user")
    if report["own"]["user"] != seen:
        raise ProofError(f"the namespace probe ran in {report['own']['user']}, not in {ref.key}'s user namespace {seen}")
    return report


def created(report: dict) -> dict[str, dict]:
    """The attempts that succeeded: a namespace the sandbox's process made."""
    return {a: r for a, r in report["tried"].items() if r["result"] == "ok"}


@pytest.mark.case("PR-3", "refusal", pair="A")
def test_pr3_agent_cannot_create_a_user_namespace(instances, target, sandbox_host):
    """From inside A's sandbox, as its agent, ``unshare`` of every kind of namespace (user, mount, pid, net,
    ipc, uts, cgroup, time), alone and together with a new user namespace, and ``clone``/``clone3`` of a new
    user namespace, are refused: a user namespace
    of its own would give the agent every capability in it, and with them the kernel's namespace, mount
    and netfilter code, where most container escapes start. Each errno is attached."""
    ref = instances["A"]
    report = probe_namespaces(target, sandbox_host(ref), ref)
    attach("PR-3 A", {"answers": {a: r["result"] for a, r in report["tried"].items()}, "report": report})
    assert created(report) == {}


@pytest.mark.case("PR-3", "X", pair="B")
def test_pr3_broken_sandbox_lets_its_agent_create_one(principals, target, sandbox_host):
    """A sandbox that lets its processes make a user namespace: the same probe creates one (its
    ``/proc/self/ns/user`` afterwards is a new one), and, in a new user namespace, every other kind too."""
    with target.broken_nested_userns(intruder=principals["B"]) as leaky:
        report = probe_namespaces(target, sandbox_host(leaky), leaky)
    attach("PR-3 X", {"answers": {a: r["result"] for a, r in report["tried"].items()}, "report": report})
    made = created(report)
    assert "user" in made
    assert made["user"]["after"]["user"] != report["own"]["user"]
    assert sorted(a for a in made if a.startswith("user+")) == sorted(a for a in ATTEMPTS if a.startswith("user+"))
    # Each other door the refusal closes opens here too: the probe's clone and clone3 can tell.
    opened = {d for d in DOORS if d in made and made[d]["after"]["user"] != report["own"]["user"]}
    assert opened == set(DOORS), {d: report["tried"][d] for d in DOORS}
