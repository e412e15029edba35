"""A run leaves nothing behind: not after it ends, not after SIGINT midway, and after SIGKILL
``pairproof clean`` removes what it left (processes, cgroups, volumes, uid claims)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from acceptance.harness.lab.lab import stale_workdirs
from runtime.isolation import cgroups, cleanup

pytestmark = pytest.mark.slow
RUN = "c1ea0001"


def _qualify(root: Path, reports: Path, run: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "acceptance.cli", "qualify", "--state-dir", str(root), "--reports-dir", str(reports),
         "--", "--pairproof-run", run, *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


def _wait_for_sandboxes(root: Path, run: str, deadline: float = 60.0) -> None:
    hierarchy = cgroups.detect()
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        for name, dirs in hierarchy.run_dirs():
            if name.startswith(run) and any(p for d in dirs for p in d.rglob("cgroup.procs") if p.read_text().strip()):
                return
        time.sleep(0.05)
    raise AssertionError(f"no sandbox of run {run} appeared within {deadline}s")


def _footprint(root: Path, run: str) -> dict[str, list[str]]:
    """Everything of ``run`` still on the machine."""
    procs = []
    for cg in Path("/proc").glob("[0-9]*/cgroup"):
        try:
            if f"/pairproof/{run}" in cg.read_text():
                procs.append(cg.parent.name)
        except OSError:
            pass
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if b"acceptance.harness.lab.sink" in cmdline.read_bytes() and f"pairproof-lab-{run}".encode() in cmdline.read_bytes():
                procs.append(f"lab sink {cmdline.parent.name}")
        except OSError:
            pass
    hierarchy = cgroups.detect()
    return {
        "processes": procs,
        "cgroups": [str(d) for name, dirs in hierarchy.run_dirs() if name.startswith(run) for d in dirs],
        "state": [str(p) for p in (root / "runs").glob(f"{run}*")] if (root / "runs").exists() else [],
        "uid claims": [p.name for p in (root / "uid-claims").glob("*") if p.read_text().startswith(run)]
        if (root / "uid-claims").exists() else [],
        "mounts": [line for line in Path("/proc/mounts").read_text().splitlines() if str(root) in line],
    }


EMPTY = {"processes": [], "cgroups": [], "state": [], "uid claims": [], "mounts": []}


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupt_midway_leaves_nothing_and_exits_130(root, tmp_path, signum):
    """SIGINT (Ctrl-C) or SIGTERM (how CI systems and `timeout` cancel a job) while sandboxes are up:
    the run tears down everything before it exits, and exits 130 (not 2, the code for bad input, and
    not death by the signal)."""
    run = RUN[:-1] + str(int(signum))[-1]
    proc = _qualify(root, tmp_path, run)
    _wait_for_sandboxes(root, run)
    os.kill(proc.pid, signum)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out.decode()[-2000:]
    assert _footprint(root, run) == EMPTY


def test_sigkill_then_clean_removes_everything(root, tmp_path):
    """SIGKILL leaves state and cgroups (the sandboxes die with their parent); `pairproof clean` removes
    them, and reports the run as not live first."""
    run = "c1ea0002"
    proc = _qualify(root, tmp_path, run)
    _wait_for_sandboxes(root, run)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    left = _footprint(root, run)
    assert left["state"], "a SIGKILLed run should have left its state for clean to find"
    assert [lo.live for lo in cleanup.find(root) if lo.run.startswith(run)] == [False]
    result = subprocess.run([sys.executable, "-m", "acceptance.cli", "clean", "--state-dir", str(root)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"removed run {run}" in result.stdout
    assert _footprint(root, run) == EMPTY


def test_clean_leaves_a_live_run_alone(root, tmp_path):
    """clean does not touch a run whose owner process is alive (it could be mid-qualification)."""
    run = "c1ea0003"
    proc = _qualify(root, tmp_path, run)
    try:
        _wait_for_sandboxes(root, run)
        removed = cleanup.clean(root)
        assert [lo.run for lo in removed if lo.run.startswith(run)] == []
        assert _footprint(root, run)["cgroups"]
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.communicate(timeout=120)


def test_finished_run_leaves_nothing(root, tmp_path):
    """A complete qualification (here one case) removes its own footprint."""
    run = "c1ea0004"
    result = subprocess.run(
        [sys.executable, "-m", "acceptance.cli", "qualify", "--state-dir", str(root), "--reports-dir", str(tmp_path),
         "--", "--pairproof-run", run, "--case", "RS-2"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:]
    assert _footprint(root, run) == EMPTY


def test_sigkill_takes_the_lab_down(root, tmp_path):
    """The lab's sink (and so its network namespace and veths) dies with a SIGKILLed run, by itself."""
    run = "c1ea0005"
    proc = _qualify(root, tmp_path, run, "--case", "NT-1")
    end = time.monotonic() + 60
    while time.monotonic() < end and not [p for p in _footprint(root, run)["processes"] if p.startswith("lab sink")]:
        time.sleep(0.05)
    assert [p for p in _footprint(root, run)["processes"] if p.startswith("lab sink")], "the lab never started"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    end = time.monotonic() + 10
    while time.monotonic() < end and [p for p in _footprint(root, run)["processes"] if p.startswith("lab sink")]:
        time.sleep(0.05)
    assert [p for p in _footprint(root, run)["processes"] if p.startswith("lab sink")] == []
    assert list(Path(tempfile.gettempdir()).glob(f"pairproof-lab-{run}-*")), "the killed run left no lab folder?"
    cleanup.clean(root)
    for folder in stale_workdirs():  # what `pairproof clean` removes besides the runtime's leftovers
        if folder.name.startswith(f"pairproof-lab-{run}-"):  # (other runs' folders are theirs to clean)
            shutil.rmtree(folder)
    assert _footprint(root, run) == EMPTY
    assert list(Path(tempfile.gettempdir()).glob(f"pairproof-lab-{run}-*")) == []
