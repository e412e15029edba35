"""FS-1, FS-2, FS-3: private files and platform secrets stay where they belong.

Other realistic ways these properties break, and what sees them:
- A's volume reachable in B by another path (a shared parent bind, an org-wide folder, a symlink farm,
  a second mount of the same device, /proc/<pid>/root of a process B can see): the whole-visible-fs
  scan reads everything B can see (names and link targets too), the mount check compares device and
  inode of every mount, and the path probe tries A's host path and /proc/*/root.
- A's canary copied rather than mounted (a shared cache, a log, a tmp file, an environment variable of a
  process B can see): the scan reads files and /proc environ and cmdline in any encoding.
- A scan that silently saw less (unreadable folders, files cut short, a probe killed mid-report): the
  scan and the dump must prove completeness and find the prober's own canaries and sentinels in the
  same call, or the test is broken (acceptance/harness/probes.py).
- Shared tmp, home, /dev/shm, a runtime folder or IPC (a common bind, a shared tmpfs, the host's /dev/shm,
  the host's IPC namespace): FS-2 writes in every writable place of one sandbox's own mount table and
  makes System V objects, looks in the other, and compares folders' identities and IPC namespaces.
- Secrets reaching the sandbox by environment, a file, a command line, or base64/hex inside a config:
  FS-3's scan and dump, searched for every platform secret and every instance's capabilities.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from acceptance.cases.judges import sharing
from acceptance.cases.judges.detectors import mount_identities, tokens_in, volume_identity
from acceptance.errors import ProofError, TargetError
from acceptance.harness.evidence import attach
from canaries.known import find_known

PROC_ROOT_PROBE = Path(__file__).with_name("inside") / "proc_root_probe.py"

pytestmark = pytest.mark.usefixtures("planted")


def _intruders(case: str):
    return [pytest.param(name, marks=pytest.mark.case(case, "refusal", pair=f"{name}->A"), id=name)
            for name in ("B", "C")]


# -- FS-1 ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("intruder", _intruders("FS-1"))
def test_fs1_whole_visible_fs_scan_finds_none_of_a(intruder, instances, planted, sandbox_host, scan_visible):
    """A scan of everything the intruder's sandbox can see (files, names, /proc environ and cmdline)
    finds no canary of A."""
    seen = scan_visible(sandbox_host(instances[intruder]))
    assert seen & planted.of("A") == set()


@pytest.mark.parametrize("intruder", _intruders("FS-1"))
def test_fs1_a_volume_not_reachable_by_path(agent_profile, intruder, instances, planted, target, sandbox_host):
    """Neither A's host volume path nor /proc/<pid>/root/data of any pid leads the intruder to A's files.

    Every pid the intruder's /proc lists, and every number any of A's processes has on the host or in A's
    pid namespace, is tried; each outcome is recorded (ok, or the errno). The same walk must find the
    intruder's own canaries through its own processes' roots: a probe that read nothing proved nothing.
    Ways it could fail that the probe looks for: a shared pid namespace or a host /proc (another root
    reachable), a shared uid (a root readable), A's volume bound at its host path."""
    host = sandbox_host(instances[intruder])
    a_volume = target.artifacts().volumes[instances["A"].key]
    assert not host.file(str(a_volume)).exists
    for path in agent_profile.state.values():  # A's files where its agent keeps them, at the volume's host path
        if path.startswith("/data/"):
            assert not host.file(f"{a_volume}/{path[len('/data/'):]}").exists
    a_pid = target.identity(instances["A"]).host_pid
    numbers = {str(a_pid), *(_ns_pids(a_pid))}
    quoted = " ".join(host.backend.quote("%s", a) for a in ["/data", *sorted(numbers)])
    out = host.backend.run_with_stdin(f"/usr/bin/python3 -I -S - {quoted}", stdin=PROC_ROOT_PROBE.read_bytes())
    try:
        report = json.loads(out.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise ProofError(f"the /proc/*/root probe gave no report (rc {out.rc}): {out.stderr[-300:]!r}") from None
    read = b"\n".join(base64.b64decode(f["b64"]) for f in report["files"] if "b64" in f)
    found = tokens_in(read, f"the /proc/*/root walk from {intruder}", host.backend.log)
    attach(f"FS-1 /proc/*/root from {intruder}", {"pids tried": report["pids"], "files read": len(report["files"]),
                                                   "bytes read": len(read),
                                                   "unreadable": [f for f in report["files"] if "error" in f]})
    if not set(planted.tokens[intruder].values()) <= found:
        raise ProofError(f"the /proc/*/root walk did not find {intruder}'s own canaries through its own roots: it did not look")
    assert found & planted.of("A") == set()


def _ns_pids(host_pid: int) -> list[str]:
    """The numbers the process ``host_pid`` has in every pid namespace it is in (its NSpid line)."""
    for line in Path(f"/proc/{host_pid}/status").read_text(errors="replace").splitlines():
        if line.startswith("NSpid:"):
            return line.split()[1:]
    return []


@pytest.mark.parametrize("intruder", _intruders("FS-1"))
def test_fs1_no_mount_is_backed_by_a_volume(intruder, instances, sandbox_host):
    """No mount point in the intruder's sandbox is A's volume (same device and inode)."""
    a_volume = volume_identity(sandbox_host(instances["A"]))
    mounts = mount_identities(sandbox_host(instances[intruder]))
    assert a_volume not in mounts.values(), f"A's volume {a_volume} is mounted in {intruder} at " + \
        ", ".join(p for p, i in mounts.items() if i == a_volume)


@pytest.mark.case("FS-1", "P", pair="A->A")
def test_fs1_owner_finds_all_four(instances, planted, sandbox_host, scan_visible, target):
    """A's own scan finds its canaries in memory, transcript, task state and volume, and the agent
    reads each back through the product's path."""
    seen = scan_visible(sandbox_host(instances["A"]))
    assert planted.of("A") <= seen
    for location, token in planted.tokens["A"].items():
        assert token in target.read_back(instances["A"], location)


@pytest.mark.case("FS-1", "X", pair="B->A")
def test_fs1_broken_shared_volume_is_detected(instances, principals, planted, target, sandbox_host, scan_visible):
    """With A's volume mounted into B (under A's uid), the same scan and mount check see A's data."""
    a_volume = volume_identity(sandbox_host(instances["A"]))
    with target.broken_shared_volume(owner=instances["A"], intruder=principals["B"]) as leaky:
        host = sandbox_host(leaky)
        assert planted.of("A") <= scan_visible(host)
        assert a_volume in mount_identities(host).values()


# -- FS-2 ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("intruder", _intruders("FS-2"))
def test_fs2_no_shared_writable_place(intruder, instances, sandbox_host):
    """The intruder writes a fresh marker in every place its own mount table says it can write (/tmp, the
    home, /dev/shm, /dev/mqueue, /run/..., a writable root's open folders) and makes System V IPC objects
    keyed by it; A sees none of them, in those paths or any place of its own; no folder the intruder wrote
    is one of A's (same dev:inode), and the two do not share an IPC namespace. Ways this breaks that the
    check sees: a common bind for tmp or home, the host's /dev/shm bound in, the host's (or one shared) IPC
    namespace, a shared runtime folder, one host folder behind two mounts. Then the same the other way (A
    writes, the intruder looks): a folder read-write in A and read-only in the intruder (or the reverse)
    is written by one side only. The places tried are evidence, and must include /tmp and the home,
    written, or the case proves nothing."""
    exchanges = sharing.both_ways(sandbox_host(instances[intruder]), sandbox_host(instances["A"]), intruder, "A")
    for ex in exchanges:
        attach(f"FS-2 places {ex.writer} wrote, and what {ex.looker} saw", ex.evidence())
    findings = sharing.findings_both_ways(exchanges)
    assert not findings, f"{len(findings)} shared between {intruder} and A: " + "; ".join(findings)


@pytest.mark.case("FS-2", "P", pair="A->A")
def test_fs2_own_writes_visible(instances, sandbox_host):
    """The same write-then-look by A on itself: every place A wrote (/tmp and the home among them) and
    every System V object A made, A finds in the same look."""
    a = sandbox_host(instances["A"])
    ex = sharing.exchange(a, a, "A", "A")
    attach("FS-2 places A wrote, and what A saw", ex.evidence())
    unseen = sharing.unseen_own(ex)
    assert not unseen, "A did not find its own marker in: " + "; ".join(unseen)


@pytest.mark.case("FS-2", "X", pair="B->A")
def test_fs2_broken_shared_tmp_is_detected(principals, target, sandbox_host):
    """Two sandboxes given one tmp folder: the same write-then-look finds the other's file in /tmp and the
    two /tmp folders the same."""
    with target.broken_shared_tmp(owner=principals["A"], intruder=principals["B"]) as (first, second):
        ex = sharing.exchange(sandbox_host(second), sandbox_host(first), "B", "A")
    attach("FS-2 places B wrote, and what A saw", ex.evidence())
    findings = sharing.shared_findings(ex)
    assert "a file B wrote in its /tmp is visible to A at /tmp" in findings, findings
    assert any(f.startswith("B's /tmp is the same folder") for f in findings), findings


# -- FS-3 ------------------------------------------------------------------------------------------

def _capabilities(target, refs) -> set[str]:
    """Every capability the platform holds for these instances (their brokers' grant and model token).
    None at all means the driver handed nothing over, and "no capability found" would be vacuous."""
    found = {}
    for ref in refs:
        held = {c for c in target.capabilities(ref).values() if c}
        if not held:
            raise TargetError(f"the target handed out no capability for {ref.key}: FS-3 cannot look for them")
        found[ref.key] = held
    return set().union(*found.values())


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.case("FS-3", "refusal", pair=f"{n}->platform"), id=n)
                                  for n in ("A", "B", "C")])
def test_fs3_platform_secrets_absent(name, instances, planted, target, sandbox_host, scan_visible, visible_bytes):
    """No platform secret is in the sandbox's files, /proc environ and cmdline of any process, or the
    environment a command inherits: not the provider key, and not the grant or model capability of any
    instance (its own included: its broker holds them), in any encoding."""
    host = sandbox_host(instances[name])
    secrets_ = set(planted.platform.values())
    assert scan_visible(host) & secrets_ == set()
    assert tokens_in(host.run("env; cat /proc/1/environ").stdout_bytes, f"the environment in {name}",
                     host.backend.log) & secrets_ == set()
    # The agent's own run-control key is the one thing its broker holds that its own sandbox holds too.
    capabilities = _capabilities(target, instances.values()) - {target.capabilities(instances[name]).get("runctl")}
    assert find_known(visible_bytes(instances[name], secrets_ | capabilities), secrets_ | capabilities) == set()


@pytest.mark.case("FS-3", "P", pair="A->model")
def test_fs3_model_call_works_via_broker(instances, principals, target):
    """Holding no key, A's agent still gets its model reply: the broker supplies the capability."""
    target.script_model(principals["A"], [{"reply": "reply through the broker"}])
    assert target.turn(instances["A"], "hello model") == "reply through the broker"


@pytest.mark.case("FS-3", "X", pair="B->platform")
def test_fs3_broken_secret_in_env_is_detected(instances, principals, planted, target, sandbox_host, scan_visible,
                                              visible_bytes):
    """A sandbox launched with the secrets (and A's capabilities) in its environment: the same two scans
    find every one."""
    capabilities = dict(target.capabilities(instances["A"]))
    _capabilities(target, [instances["A"]])  # none handed out: the X would compare two empty sets
    with target.broken_secret_in_env(principal=principals["B"],
                       extra={f"LEAKED_{k.upper()}": v for k, v in capabilities.items()}) as leaky:
        assert set(planted.platform.values()) <= scan_visible(sandbox_host(leaky))
        found = {secret for secret, _ in find_known(visible_bytes(leaky), set(capabilities.values()))}
        assert found == set(capabilities.values())
