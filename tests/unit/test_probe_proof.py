"""Proof of execution and scan completeness (DESIGN §5 rules 2 and 5), as the probe module enforces
them: each test reproduces a hollow pass the old logic allowed and shows it now raises ProofError."""

from __future__ import annotations

import os

import pytest

from acceptance.contract import Identity, InstanceRef, Principal
from acceptance.errors import ProofError
from acceptance.harness import probes as probe

A = InstanceRef(Principal("A", "org1", "alice"), "a-1")


def _own_identity() -> Identity:
    return Identity(host_pid=os.getpid(), uid=os.getuid(), gid=os.getgid(), uid_map="",
                    namespaces={ns: os.readlink(f"/proc/self/ns/{ns}") for ns in probe.PROOF_NAMESPACES})


def test_the_host_cross_check_refuses_namespaces_no_process_lives_in():
    """Finding 12: the namespace check compared against the pid the driver gave. The host's own /proc
    must show processes in those namespaces."""
    namespaces = dict(_own_identity().namespaces, pid="pid:[1]", net="net:[1]")
    with pytest.raises(ProofError, match="no host process lives"):
        probe.cross_check_on_host(namespaces, os.getuid(), os.getpid())


def test_the_host_cross_check_refuses_processes_of_another_uid():
    """The host namespaces hold processes of many uids: a probe claiming to be one instance's uid there
    is refused."""
    with pytest.raises(ProofError, match="owned on the host by another uid"):
        probe.cross_check_on_host(dict(_own_identity().namespaces), 4_000_000_000, os.getpid())


COMPLETE = dict(files=10, bytes_read=1000, truncated=0, problems=["/x: permission denied [EACCES]"], missing_own=set())


@pytest.mark.parametrize("change, reason", [
    (dict(files=0, bytes_read=0), "it read nothing"),
    (dict(truncated=2), "it cut 2 files short"),
    (dict(problems=["/data/big: Input/output error [EIO]"]), "other than a denial"),
    (dict(problems=["/data/x [EACCES]/big: Input/output error [EIO]"]), "other than a denial"),
    (dict(problems=["/data/x: not scanned: it is in the skip list/y: Input/output error [EIO]"]), "other than a denial"),
    (dict(errors=2), "2 paths failed but its report lists 1"),
    (dict(missing_own={"ppcanary-own"}), "did not find 1 of the prober's own canaries"),
])
def test_an_incomplete_scan_is_not_judged(change, reason):
    """Findings 1 and 2: a scan that read nothing, cut files short, failed on paths, or did not find the
    prober's own canaries used to be judged as an empty (passing) result. Now it raises ProofError."""
    with pytest.raises(ProofError, match=reason):
        probe.judge_completeness("the scan", **{**COMPLETE, **change})


def test_a_complete_scan_is_judged():
    """Control: denials are the boundary holding, not a gap; such a scan is judged."""
    probe.judge_completeness("the scan", **COMPLETE)


def test_fs3_refuses_a_driver_that_hands_out_no_capability():
    """Finding 3: FS-3 and its X compared the capabilities found with the set the driver handed out; with
    none handed out both sides were empty and both passed. Now that is a target error (broken)."""
    from acceptance.cases.test_filesystem import _capabilities
    from acceptance.errors import TargetError

    class NoCapabilities:
        def capabilities(self, ref):
            return {"grant": "", "model": ""}

    with pytest.raises(TargetError, match="handed out no capability"):
        _capabilities(NoCapabilities(), [A])

    class SomeCapabilities:
        def capabilities(self, ref):
            return {"grant": "g-1", "model": "m-1"}

    assert _capabilities(SomeCapabilities(), [A]) == {"g-1", "m-1"}


def test_the_scan_engine_is_the_static_probe_only_when_it_exists_and_the_driver_can_run_it(tmp_path, monkeypatch):
    """Issue 14: the static probe runs by descriptor through the optional core ``exec_binary``; without the
    probe, or without the method, the scan runs detect.py and its record says why. A case's view of the
    target passes the optional core through (no facet to declare) and lacks it when the driver does."""
    from acceptance.contract import TargetView

    class Bare:
        def exec(self, ref, argv, *, stdin=None, timeout=60.0): ...

    class WithBinary(Bare):
        def exec_binary(self, ref, host_path, args, *, env=None, stdin=None, timeout=60.0): ...

    monkeypatch.delenv(probe.PROBE_ENV, raising=False)
    monkeypatch.setattr(probe, "PROBE_BUILT", tmp_path / "build" / "ppscan")
    binary, note = probe.engine_for(TargetView(WithBinary(), "FS-1", []))
    assert binary is None and "no static probe" in note
    built = tmp_path / "ppscan"
    built.write_bytes(b"\x7fELF")
    os.chmod(built, 0o755)
    monkeypatch.setenv(probe.PROBE_ENV, str(built))
    assert probe.engine_for(TargetView(WithBinary(), "FS-1", [])) == (built, f"static probe {built} by descriptor")
    binary, note = probe.engine_for(TargetView(Bare(), "FS-1", []))
    assert binary is None and "no exec_binary" in note
    os.chmod(built, 0o644)
    with pytest.raises(ProofError, match="not an executable file"):
        probe.engine_for(WithBinary())
