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
import shutil
import tempfile
from pathlib import Path

import pytest
from support import hostile

from acceptance.contract import Principal
from acceptance.harness import restsweep
from acceptance.harness.inotify import Watch
from acceptance.targets import TargetOptions, profiles
from acceptance.targets.reference import create
from runtime import footprint
from runtime.errors import InstanceError
from runtime.isolation import cleanup
from runtime.wait import until

pytestmark = pytest.mark.slow
ROUNDS = 15
@pytest.fixture
def state_dir():
    path = Path(tempfile.mkdtemp(prefix="pairproof-hostile-", dir="/var/tmp"))
    yield path
    cleanup.clean(path, include_live=True)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def outside():
    secret, token = hostile.outside_folder()
    yield secret, token
    shutil.rmtree(secret.parent, ignore_errors=True)


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
    profile = profiles.load(str(hostile.profile(tmp_path, secret, kill=False)))
    # The at-rest diff (acceptance/harness/restsweep.py): every file created or changed on the host's writable
    # roots and the state folder from here on is read and searched (a stray staging copy, a crash dump, a log).
    baseline = restsweep.take(state_dir)
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
            try:  # a folder swapped while it is walked is named, not entered: the figure is refused, or whole
                footprint._blocks_bytes(volume)
            except InstanceError as exc:
                assert "changed while it was measured" in str(exc), exc
            ref = target.restore(snap, ref)
        events = watch.events()
        assert events == [], f"root touched the folder outside the instance's volume: {events[:10]}"
        got_back = {path: data for path, data in _host_files(volume).items() if token.encode() in data}
        assert got_back == {}
        # Nothing the platform wrote anywhere on the host holds the secret (in any encoding the suite reads); the
        # sweep proves it looked by finding a sentinel it plants in every root. The volume is the instance's own.
        swept = restsweep.sweep(baseline, state_dir=state_dir, excluded={str(volume): "the instance's own data"})
        assert swept.holding([token]) == {}, swept.holding([token])
        assert swept.record, "the sweep kept no completeness record"
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


def test_a_qualification_of_an_agent_that_kills_the_probes_ends_with_a_verdict_and_no_false_pass(state_dir, outside,
                                                                                                tmp_path):
    """With the killer on, every process of the platform's that the agent can see dies within milliseconds: the
    shell probes, the harness's commands. The qualification still ends, within its budget, with a verdict; no
    case whose refusal rests on a killed probe passes (each such test is broken, with the proof it lacked); the
    static probe, held out of the agent's reach, is the one probe it could not kill (``support/hostile.py``)."""
    hostile.qualify_with_killer(tmp_path, state_dir, outside[0])
