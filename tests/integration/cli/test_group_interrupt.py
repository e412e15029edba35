"""Ctrl-C as a terminal sends it, and ``timeout`` as CI uses it, stop ``qualify`` cleanly (issue 27 item 11).

A terminal's Ctrl-C sends SIGINT to the whole foreground process group, and ``timeout`` (without
``--foreground``) sends SIGTERM to the group it made; ``pytest``'s own tests and the older interruption tests
signal qualify's pid alone. When the sandboxes shared qualify's group they died of the signal themselves,
while a driver call was using them: the call came back as a target error ("instance org1-alice-0 is not
running") and the run could go on to judge cases *broken* and publish a FAILED set over the good one.

Here qualify runs as a shell runs a job (a process group of its own, which it leads) with one case (FS-3,
every instance and a broken arrangement, five tests), and the group is signalled at three points of three
runs: the instances up before any test ended, a test judged, three tests judged (SIGTERM there, as
``timeout`` sends it). At each point no process the platform or the harness started is in qualify's group
(each lives in a session of its own, so the signal reaches qualify alone); then every run exits 130, leaves
the published set byte for byte as it was, and leaves nothing of itself on the machine."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from reports import reportset
from runtime.isolation import cgroups, cleanup

pytestmark = pytest.mark.slow
CHECKOUT = Path(__file__).resolve().parents[3]
CASE = "FS-3"
DEADLINE = 180.0


def _tree(root: Path) -> dict[str, str]:
    """Every entry under ``root``: a file's bytes and mode, a link's target, a folder's mode."""
    seen = {}
    for folder, dirs, files in os.walk(root):
        for name in sorted(dirs + files):
            path = Path(folder) / name
            st = path.lstat()
            rel = str(path.relative_to(root))
            if path.is_symlink():
                seen[rel] = "link " + os.readlink(path)
            elif path.is_dir():
                seen[rel] = f"dir {st.st_mode:o}"
            else:
                seen[rel] = f"file {st.st_mode:o} " + hashlib.sha256(path.read_bytes()).hexdigest()
    return seen


@pytest.fixture
def state_root() -> Iterator[Path]:
    """A state folder every instance uid can traverse to (pytest's tmp_path is 0700), swept after."""
    root = Path(tempfile.mkdtemp(prefix="pairproof-groupint-", dir="/var/tmp"))
    root.chmod(0o755)
    yield root
    cleanup.clean(root, include_live=True)
    shutil.rmtree(root, ignore_errors=True)


def _qualify(root: Path, reports: Path, run: str) -> subprocess.Popen:
    """``pairproof qualify`` as a shell starts a job: the leader of a process group of its own."""
    env = {**os.environ, "PYTHONPATH": str(CHECKOUT)}
    return subprocess.Popen(
        [sys.executable, "-m", "acceptance.cli", "qualify", "--case", CASE, "--state-dir", str(root),
         "--reports-dir", str(reports), "--", "--pairproof-run", run],
        cwd=reports.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


def _group(pgid: int) -> list[str]:
    """The processes of process group ``pgid`` other than its leader: pid and command line."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == pgid:
            continue
        try:
            if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[2]) == pgid:
                found.append(f"{entry.name}: " + (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:200])
        except (OSError, IndexError, ValueError):
            continue
    return found


def _results(reports: Path, pid: int) -> int:
    """How many tests the run (process ``pid``) has judged so far: Allure results in its own staged set."""
    staged = list((reports / reportset.SETS).glob(f"set-{pid}-*"))
    return len(list((staged[0] / "allure-results").glob("*-result.json"))) if staged else 0


def _sandboxes_up(run: str) -> Callable[[Path, int], bool]:
    def up(reports: Path, pid: int) -> bool:
        return any(p.read_text().strip() for name, dirs in cgroups.detect().run_dirs() if name.startswith(run)
                   for d in dirs for p in d.rglob("cgroup.procs"))
    return up


def _judged(n: int) -> Callable[[Path, int], bool]:
    return lambda reports, pid: _results(reports, pid) >= n


def _footprint(root: Path, run: str) -> dict[str, list[str]]:
    """What of ``run`` is still on the machine: processes in its cgroups, the cgroups, its state and uid claims."""
    procs = []
    for cg in Path("/proc").glob("[0-9]*/cgroup"):
        try:
            if f"/pairproof/{run}" in cg.read_text():
                procs.append(cg.parent.name)
        except OSError:
            pass
    return {
        "processes": procs,
        "cgroups": [str(d) for name, dirs in cgroups.detect().run_dirs() if name.startswith(run) for d in dirs],
        "state": [str(p) for p in (root / "runs").glob(f"{run}*")] if (root / "runs").exists() else [],
        "uid claims": [p.name for p in (root / "uid-claims").glob("*") if p.read_text().startswith(run)]
        if (root / "uid-claims").exists() else [],
    }


EMPTY = {"processes": [], "cgroups": [], "state": [], "uid claims": []}


def test_a_signal_to_the_whole_group_stops_qualify_with_130_and_keeps_the_reports(state_root, tmp_path):
    reports = tmp_path / "reports"
    first = _qualify(state_root, reports, "9e0a0000")
    out, _ = first.communicate(timeout=DEADLINE)
    assert first.returncode == 0, out.decode()[-3000:]
    published = _tree(reports)
    points = [(1, "the instances up, no test judged", signal.SIGINT, _sandboxes_up("9e0a0001")),
              (2, "a test judged", signal.SIGINT, _judged(1)),
              (3, "three tests judged", signal.SIGTERM, _judged(3))]
    for n, where, signum, reached in points:
        run = f"9e0a000{n}"
        proc = _qualify(state_root, reports, run)
        try:
            end = time.monotonic() + DEADLINE
            while not reached(reports, proc.pid):
                assert proc.poll() is None, f"qualify ended (exit {proc.returncode}) before {where}: " \
                                            f"{proc.stdout.read().decode()[-2000:]}"
                assert time.monotonic() < end, f"{where}: not reached in {DEADLINE}s"
                time.sleep(0.02)
            sharing = _group(proc.pid)
            os.killpg(proc.pid, signum)
            out, _ = proc.communicate(timeout=DEADLINE)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        said = out.decode()[-3000:]
        assert sharing == [], f"{where}: processes in qualify's group would get the terminal's signal too"
        assert proc.returncode == 130, f"{signal.Signals(signum).name} to the group at {where}: exit " \
                                       f"{proc.returncode}, not 130\n{said}"
        assert _tree(reports) == published, f"{where}: the published reports changed\n{said}"
        assert _footprint(state_root, run) == EMPTY, said
