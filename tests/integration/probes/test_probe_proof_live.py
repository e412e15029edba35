"""Proof of execution and scan completeness (DESIGN §5 rules 2 and 5), as the probe module enforces
them: each test reproduces a hollow pass the old logic allowed and shows it now raises ProofError.

The part of tests/unit/test_probe_proof.py that the unit tier cannot hold: they run probes and sandboxes as processes."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from support.tokens import token

from acceptance.contract import ExecResult, Identity, InstanceRef, Principal
from acceptance.errors import ProofError
from acceptance.harness import probes as probe

A = InstanceRef(Principal("A", "org1", "alice"), "a-1")


def _own_identity() -> Identity:
    return Identity(host_pid=os.getpid(), uid=os.getuid(), gid=os.getgid(), uid_map="",
                    namespaces={ns: os.readlink(f"/proc/self/ns/{ns}") for ns in probe.PROOF_NAMESPACES})


class ReplayingTarget:
    """Runs the first probe for real (on the host), then answers every later one with that first output:
    a cached or replayed answer, which a per-run nonce could not tell from a fresh one."""

    def __init__(self) -> None:
        self.first: ExecResult | None = None

    def identity(self, ref):
        return _own_identity()

    def exec(self, ref, argv, *, stdin=None, timeout=60.0):
        if self.first is None:
            r = subprocess.run(list(argv), input=stdin, capture_output=True, timeout=timeout)
            self.first = ExecResult(r.returncode, r.stdout, r.stderr)
        return self.first


def test_a_replayed_probe_output_has_no_proof(monkeypatch):
    """Finding 12: the nonce was per run, so an output replayed from an earlier probe proved a later one.
    Each probe now has its own nonce: the replay is refused."""
    monkeypatch.setattr(probe, "cross_check_on_host", lambda *a: "skipped in this test")
    host = probe.host(ReplayingTarget(), A, probe.ProbeLog(nonce="unused"))
    assert host.run("echo first").stdout.strip() == "first"
    with pytest.raises(ProofError, match="did not start with the run's proof line"):
        host.run("echo second")


def test_the_host_cross_check_refuses_a_driver_pid_outside_the_namespaces():
    """A driver naming a pid that is not in the probe's namespaces (here: a pid in a new pid namespace,
    while the probe's proof shows the host's) is caught."""
    child = subprocess.Popen(["unshare", "--pid", "--fork", "--kill-child", "sleep", "30"])
    try:
        deadline = time.monotonic() + 10
        inner = None
        while inner is None and time.monotonic() < deadline:
            kids = Path(f"/proc/{child.pid}/task/{child.pid}/children").read_text().split()
            if kids and os.readlink(f"/proc/{kids[0]}/ns/pid") != os.readlink("/proc/self/ns/pid"):
                inner = int(kids[0])
            else:
                time.sleep(0.01)
        assert inner is not None
        with pytest.raises(ProofError, match="outside the probe's namespaces"):
            probe.cross_check_on_host(dict(_own_identity().namespaces), os.getuid(), inner)
    finally:
        child.kill()
        child.wait()


def test_the_host_cross_check_confirms_a_real_sandbox():
    """Control: a process in its own pid and net namespaces, owned by one uid, is confirmed."""
    child = subprocess.Popen(["unshare", "--pid", "--net", "--fork", "--kill-child", "sleep", "30"])
    try:
        deadline = time.monotonic() + 10
        inner = None
        while inner is None and time.monotonic() < deadline:
            kids = Path(f"/proc/{child.pid}/task/{child.pid}/children").read_text().split()
            inner = int(kids[0]) if kids else None
            time.sleep(0 if inner else 0.01)
        namespaces = {ns: os.readlink(f"/proc/{inner}/ns/{ns}") for ns in probe.PROOF_NAMESPACES}
        assert "processes in its namespaces" in probe.cross_check_on_host(namespaces, os.getuid(), inner)
    finally:
        child.kill()
        child.wait()


class HostTarget:
    """Runs probes on the host itself (the proof's host cross-check is switched off in these tests);
    ``cut`` drops the last line of every output, as a probe killed mid-report would leave it."""

    def __init__(self, cut: bool = False) -> None:
        self.cut = cut

    def identity(self, ref):
        return _own_identity()

    def exec(self, ref, argv, *, stdin=None, timeout=60.0):
        r = subprocess.run(list(argv), input=stdin, capture_output=True, timeout=timeout)
        out = r.stdout
        if self.cut and b"pairproof-" in out.rsplit(b"\n", 2)[-2]:
            out = out.rsplit(b"\n", 2)[0] + b"\n"
        return ExecResult(r.returncode, out, r.stderr)


@pytest.mark.parametrize("what", [probe.scan, probe.dump])
def test_a_report_cut_off_before_its_completeness_record_is_refused(what, tmp_path, monkeypatch):
    """Finding 2: the dump swallowed errors and had no end marker, so a partial dump was searched as if
    whole. Both the scan and the dump now end with a completeness record, and a report without it is
    refused."""
    monkeypatch.setattr(probe, "cross_check_on_host", lambda *a: "skipped in this test")
    (tmp_path / "f.txt").write_text("hello")
    host = probe.host(HostTarget(cut=True), A, probe.ProbeLog(nonce="unused"))
    with pytest.raises(ProofError, match="did not finish"):
        what(host, [str(tmp_path)], own=set())


@pytest.mark.parametrize("what", [probe.scan, probe.dump])
def test_a_scan_that_did_not_look_where_the_probers_canaries_are_is_refused(what, tmp_path, monkeypatch):
    """Finding 1: a scan of roots that miss the prober's own places (here: a folder without its /tmp
    sentinel) found nothing and passed. The same call must find the prober's own canaries."""
    monkeypatch.setattr(probe, "cross_check_on_host", lambda *a: "skipped in this test")
    (tmp_path / "f.txt").write_text("hello")
    log = probe.ProbeLog(nonce="unused")
    host = probe.host(HostTarget(), A, log)
    with pytest.raises(ProofError, match="prober's own canaries"):
        what(host, [str(tmp_path)], own={token("own")})
    assert log.evidence[-1]["files"] >= 1 and log.evidence[-1]["missing_own"]
    written = [p for p in log.evidence[-1]["sentinels"] if p.startswith("/")]
    assert written and not [p for p in written if Path(p).exists()], "the sentinels were not removed"


def _sandbox(*flags: str) -> tuple[subprocess.Popen, int]:
    """A process in new namespaces (``flags`` for unshare) and the pid of its inner process."""
    child = subprocess.Popen(["unshare", *flags, "--fork", "--kill-child", "sleep", "60"])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        kids = Path(f"/proc/{child.pid}/task/{child.pid}/children").read_text().split()
        if kids and os.readlink(f"/proc/{kids[0]}/ns/pid") != os.readlink("/proc/self/ns/pid"):
            return child, int(kids[0])
        time.sleep(0.01)
    child.kill()
    raise RuntimeError("the sandbox did not start")


def test_the_host_cross_check_sees_a_foreign_process_that_joined_after_the_first_probe():
    """Review of issue 12: the cross-check was cached per (namespaces, uid, pid), so a process of another
    uid that entered the sandbox's namespaces after its first probe was never seen again. Each probe checks."""
    child, inner = _sandbox("--pid", "--net")
    intruder = None
    try:
        namespaces = {ns: os.readlink(f"/proc/{inner}/ns/{ns}") for ns in probe.PROOF_NAMESPACES}
        probe.cross_check_on_host(namespaces, os.getuid(), inner)
        intruder = subprocess.Popen(["nsenter", "-t", str(inner), "-p", "-n", "--", "setpriv", "--reuid", "65534",
                                     "--regid", "65534", "--clear-groups", "sleep", "60"])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not [p for p in os.listdir("/proc") if p.isdigit()
                                                   and _pid_ns(p) == namespaces["pid"] and _uid(p) == 65534]:
            time.sleep(0.01)
        with pytest.raises(ProofError, match="owned on the host by another uid"):
            probe.cross_check_on_host(namespaces, os.getuid(), inner)
    finally:
        if intruder is not None:
            intruder.kill()
            intruder.wait()
        child.kill()
        child.wait()


def _pid_ns(pid: str) -> str:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return ""


def _uid(pid: str) -> int:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return -1


def test_the_host_cross_check_refuses_a_driver_whose_pid_is_in_another_mount_namespace():
    """Review of issue 12: only the pid and net namespaces were checked on the host. A driver that says
    the sandbox has the host's mount namespace (and runs the probe there: the proof line matches its word)
    while its pid lives in a mount namespace of its own is refused."""
    child, inner = _sandbox("--pid", "--net", "--mount")
    try:
        namespaces = {ns: os.readlink(f"/proc/{inner}/ns/{ns}") for ns in probe.PROOF_NAMESPACES}
        namespaces["mnt"] = os.readlink("/proc/self/ns/mnt")
        with pytest.raises(ProofError, match="mnt"):
            probe.cross_check_on_host(namespaces, os.getuid(), inner)
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize("which", ["scan", "dump"])
def test_a_scan_blind_to_process_environments_does_not_prove_it_looked(tmp_path, monkeypatch, which):
    """Review of issue 12: the probe's own-environment sentinel counted as found wherever in /proc it was,
    and it is also on the command line of the shell that starts the detector: a detector (or dump) that
    reads /proc/<pid>/cmdline but not environ found it there and passed as complete, blind to every secret
    held in an environment. It must be found in an environ."""
    blind = tmp_path / "blind.py"
    (tmp_path / "empty").mkdir()
    source = (probe.DETECT if which == "scan" else probe.DUMP).read_text()
    blind.write_text(source.replace('PROC_FILES = ("environ", "cmdline")', 'PROC_FILES = ("cmdline",)')
                     .replace('for leaf in ("environ", "cmdline"):', 'for leaf in ("cmdline",):'))
    assert blind.read_text() != source
    monkeypatch.setattr(probe, "DETECT" if which == "scan" else "DUMP", blind)
    monkeypatch.setattr(probe, "cross_check_on_host", lambda *a: "skipped in this test")
    host = probe.host(HostTarget(), A, probe.ProbeLog(nonce="unused"))
    with pytest.raises(ProofError, match="its own environment"):
        # (the detector reads /proc per process whatever its roots; the dump is given an empty folder)
        getattr(probe, which)(host, ["/proc"] if which == "scan" else [str(tmp_path / "empty")], own=set())
