"""The hostile agent (tests/support/hostile_agent.py, issue 28): what the platform does as root with the volume
of an agent that fights back, and what a qualification says when the agent kills the harness's probes.

The host-side audit is the kernel's: an inotify watch on a folder of the host that only root may read, holding
a synthetic secret, to which the agent's links point (a link straight at the file, and ``/data/notes`` swapped
between a folder and a link to the folder every millisecond). Every open or read of the folder or the file
while root snapshots, restores and measures the volume is an event; there must be none, and the secret must be
in nothing the instance gets back.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from support.inotify import Watch

from acceptance.contract import Principal
from acceptance.targets import TargetOptions, profiles
from acceptance.targets.reference import create
from runtime import footprint
from runtime.isolation import cleanup
from runtime.wait import until

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[3]
HOSTILE = ROOT / "tests" / "support" / "hostile_agent.toml"
ROUNDS = 15
@pytest.fixture
def state_dir():
    path = Path(tempfile.mkdtemp(prefix="pairproof-hostile-", dir="/var/tmp"))
    yield path
    cleanup.clean(path, include_live=True)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def outside(tmp_path):
    """A host folder only root may read, with a synthetic secret in it: what the agent's links point at."""
    folder = Path(tempfile.mkdtemp(prefix="pairproof-hostile-outside-", dir="/var/tmp"))
    os.chmod(folder, 0o700)
    secret = folder / "secret"
    token = f"hostile-host-secret-{secrets.token_hex(8)}"
    secret.write_text(token + "\n")
    os.chmod(secret, 0o600)
    yield secret, token
    shutil.rmtree(folder, ignore_errors=True)


def _profile(tmp_path: Path, marker: Path, kill: bool) -> Path:
    """The hostile profile with the marker's path and the killer switched on or off (its files by full path)."""
    text = HOSTILE.read_text().replace('env = { TINY_MODEL_URL = "{broker}" }',
                                       f'env = {{ TINY_MODEL_URL = "{{broker}}", HOSTILE_MARKER = "{marker}", '
                                       f'HOSTILE_KILL = "{int(kill)}" }}')
    support = HOSTILE.parent
    text = text.replace('files = ["hostile_agent.py", "tiny_agent.py"]',
                        f'files = ["{support / "hostile_agent.py"}", "{support / "tiny_agent.py"}"]')
    path = tmp_path / "hostile.toml"
    path.write_text(text)
    return path


def _host_files(folder: Path) -> dict[str, bytes]:
    """Every regular file under ``folder`` read by descriptor, no link followed (the test's own reading of the
    volume must not be the thing that reads outside it)."""
    found = {}
    for root, _dirs, files, root_fd in os.fwalk(folder):
        for name in files:
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=root_fd)
            except OSError:
                continue
            try:
                if os.path.stat.S_ISREG(os.fstat(fd).st_mode):
                    found[f"{root}/{name}"] = os.read(fd, 1 << 20)
            finally:
                os.close(fd)
    return found


def test_root_side_work_on_a_hostile_volume_reads_nothing_outside_it(state_dir, outside, tmp_path):
    """Snapshots, restores and measures of a running hostile instance while it swaps a folder for a link to the
    outside folder every millisecond, and links to the secret itself: the kernel reports no open or read of the
    outside folder or the secret, no snapshot restored brings the secret in, the agent's ``evil\\xff`` name breaks
    nothing, and the instance still answers a turn after it all."""
    secret, token = outside
    profile = profiles.load(str(_profile(tmp_path, secret, kill=False)))
    target = create(TargetOptions(run=f"hostile-{os.getpid()}", state_dir=state_dir, secrets={}, profile=profile))
    watch = None
    try:
        ref = target.provision(Principal("H", "org1", "hostile"))
        volume = target.controller.volume_path(ref.key)
        until(lambda: (volume / "marker").is_symlink() and (volume / "sock").exists(), 10,
              "the hostile agent did not lay its traps")
        names = {_safe_comm(Path(f"/proc/{pid}")) for pid in target.controller.sandbox(ref.key).cgroup.pids()}
        assert b"evil\xff\n" in names, names  # it named itself so, and everything after runs with that name
        watch = Watch(secret.parent, secret)
        for _ in range(ROUNDS):
            snap = target.snapshot(ref)
            footprint._blocks_bytes(volume)
            ref = target.restore(snap, ref)
        events = watch.events()
        assert events == [], f"root touched the folder outside the instance's volume: {events[:10]}"
        got_back = {path: data for path, data in _host_files(volume).items() if token.encode() in data}
        assert got_back == {}
        # Links came back as links (never followed in, never dropped): the agent's own layout, the marker a link.
        assert os.readlink(volume / "marker") == str(secret)
        target.script_model(ref.principal, [{"reply": "still here"}])
        assert target.turn(ref, "are you there") == "still here"
    finally:
        if watch is not None:
            watch.close()
        target.close()


def _safe_comm(proc: Path) -> bytes:
    try:
        return (proc / "comm").read_bytes()
    except OSError:
        return b""


def _tiny_cases() -> list[str]:
    """The cases the tiny agent passes (tests/integration/profiles/test_second_profile.py), and PB-1."""
    from acceptance import catalogue

    arrangements = {"broken_shared_volume", "broken_shared_tmp", "broken_shared_pid_ns", "broken_nested_userns",
                    "broken_same_uid", "broken_host_account_uid", "broken_open_egress", "broken_secret_in_env"}
    core = sorted(c.id for c in catalogue.load().values() if set(c.facets) <= {"broker"} | arrangements
                  and c.id != "NT-5")
    return [*core, "FS-3", "MD-1", "PB-1"]


def test_a_qualification_of_an_agent_that_kills_the_probes_ends_with_a_verdict_and_no_false_pass(state_dir, outside,
                                                                                                tmp_path):
    """With the killer on, every process of the platform's that the agent can see dies within milliseconds: the
    shell probes, the harness's commands. The qualification still ends, within its budget, with a verdict; no
    case whose refusal rests on a killed probe passes (each such test is broken, with the proof it lacked); the
    static probe, held out of the agent's reach, is the one probe it could not kill."""
    secret, _token = outside
    reports = tmp_path / "reports"
    cases = [arg for case in _tiny_cases() for arg in ("--case", case)]
    done = subprocess.run(
        [sys.executable, "-m", "acceptance.cli", "qualify", "--profile", str(_profile(tmp_path, secret, kill=True)),
         "--state-dir", str(state_dir), "--reports-dir", str(reports), "--budget", "900", *cases],
        cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 1, done.stdout[-3000:]
    verdict = json.loads((reports / "verdict.json").read_text())  # a verdict, within the budget
    run = {case["id"]: case for case in verdict["cases"] if case["status"] != "not covered"}
    assert set(run) == set(_tiny_cases()), sorted(run)
    assert verdict["status"] != "passed"
    assert {case["status"] for case in run.values()} <= {"passed", "failed", "broken"}
    # The attack landed (probes killed: rc -9, no proof line) and each case it reached says so; nothing else broke
    # them (a name that is not UTF-8 once broke PR-1's host-side listing with UnicodeDecodeError).
    broken = {cid: case["reason"] for cid, case in run.items() if case["status"] == "broken"}
    assert broken, "no probe was killed: the hostile agent's killer did not run"
    assert all("rc -9" in why or "-9" in why or "ProofError" in why for why in broken.values()), broken
    assert not any("UnicodeDecodeError" in why for why in broken.values()), broken
    # A case that passed did so on probes that ran unharmed: every test of it has proof of execution (the plugin
    # refuses a refusal without; a killed probe is no proof), never on the absence of an answer.
    for cid, case in run.items():
        if case["status"] == "passed":
            assert all(t.get("proofs", 1) > 0 for t in case.get("refusals", [])), (cid, case)
    # The static probe is the one the killer could not reach: held out of its way (the instance frozen), its scans
    # completed in the hostile instances, sentinels and all.
    scans = [e for case in run.values() for r in case.get("refusals", []) for e in r.get("evidence", [])
             if e.get("kind") == "scan" and str(e.get("engine", "")).startswith("static probe")]
    assert scans, "no static-probe scan completed in a hostile instance: the hold did not keep it from the killer"
