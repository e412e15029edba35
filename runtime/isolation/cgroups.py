"""Memory, pids and CPU limits for one instance, and its freezer, on cgroup v1 or v2.

A limit only counts if the process is *in* the cgroup: ``Cgroup.procs_files`` lists the files a pid must
be written to, and the sandbox writes its own pid there before it runs anything (see
``sandbox.spawn_gated``). The two hierarchies differ in file names and in how a kill is counted, and this
module hides that: ``v1`` uses one directory per controller (``memory/``, ``pids/``, ``cpu/``), ``v2`` one
directory with the controllers enabled in the parent's ``cgroup.subtree_control``.

The CPU limit is a CFS bandwidth quota (v1 ``cpu.cfs_quota_us`` per ``cpu.cfs_period_us``, v2 ``cpu.max``): a
process that spins in every thread it can make gets ``Limits.cpu_millis`` thousandths of a CPU, and the kernel
counts each period it was throttled (``cpu.stat``).

Freezing (a *frozen* sleep: the processes kept, memory still charged, nothing scheduled) is v1's freezer
controller (``freezer.state``: write FROZEN or THAWED, read FREEZING until every task has stopped) or v2's
core ``cgroup.freeze`` (write 1 or 0, read ``frozen 1``/``frozen 0`` in ``cgroup.events``). Either way a
freeze is done only once the kernel says so, polled with a deadline. A v1 task frozen cannot die until it is
thawed, so ``kill_all`` thaws first.

Layout: ``<mount>/pairproof/<run>/<instance>``. Everything under ``pairproof/`` belongs to pairproof runs,
so ``cleanup`` can find what an interrupted run left without any other record.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from runtime.errors import CgroupError, PreflightError
from runtime.wait import until

ROOT_NAME = "pairproof"


CPU_PERIOD_US = 100_000


@dataclass(frozen=True)
class Limits:
    memory_bytes: int
    pids_max: int
    cpu_millis: int = 1000  # thousandths of a CPU: one core's worth by default

    @property
    def cpu_quota_us(self) -> int:
        return self.cpu_millis * CPU_PERIOD_US // 1000

    def __post_init__(self) -> None:
        if self.memory_bytes < 16 << 20:
            raise ValueError(f"memory limit {self.memory_bytes} B is below 16 MiB: no agent can start in it")
        if self.pids_max < 8:
            raise ValueError(f"pids limit {self.pids_max} is below 8: bwrap, the agent and a probe need more")
        if self.cpu_millis < 100:
            raise ValueError(f"CPU limit {self.cpu_millis}/1000 of a CPU is below a tenth: no agent starts in time")


class Cgroup(Protocol):
    """One instance's cgroup, whatever the hierarchy."""

    path: str

    @property
    def procs_files(self) -> tuple[Path, ...]: ...

    def add(self, pid: int) -> None: ...

    def pids(self) -> set[int]: ...

    def oom_kills(self) -> int: ...

    def kill_all(self, deadline: float = 5.0) -> None: ...

    def freeze(self, deadline: float = 5.0) -> None:
        """Stop every process of the cgroup; return once the kernel reports the whole cgroup frozen."""

    def thaw(self, deadline: float = 5.0) -> None:
        """Let them run again; return once the kernel reports the cgroup thawed."""

    def frozen(self) -> bool: ...

    def memory_current(self) -> int:
        """The memory charged to the cgroup now, in bytes (what a frozen instance still holds)."""

    def memory_peak(self) -> int:
        """The most memory charged to the cgroup since it was made or ``reset_peak``, in bytes."""

    def reset_peak(self) -> None:
        """Start ``memory_peak`` afresh from the current charge."""

    def remove(self) -> None: ...


def _write(path: Path, value: str) -> None:
    try:
        path.write_text(value)
    except OSError as exc:
        raise CgroupError(f"cannot write {value!r} to {path}: {exc.strerror}") from exc


def _text_if_there(path: Path) -> str | None:
    """``path``'s text, or None when its cgroup is gone: removed (ENOENT), or being removed by whoever made it
    (ENODEV: a file of a cgroup v1 directory whose cgroup is going away, as a container engine removes a
    container's cgroup after its last process died, answers "No such device")."""
    try:
        return path.read_text()
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENODEV):
            return None
        raise


def _read_pids(files: tuple[Path, ...]) -> set[int]:
    found: set[int] = set()
    for f in files:
        found.update(int(x) for x in (_text_if_there(f) or "").split())
    return found


def _signal_all(cg: Cgroup) -> None:
    for pid in cg.pids():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _kill_and_wait(cg: Cgroup, deadline: float) -> None:
    # Only processes pairproof placed in this cgroup can be here, so killing them is killing our own.
    left: list[int] = []

    def empty() -> bool:
        left[:] = cg.pids()
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return not left

    until(empty, deadline, lambda: f"processes {sorted(left)} in {cg.path} survived SIGKILL for {deadline}s")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise CgroupError(f"cannot read {path}: {exc.strerror}") from exc


def _settle(what: str, done, deadline: float) -> None:
    """Poll ``done()`` until it holds; a freeze or thaw the kernel has not finished in time is an error."""
    until(done, deadline, f"{what} did not complete within {deadline}s", every=0.0005)


def _rmdir(path: Path, deadline: float = 5.0) -> None:
    # A cgroup whose last process just died can stay busy for a moment; poll rather than fail at once.
    end = time.monotonic() + deadline
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno == errno.ENODEV:
                return  # being removed by whoever made it (a container engine, for a container's cgroup)
            if exc.errno != errno.EBUSY or time.monotonic() > end:
                raise CgroupError(f"cannot remove cgroup {path}: {exc.strerror}") from exc
            time.sleep(0.01)


class V1Cgroup:
    """cgroup v1: a directory under the memory, the pids, the cpu and (when mounted) the freezer hierarchy."""

    def __init__(self, memory_dir: Path, pids_dir: Path, path: str, freezer_dir: Path | None = None,
                 cpu_dir: Path | None = None) -> None:
        self.memory_dir, self.pids_dir, self.path = memory_dir, pids_dir, path
        self.freezer_dir, self.cpu_dir = freezer_dir, cpu_dir

    @property
    def procs_files(self) -> tuple[Path, ...]:
        own = (self.memory_dir / "cgroup.procs", self.pids_dir / "cgroup.procs")
        own += (self.cpu_dir / "cgroup.procs",) if self.cpu_dir is not None else ()
        return own + ((self.freezer_dir / "cgroup.procs",) if self.freezer_dir is not None else ())

    def _freezer_state(self) -> Path:
        if self.freezer_dir is None:
            raise CgroupError(f"cgroup {self.path} has no freezer: mount the v1 freezer controller to freeze instances")
        return self.freezer_dir / "freezer.state"

    def freeze(self, deadline: float = 5.0) -> None:
        state = self._freezer_state()
        _write(state, "FROZEN")
        _settle(f"freezing {self.path}", lambda: _read(state).strip() == "FROZEN", deadline)

    def thaw(self, deadline: float = 5.0) -> None:
        state = self._freezer_state()
        _write(state, "THAWED")
        _settle(f"thawing {self.path}", lambda: _read(state).strip() == "THAWED", deadline)

    def frozen(self) -> bool:
        if self.freezer_dir is None:
            return False
        state = _text_if_there(self.freezer_dir / "freezer.state")
        return state is not None and state.strip() != "THAWED"

    def memory_current(self) -> int:
        return int(_read(self.memory_dir / "memory.usage_in_bytes"))

    def memory_peak(self) -> int:
        return int(_read(self.memory_dir / "memory.max_usage_in_bytes"))

    def reset_peak(self) -> None:
        _write(self.memory_dir / "memory.max_usage_in_bytes", "0")  # v1 resets the peak on any write

    def add(self, pid: int) -> None:
        for f in self.procs_files:
            _write(f, str(pid))

    def pids(self) -> set[int]:
        return _read_pids(self.procs_files)

    def oom_kills(self) -> int:
        # memory.oom_control has "oom_kill N" on kernels >= 4.13; failcnt is the fallback signal.
        for line in (_text_if_there(self.memory_dir / "memory.oom_control") or "").splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def kill_all(self, deadline: float = 5.0) -> None:
        if self.frozen():  # a frozen v1 task takes its SIGKILL only once it runs again: signal, then thaw
            _signal_all(self)
            self.thaw(deadline)
        _kill_and_wait(self, deadline)

    def remove(self) -> None:
        self.kill_all()
        _rmdir(self.memory_dir)
        _rmdir(self.pids_dir)
        if self.cpu_dir is not None:
            _rmdir(self.cpu_dir)
        if self.freezer_dir is not None:
            _rmdir(self.freezer_dir)


class V2Cgroup:
    """cgroup v2: one directory with the memory and pids controllers enabled by its parent."""

    def __init__(self, directory: Path, path: str) -> None:
        self.directory, self.path = directory, path

    @property
    def procs_files(self) -> tuple[Path, ...]:
        return (self.directory / "cgroup.procs",)

    def add(self, pid: int) -> None:
        _write(self.directory / "cgroup.procs", str(pid))

    def pids(self) -> set[int]:
        return _read_pids(self.procs_files)

    def oom_kills(self) -> int:
        for line in (_text_if_there(self.directory / "memory.events") or "").splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def _events_frozen(self) -> bool:
        for line in _read(self.directory / "cgroup.events").splitlines():
            key, _, value = line.partition(" ")
            if key == "frozen":
                return value.strip() == "1"
        raise CgroupError(f"{self.directory / 'cgroup.events'} has no 'frozen' line: the kernel predates cgroup.freeze (5.2)")

    def freeze(self, deadline: float = 5.0) -> None:
        _write(self.directory / "cgroup.freeze", "1")
        _settle(f"freezing {self.path}", self._events_frozen, deadline)

    def thaw(self, deadline: float = 5.0) -> None:
        _write(self.directory / "cgroup.freeze", "0")
        _settle(f"thawing {self.path}", lambda: not self._events_frozen(), deadline)

    def frozen(self) -> bool:
        return (_text_if_there(self.directory / "cgroup.freeze") or "").strip() == "1"

    def memory_current(self) -> int:
        return int(_read(self.directory / "memory.current"))

    def memory_peak(self) -> int:
        peak = self.directory / "memory.peak"  # kernel >= 5.19
        if not peak.exists():
            raise CgroupError(f"{peak} does not exist: this kernel keeps no memory peak per cgroup (5.19 or later does)")
        return int(_read(peak))

    def reset_peak(self) -> None:
        _write(self.directory / "memory.peak", "reset")  # kernel >= 6.12; older ones refuse, and say so

    def kill_all(self, deadline: float = 5.0) -> None:
        if self.frozen():  # v2 delivers SIGKILL to frozen tasks, but a thawed cgroup is one state fewer to leave
            _signal_all(self)
            self.thaw(deadline)
        kill = self.directory / "cgroup.kill"  # kernel >= 5.14 kills the whole subtree atomically
        if kill.exists():
            _write(kill, "1")
        _kill_and_wait(self, deadline)

    def remove(self) -> None:
        self.kill_all()
        _rmdir(self.directory)


@contextlib.contextmanager
def beside(cg: Cgroup) -> Iterator[Cgroup]:
    """A cgroup for a process of the platform's own that runs in an instance's sandbox while the instance is
    frozen (the static probe): under the instance's limits, but not stopped by the instance's freezer.

    v1: the instance's memory, pids and cpu folders, and no freezer folder (the process stays in the freezer
    cgroup of whoever started it, which pairproof never freezes); it is charged to the instance as any command
    is. v2 has one folder for everything, and a frozen folder stops every process in it: a sibling folder
    ``<instance>.beside-<hex>`` with the instance's own memory, swap, pids and cpu limits (read from its files)
    is made for the call and removed after, its processes killed first (the run's cgroup sweep removes one an
    interrupted run left)."""
    if isinstance(cg, V1Cgroup):
        yield V1Cgroup(cg.memory_dir, cg.pids_dir, cg.path, None, cg.cpu_dir)
        return
    if not isinstance(cg, V2Cgroup):
        raise CgroupError(f"cannot place a process beside cgroup {cg.path}: not a cgroup v1 or v2 folder")
    name = f"{cg.directory.name}.beside-{os.urandom(4).hex()}"
    side = V2Cgroup(cg.directory.parent / name, str(Path(cg.path).parent / name))
    try:
        side.directory.mkdir()
    except OSError as exc:
        raise CgroupError(f"cannot create cgroup {side.directory}: {exc.strerror}") from exc
    try:
        for limit in ("memory.max", "memory.swap.max", "pids.max", "cpu.max"):
            value = _text_if_there(cg.directory / limit)
            if value is not None:
                _write(side.directory / limit, value.strip())
        yield side
    finally:
        side.remove()


class Hierarchy(Protocol):
    version: int

    def create(self, run: str, instance: str, limits: Limits) -> Cgroup: ...

    def run_dirs(self) -> list[tuple[str, list[Path]]]: ...

    def open(self, run: str, instance: str) -> Cgroup: ...

    def roots(self) -> list[Path]: ...


class V1Hierarchy:
    version = 1

    def __init__(self, memory_mount: Path, pids_mount: Path, freezer_mount: Path | None = None,
                 cpu_mount: Path | None = None) -> None:
        self.memory_mount, self.pids_mount, self.freezer_mount = memory_mount, pids_mount, freezer_mount
        self.cpu_mount = cpu_mount

    def _mounts(self) -> tuple[Path, ...]:
        return ((self.memory_mount, self.pids_mount) + ((self.freezer_mount,) if self.freezer_mount else ())
                + ((self.cpu_mount,) if self.cpu_mount and self.cpu_mount not in (self.memory_mount, self.pids_mount)
                   else ()))

    def open(self, run: str, instance: str) -> V1Cgroup:
        rel = Path(ROOT_NAME, run, instance)
        freezer = self.freezer_mount / rel if self.freezer_mount else None
        cpu = self.cpu_mount / rel if self.cpu_mount else None
        return V1Cgroup(self.memory_mount / rel, self.pids_mount / rel, str(rel), freezer, cpu)

    def create(self, run: str, instance: str, limits: Limits) -> V1Cgroup:
        cg = self.open(run, instance)
        for d in (cg.memory_dir, cg.pids_dir, *((cg.freezer_dir,) if cg.freezer_dir else ()),
                  *((cg.cpu_dir,) if cg.cpu_dir else ())):
            try:
                d.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise CgroupError(f"cannot create cgroup {d}: {exc.strerror}") from exc
        _write(cg.memory_dir / "memory.limit_in_bytes", str(limits.memory_bytes))
        # Without a memsw limit a machine with swap would page the allocation out instead of killing it.
        memsw = cg.memory_dir / "memory.memsw.limit_in_bytes"
        if memsw.exists():
            _write(memsw, str(limits.memory_bytes))
        _write(cg.pids_dir / "pids.max", str(limits.pids_max))
        if cg.cpu_dir is not None:
            _write(cg.cpu_dir / "cpu.cfs_period_us", str(CPU_PERIOD_US))
            _write(cg.cpu_dir / "cpu.cfs_quota_us", str(limits.cpu_quota_us))
        return cg

    def roots(self) -> list[Path]:
        return [mount / ROOT_NAME for mount in self._mounts()]

    def run_dirs(self) -> list[tuple[str, list[Path]]]:
        runs: dict[str, list[Path]] = {}
        for mount in self._mounts():
            root = mount / ROOT_NAME
            if root.is_dir():
                for d in root.iterdir():
                    if d.is_dir():
                        runs.setdefault(d.name, []).append(d)
        return sorted(runs.items())


class V2Hierarchy:
    version = 2

    def __init__(self, mount: Path, cpu: bool = True) -> None:
        self.mount, self.cpu = mount, cpu

    def open(self, run: str, instance: str) -> V2Cgroup:
        rel = Path(ROOT_NAME, run, instance)
        return V2Cgroup(self.mount / rel, str(rel))

    def create(self, run: str, instance: str, limits: Limits) -> V2Cgroup:
        # Controllers must be enabled in every ancestor's subtree_control, top-down, before a leaf
        # below it can have memory.max and pids.max.
        enable = "+memory +pids" + (" +cpu" if self.cpu else "")
        parent = self.mount
        for part in (ROOT_NAME, run):
            _write(parent / "cgroup.subtree_control", enable)
            parent = parent / part
            try:
                parent.mkdir(exist_ok=True)
            except OSError as exc:
                raise CgroupError(f"cannot create cgroup {parent}: {exc.strerror}") from exc
        _write(parent / "cgroup.subtree_control", enable)
        cg = self.open(run, instance)
        try:
            cg.directory.mkdir(exist_ok=True)
        except OSError as exc:
            raise CgroupError(f"cannot create cgroup {cg.directory}: {exc.strerror}") from exc
        _write(cg.directory / "memory.max", str(limits.memory_bytes))
        if (cg.directory / "memory.swap.max").exists():
            _write(cg.directory / "memory.swap.max", "0")
        _write(cg.directory / "pids.max", str(limits.pids_max))
        if self.cpu:
            _write(cg.directory / "cpu.max", f"{limits.cpu_quota_us} {CPU_PERIOD_US}")
        return cg

    def roots(self) -> list[Path]:
        return [self.mount / ROOT_NAME]

    def run_dirs(self) -> list[tuple[str, list[Path]]]:
        root = self.mount / ROOT_NAME
        if not root.is_dir():
            return []
        return sorted((d.name, [d]) for d in root.iterdir() if d.is_dir())


def _mounts(mountinfo: str) -> list[tuple[Path, str, set[str]]]:
    found = []
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, rfields = left.split(), right.split()
        if len(fields) < 5 or len(rfields) < 3:
            continue
        fstype, options = rfields[0], set(rfields[2].split(","))
        if fstype in ("cgroup", "cgroup2"):
            found.append((Path(fields[4]), fstype, options))
    return found


def detect(mountinfo_path: str = "/proc/self/mountinfo") -> Hierarchy:
    """Pick the hierarchy that has both the memory and pids controllers.

    v2 wins when its mount offers both (the unified layout most machines have now); otherwise v1 with a
    memory and a pids mount (this project's CI machine mounts v1 with an empty v2 beside it), and the v1
    freezer when it is mounted (without it an instance cannot be frozen, only stopped).
    """
    mounts = _mounts(Path(mountinfo_path).read_text())
    for path, fstype, _ in mounts:
        if fstype == "cgroup2":
            try:
                controllers = set((path / "cgroup.controllers").read_text().split())
            except OSError:
                continue
            if {"memory", "pids"} <= controllers:
                return V2Hierarchy(path, cpu="cpu" in controllers)
    v1 = {opt: path for path, fstype, opts in mounts if fstype == "cgroup" for opt in opts}
    if "memory" in v1 and "pids" in v1:
        return V1Hierarchy(v1["memory"], v1["pids"], v1.get("freezer"), v1.get("cpu"))
    raise PreflightError(
        "no cgroup hierarchy offers both the memory and pids controllers (looked in /proc/self/mountinfo): "
        "boot with cgroup v2 (systemd.unified_cgroup_hierarchy=1) or mount the v1 memory and pids controllers"
    )
