"""The sandbox rules (SBX-1..SBX-6) are checks that can fail: each fails on a "sandbox" that breaks its rule.

The fake instance is the test process itself: the host's root, its user, pid and mount namespaces and its
cgroups, which is what a driver that runs the agent unconfined would hand the suite. Each check is asked of it
directly (no driver, no subprocess), and each must say which rule it broke. That they pass on real sandboxes is
``pairproof check-driver reference`` (tests/integration/drivers/test_check_driver.py)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest

from acceptance.contract import PROOF_NAMESPACES, ExecResult, Identity, InstanceRef, Principal, sandbox
from acceptance.contract.checking import Checker, CheckFailed


class SelfAsSandbox:
    """An "instance" that is this very process; ``exec`` does nothing and answers ``rc``."""

    name = "self"

    def __init__(self, *, uid: int | None = None, rc: int = 0) -> None:
        self.uid = os.getuid() if uid is None else uid
        self.rc = rc
        self.ran: list[list[str]] = []

    def identity(self, ref: InstanceRef) -> Identity:
        return Identity(host_pid=os.getpid(), uid=self.uid, gid=os.getgid(),
                        uid_map=Path("/proc/self/uid_map").read_text(),
                        namespaces={ns: os.readlink(f"/proc/self/ns/{ns}") for ns in PROOF_NAMESPACES})

    def exec(self, ref: InstanceRef, argv, *, stdin=None, timeout=60.0) -> ExecResult:
        self.ran.append(list(argv))
        return ExecResult(self.rc, b"", b"denied" if self.rc else b"")


def checker(target: SelfAsSandbox) -> Checker:
    return Checker(target, "pptoken", ref=InstanceRef(Principal("K", "org3", "kit"), "self"))


def test_the_rules_have_stable_ids_in_order():
    assert list(sandbox.RULES) == [f"SBX-{n}" for n in range(1, 7)]


def test_sbx1_fails_when_the_instance_cannot_write_data():
    with pytest.raises(CheckFailed, match=r"could not write /data/\S+ and /tmp/.*the volume must be /data"):
        sandbox.volume(checker(SelfAsSandbox(rc=1)))


def test_sbx1_fails_when_the_host_does_not_find_what_exec_says_it_wrote():
    """exec's word is not taken: the file must be there, through /proc/<host_pid>/root, where FS-1 looks."""
    fake = SelfAsSandbox(rc=0)
    with pytest.raises(CheckFailed, match=r"the host does not find what exec wrote in /data"):
        sandbox.volume(checker(fake))
    assert fake.ran[-1][0] == "/bin/rm"  # what it wrote is removed whatever happened


def test_sbx2_fails_on_a_sandbox_that_sees_the_hosts_root():
    with pytest.raises(CheckFailed, match="the sandbox's root is the host's root"):
        sandbox.visible(checker(SelfAsSandbox()))


def test_sbx3_fails_when_no_process_of_the_namespace_runs_the_agent():
    with pytest.raises(CheckFailed, match=r"no process in the instance's pid namespace runs the profile's"):
        sandbox.agent(checker(SelfAsSandbox()), f"/opt/agent-{secrets.token_hex(6)}")
    with pytest.raises(CheckFailed, match="no profile start process given"):
        sandbox.agent(checker(SelfAsSandbox()), None)


def test_sbx3_finds_a_resident_process_by_its_command_line():
    """The control: this process is in its own pid namespace, and its command line names its program."""
    program = Path("/proc/self/cmdline").read_bytes().split(b"\0")[0].decode()
    assert "runs as host pid" in sandbox.agent(checker(SelfAsSandbox()), program)


def test_sbx4_fails_on_a_sandbox_in_the_hosts_user_namespace_that_keeps_privileges():
    """This process is in the host's (or its container's) user namespace, whose uid_map maps a range, and
    holds capabilities in its bounding set at least: neither arm of the rule holds."""
    with pytest.raises(CheckFailed, match=r"maps more than the instance's uid|holding capabilities"):
        sandbox.user_namespace(checker(SelfAsSandbox()))


def test_sbx4_fails_when_identity_does_not_repeat_the_hosts_uid_map():
    class Misreported(SelfAsSandbox):
        def identity(self, ref):
            real = super().identity(ref)
            return Identity(real.host_pid, real.uid, real.gid, f"{real.uid} {real.uid} 1", real.namespaces)

    with pytest.raises(CheckFailed, match=r"identity\(\)\.uid_map .* is not the host's /proc/\d+/uid_map"):
        sandbox.user_namespace(checker(Misreported()))


def test_sbx5_fails_when_its_namespaces_hold_a_process_of_another_uid():
    """The instance's uid is said to be one that no process of these namespaces runs as: every one of them
    (this process included) is of another uid, as a root helper left in a sandbox's namespaces would be."""
    with pytest.raises(CheckFailed, match=r"processes of another uid than the instance's 1500009999"):
        sandbox.uids(checker(SelfAsSandbox(uid=1_500_009_999)))


def test_sbx6_fails_on_a_sandbox_without_the_default_limits():
    """This process runs under the machine's limits, not a 256 MiB one and a pids limit under 1000."""
    with pytest.raises(CheckFailed, match=r"memory limit is .* MiB: by default at most 256|pids limit is \d+|no "
                                          r"memory cgroup hierarchy"):
        sandbox.limits(checker(SelfAsSandbox()))
