"""PR-1, PR-2: processes and host identities are per instance."""

from __future__ import annotations

import pytest

from .detectors import foreign_uids_visible, identity_problems, shared_identities, visible_processes

pytestmark = pytest.mark.usefixtures("planted")

PTRACE_ATTACH = (
    "import ctypes, os, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "rc = libc.ptrace(16, int(sys.argv[1]), None, None)\n"
    "print(rc, os.strerror(ctypes.get_errno()) if rc else 'attached')\n"
)


def _intruders(case: str):
    return [pytest.param(name, marks=pytest.mark.case(case, "refusal", pair=f"{name}->A"), id=name)
            for name in ("B", "C")]


@pytest.mark.parametrize("intruder", _intruders("PR-1"))
def test_pr1_cannot_see_signal_or_ptrace_a(intruder, instances, target, sandbox_host):
    """The intruder sees only its own processes; A's agent, by its host pid, cannot be signalled or
    traced from there."""
    host = sandbox_host(instances[intruder])
    own_uid = target.identity(instances[intruder]).uid
    assert foreign_uids_visible(host, own_uid) == set()
    a_pid = target.identity(instances["A"]).host_pid
    kill = host.run("kill -0 %s", str(a_pid))
    assert kill.rc != 0
    trace = host.run("python3 -c %s %s", PTRACE_ATTACH, str(a_pid))
    assert "attached" not in trace.stdout


@pytest.mark.case("PR-1", "P", pair="A->A")
def test_pr1_owner_sees_and_signals_its_agent(instances, target, sandbox_host):
    """A sees its agent process among its own and may signal it."""
    host = sandbox_host(instances["A"])
    agents = [p for p in host.process.filter() if "agent.py" in p.args]
    assert agents, "A's agent process is not visible to A"
    assert host.run("kill -0 %s", str(agents[0].pid)).rc == 0


@pytest.mark.case("PR-1", "X", pair="B->A")
def test_pr1_broken_shared_pid_ns_is_detected(instances, principals, target, sandbox_host):
    """A sandbox that shares the host pid namespace sees processes that are not its own, A's among them."""
    a_pid = target.identity(instances["A"]).host_pid
    with target.broken("shared-pid-ns", intruder=principals["B"]) as leaky:
        host = sandbox_host(leaky)
        assert foreign_uids_visible(host, target.identity(leaky).uid), "the detector saw no foreign process"
        assert a_pid in visible_processes(host), "A's sandbox is not visible"


@pytest.mark.case("PR-2", "refusal", pair="A,B,C")
def test_pr2_each_instance_has_its_own_unprivileged_uid(instances, target, sandbox_host):
    """A, B and C run as three distinct host uids, none root or an existing account, each user
    namespace mapping exactly that one uid to itself; the probe inside runs as it (see its proof)."""
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
    owners = {p.stat().st_uid for p in volume.rglob("*")} | {volume.stat().st_uid}
    assert owners == {ident.uid}


@pytest.mark.case("PR-2", "X", pair="B->A")
def test_pr2_broken_same_uid_is_detected(instances, principals, target, sandbox_host):
    """A sandbox run under A's uid is reported by the same check as sharing A's identity."""
    with target.broken("same-uid", owner=instances["A"], intruder=principals["B"]) as leaky:
        sandbox_host(leaky).run("id -u")
        identities = {"A": target.identity(instances["A"]), "B'": target.identity(leaky)}
        assert shared_identities(identities) == [("A", "B'")]
