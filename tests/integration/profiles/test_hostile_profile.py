"""The hostile agent (tests/support/hostile_agent.py, issue 28): what the platform does as root with the volume
of an agent that fights back, and what a qualification says when the agent kills the harness's probes.

The host-side audit is the kernel's: an inotify watch on a folder of the host that only root may read, holding
a synthetic secret, to which the agent's links point (a link straight at the file, and ``/data/notes`` swapped
between a folder and a link to the folder every millisecond). Every open or read of the folder or the file
while root snapshots, restores and measures the volume is an event; there must be none, and the secret must be
in nothing the instance gets back.
"""

from __future__ import annotations

import os
import secrets
import shutil
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
