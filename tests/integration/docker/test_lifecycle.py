"""A docker qualification leaves nothing behind: not when it ends, not after SIGINT or SIGTERM midway, and
after SIGKILL of its whole process group ``pairproof clean --target docker`` removes what it left.

Each test runs a real ``pairproof qualify --target docker`` (a short selection: NT-1, whose lab links a
container to the sink, and RS-2) with its own state and reports folders and its own run id, watches the
engine for the run's containers (by the ``pairproof.run`` label) while it runs, and afterwards looks for
everything of that run on the machine: containers, volumes and networks with its label, processes in its
cgroups, its cgroup folders (``pairproof/<run>`` in every hierarchy, Docker's included), the network
namespaces its containers had (still mounted, or still held by a process), mounts of its state root or
of its containers, its lab's sink, its state and uid claims."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import docker
import pytest

from runtime.isolation import cleanup, containers

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[3]
CASES = ("--case", "NT-1", "--case", "RS-2")
RUN_DEADLINE = 600.0
CONTAINER_DEADLINE = 120.0


@pytest.fixture
def engine():
    client = docker.from_env(timeout=60)
    yield client
    client.close()


@dataclass
class Seen:
    """What the run's containers were while it ran, so what is left of them can be looked for after."""

    ids: set[str] = field(default_factory=set)
    sandbox_keys: set[str] = field(default_factory=set)  # where Docker bind-mounts each one's network namespace

    def look(self, engine, run: str) -> int:
        """Record the run's containers now running; how many there are."""
        # the engine's plain listing (docker-py's containers.list inspects each one it lists, and fails on one
        # removed between the two)
        running = [c["Id"] for c in engine.api.containers(filters={"label": containers.LABEL_RUN})
                   if (c.get("Labels") or {}).get(containers.LABEL_RUN, "").startswith(run)]
        for container_id in running:
            if container_id in self.ids:
                continue
            try:
                attrs = engine.api.inspect_container(container_id)
            except docker.errors.NotFound:
                continue  # gone between the listing and the look: the next one catches the others
            self.ids.add(container_id)
            if attrs["NetworkSettings"].get("SandboxKey"):
                self.sandbox_keys.add(attrs["NetworkSettings"]["SandboxKey"])
        return len(running)


def _qualify(root: Path, reports: Path, run: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "acceptance.cli", "qualify", "--target", "docker", "--state-dir", str(root),
         "--reports-dir", str(reports), "--", "--pairproof-run", run, *CASES],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


def _watch_until_containers(proc: subprocess.Popen, engine, run: str, seen: Seen) -> None:
    end = time.monotonic() + CONTAINER_DEADLINE
    while time.monotonic() < end:
        if seen.look(engine, run):
            return
        if proc.poll() is not None:
            raise AssertionError(f"qualify ended (exit {proc.returncode}) before a container of run {run} ran: "
                                 f"{proc.stdout.read().decode()[-3000:]}")
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    raise AssertionError(f"no container of run {run} within {CONTAINER_DEADLINE}s")


def _labelled(engine, run: str) -> dict[str, list[str]]:
    def mine(labels) -> bool:
        return (labels or {}).get(containers.LABEL_RUN, "").startswith(run)

    selector = {"label": containers.LABEL_RUN}
    return {
        "containers": [c["Names"][0].lstrip("/") for c in engine.api.containers(all=True, filters=selector)
                       if mine(c.get("Labels"))],
        "volumes": [v.name for v in engine.volumes.list(filters=selector) if mine(v.attrs.get("Labels"))],
        "networks": [n.name for n in engine.networks.list(filters=selector) if mine(n.attrs.get("Labels"))],
    }


def _session(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[3])
    except (OSError, IndexError, ValueError):
        return None


def _footprint(engine, root: Path, run: str, seen: Seen, session: int) -> dict[str, list[str]]:
    """Everything of ``run`` still on the machine. ``session``: the session qualify was started in (its own),
    which every process it started keeps unless it left it (containers' processes are the engine's
    children: they are found by their cgroups)."""
    procs = []
    for pid_dir in Path("/proc").glob("[0-9]*"):
        try:
            if f"/pairproof/{run}" in (pid_dir / "cgroup").read_text():
                procs.append(f"in the run's cgroups {pid_dir.name}")
            cmdline = (pid_dir / "cmdline").read_bytes()
            if b"acceptance.harness.lab.sink" in cmdline and f"pairproof-lab-{run}".encode() in cmdline:
                procs.append(f"lab sink {pid_dir.name}")
        except OSError:
            pass
        if _session(int(pid_dir.name)) == session:
            try:
                what = (pid_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200]
                state = (pid_dir / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue  # gone meanwhile
            procs.append(f"of qualify's session {pid_dir.name} ({state}) {what}")
    mountinfo = Path("/proc/self/mountinfo").read_text().splitlines()
    cgroup_dirs = [*Path("/sys/fs/cgroup").glob(f"pairproof/{run}*"), *Path("/sys/fs/cgroup").glob(f"*/pairproof/{run}*")]
    return {
        **_labelled(engine, run),
        "processes": procs,
        "cgroups": sorted(str(d) for d in cgroup_dirs),
        # a container's network namespace outlives it while it is bind-mounted at its SandboxKey (the empty
        # file left there once unmounted is swept by the engine later, and is no namespace), or while a
        # process is in it: one of the two kinds above (a namespace's inode number is reused at once, so
        # holders are not looked for by it)
        "netns mounted": [line for line in mountinfo if " nsfs " in line
                          and any(f" {key} " in line for key in seen.sandbox_keys)],
        "mounts": [line for line in mountinfo if str(root) in line or any(cid in line for cid in seen.ids)],
        "state": [str(p) for p in (root / "runs").glob(f"{run}*")] if (root / "runs").exists() else [],
        "uid claims": [p.name for p in (root / "uid-claims").glob("*") if p.read_text().startswith(run)]
        if (root / "uid-claims").exists() else [],
    }


SETTLE_DEADLINE = 15.0


def _settled_footprint(engine, root: Path, run: str, seen: Seen, session: int) -> dict[str, list[str]]:
    """The footprint once the run's processes are gone or ``SETTLE_DEADLINE`` has passed: a process ended by
    a signal (its parent's death signal, a kill from teardown) is still in /proc a moment after qualify's
    exit, until the kernel is done with it and its parent reaps it."""
    end = time.monotonic() + SETTLE_DEADLINE
    while True:
        found = _footprint(engine, root, run, seen, session)
        if not found["processes"] or time.monotonic() > end:
            return found
        time.sleep(0.1)


EMPTY = {"containers": [], "volumes": [], "networks": [], "processes": [], "cgroups": [], "netns mounted": [],
         "mounts": [], "state": [], "uid claims": []}


def test_a_finished_docker_qualify_leaves_nothing(root, tmp_path, engine):
    run, seen = secrets.token_hex(4), Seen()
    proc = _qualify(root, tmp_path, run)
    end = time.monotonic() + RUN_DEADLINE
    while proc.poll() is None and time.monotonic() < end:
        seen.look(engine, run)
        time.sleep(0.05)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(f"qualify did not end within {RUN_DEADLINE}s")
    out = proc.stdout.read().decode()
    assert proc.returncode == 0, out[-3000:]
    assert seen.ids and seen.sandbox_keys, "the run's containers were never seen: the footprint would prove nothing"
    assert _settled_footprint(engine, root, run, seen, proc.pid) == EMPTY


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_docker_qualify_leaves_nothing_and_exits_130(root, tmp_path, engine, signum):
    """SIGINT (Ctrl-C) or SIGTERM (CI's cancel) once the run's containers exist: the run removes them (and
    everything else of it) before it exits 130."""
    run, seen = secrets.token_hex(4), Seen()
    proc = _qualify(root, tmp_path, run)
    _watch_until_containers(proc, engine, run, seen)
    os.kill(proc.pid, signum)
    try:
        out, _ = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    assert proc.returncode == 130, out.decode()[-3000:]
    assert _settled_footprint(engine, root, run, seen, proc.pid) == EMPTY


def test_a_sigkilled_docker_qualify_is_cleaned_by_pairproof_clean(root, tmp_path, engine):
    """SIGKILL of the whole process group: the engine keeps the containers (their owner's death is no
    teardown), the state stays for clean to find; `pairproof clean --target docker` removes it all."""
    run, seen = secrets.token_hex(4), Seen()
    proc = _qualify(root, tmp_path, run)
    _watch_until_containers(proc, engine, run, seen)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    seen.look(engine, run)
    left = _footprint(engine, root, run, seen, proc.pid)
    # the engine keeps the containers running: each kind of leftover the footprint looks for is there, so
    # its emptiness after clean (and after the other runs) means something
    for kind in ("containers", "processes", "cgroups", "netns mounted", "state", "uid claims"):
        assert left[kind], f"a SIGKILLed docker run should have left {kind} for clean to find: {left}"
    assert [lo.live for lo in cleanup.find(root) if lo.run.startswith(run)] == [False]
    result = subprocess.run([sys.executable, "-m", "acceptance.cli", "clean", "--target", "docker",
                             "--state-dir", str(root)], cwd=REPO, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"containers of run {run}" in result.stdout, result.stdout
    # the lab's sink died with its parent (parent-death signal); its folder is `clean`'s too
    assert not list(Path(tempfile.gettempdir()).glob(f"pairproof-lab-{run}-*")), result.stdout
    assert _settled_footprint(engine, root, run, seen, proc.pid) == EMPTY


def test_clean_removes_a_runs_volume_without_a_container(root, engine):
    """A run killed after it made a labelled volume but before its first container: clean finds it by that
    too (networks are looked for the same way; none is made here: a user network would be a bridge, which
    the shared engine must not have)."""
    run = f"{secrets.token_hex(4)}-main"
    (root / "runs" / run).mkdir(parents=True)  # its state, with no owner.json: its owner is gone
    other = f"{secrets.token_hex(4)}-main"  # a run whose state is under another root: none of this clean's business
    for name in (run, other):
        engine.volumes.create(name=f"pairproof-test-{name}", labels={containers.LABEL_RUN: name})
    try:
        assert _labelled(engine, run)["volumes"] == [f"pairproof-test-{run}"]
        result = subprocess.run([sys.executable, "-m", "acceptance.cli", "clean", "--target", "docker",
                                 "--state-dir", str(root)], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"removed 0 containers of run {run}" in result.stdout, result.stdout
        assert _labelled(engine, run) == {"containers": [], "volumes": [], "networks": []}
        assert _labelled(engine, other)["volumes"] == [f"pairproof-test-{other}"]
    finally:
        containers.remove_run_containers(run, docker_client=engine)
        containers.remove_run_containers(other, docker_client=engine)
