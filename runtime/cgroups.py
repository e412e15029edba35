"""Memory and pids limits for one instance, on cgroup v1 or v2.

A limit only counts if the process is *in* the cgroup: ``Cgroup.procs_files`` lists the files a pid must
be written to, and the sandbox writes its own pid there before it runs anything (see
``sandbox.spawn_gated``). The two hierarchies differ in file names and in how a kill is counted, and this
module hides that: ``v1`` uses one directory per controller (``memory/``, ``pids/``), ``v2`` one directory
with both controllers enabled in the parent's ``cgroup.subtree_control``.

Layout: ``<mount>/pairproof/<run>/<instance>``. Everything under ``pairproof/`` belongs to pairproof runs,
so ``cleanup`` can find what an interrupted run left without any other record.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from .errors import CgroupError, PreflightError

ROOT_NAME = "pairproof"


@dataclass(frozen=True)
class Limits:
    memory_bytes: int
    pids_max: int

    def __post_init__(self) -> None:
        if self.memory_bytes < 16 << 20:
            raise ValueError(f"memory limit {self.memory_bytes} B is below 16 MiB: no agent can start in it")
        if self.pids_max < 8:
            raise ValueError(f"pids limit {self.pids_max} is below 8: bwrap, the agent and a probe need more")


class Cgroup(Protocol):
    """One instance's cgroup, whatever the hierarchy."""

    path: str

    @property
    def procs_files(self) -> tuple[Path, ...]: ...

    def add(self, pid: int) -> None: ...

    def pids(self) -> set[int]: ...

    def oom_kills(self) -> int: ...

    def kill_all(self, deadline: float = 5.0) -> None: ...

    def remove(self) -> None: ...


def _write(path: Path, value: str) -> None:
    try:
        path.write_text(value)
    except OSError as exc:
        raise CgroupError(f"cannot write {value!r} to {path}: {exc.strerror}") from exc


def _read_pids(files: tuple[Path, ...]) -> set[int]:
    found: set[int] = set()
    for f in files:
        try:
            found.update(int(x) for x in f.read_text().split())
        except FileNotFoundError:
            continue
    return found


def _kill_and_wait(cg: Cgroup, deadline: float) -> None:
    # Only processes pairproof placed in this cgroup can be here, so killing them is killing our own.
    end = time.monotonic() + deadline
    while True:
        pids = cg.pids()
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if time.monotonic() > end:
            raise CgroupError(f"processes {sorted(pids)} in {cg.path} survived SIGKILL for {deadline}s")
        time.sleep(0.01)


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
            if exc.errno != errno.EBUSY or time.monotonic() > end:
                raise CgroupError(f"cannot remove cgroup {path}: {exc.strerror}") from exc
            time.sleep(0.01)


class V1Cgroup:
    """cgroup v1: a directory under the memory and under the pids hierarchy."""

    def __init__(self, memory_dir: Path, pids_dir: Path, path: str) -> None:
        self.memory_dir, self.pids_dir, self.path = memory_dir, pids_dir, path

    @property
    def procs_files(self) -> tuple[Path, ...]:
        return (self.memory_dir / "cgroup.procs", self.pids_dir / "cgroup.procs")

    def add(self, pid: int) -> None:
        for f in self.procs_files:
            _write(f, str(pid))

    def pids(self) -> set[int]:
        return _read_pids(self.procs_files)

    def oom_kills(self) -> int:
        # memory.oom_control has "oom_kill N" on kernels >= 4.13; failcnt is the fallback signal.
        try:
            for line in (self.memory_dir / "memory.oom_control").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except FileNotFoundError:
            pass
        return 0

    def kill_all(self, deadline: float = 5.0) -> None:
        _kill_and_wait(self, deadline)

    def remove(self) -> None:
        self.kill_all()
        _rmdir(self.memory_dir)
        _rmdir(self.pids_dir)


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
        try:
            for line in (self.directory / "memory.events").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except FileNotFoundError:
            pass
        return 0

    def kill_all(self, deadline: float = 5.0) -> None:
        kill = self.directory / "cgroup.kill"  # kernel >= 5.14 kills the whole subtree atomically
        if kill.exists():
            _write(kill, "1")
        _kill_and_wait(self, deadline)

    def remove(self) -> None:
        self.kill_all()
        _rmdir(self.directory)


class Hierarchy(Protocol):
    version: int

    def create(self, run: str, instance: str, limits: Limits) -> Cgroup: ...

    def run_dirs(self) -> list[tuple[str, list[Path]]]: ...

    def open(self, run: str, instance: str) -> Cgroup: ...

    def roots(self) -> list[Path]: ...


class V1Hierarchy:
    version = 1

    def __init__(self, memory_mount: Path, pids_mount: Path) -> None:
        self.memory_mount, self.pids_mount = memory_mount, pids_mount

    def open(self, run: str, instance: str) -> V1Cgroup:
        rel = Path(ROOT_NAME, run, instance)
        return V1Cgroup(self.memory_mount / rel, self.pids_mount / rel, str(rel))

    def create(self, run: str, instance: str, limits: Limits) -> V1Cgroup:
        cg = self.open(run, instance)
        for d in (cg.memory_dir, cg.pids_dir):
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
        return cg

    def roots(self) -> list[Path]:
        return [self.memory_mount / ROOT_NAME, self.pids_mount / ROOT_NAME]

    def run_dirs(self) -> list[tuple[str, list[Path]]]:
        runs: dict[str, list[Path]] = {}
        for mount in (self.memory_mount, self.pids_mount):
            root = mount / ROOT_NAME
            if root.is_dir():
                for d in root.iterdir():
                    if d.is_dir():
                        runs.setdefault(d.name, []).append(d)
        return sorted(runs.items())


class V2Hierarchy:
    version = 2

    def __init__(self, mount: Path) -> None:
        self.mount = mount

    def open(self, run: str, instance: str) -> V2Cgroup:
        rel = Path(ROOT_NAME, run, instance)
        return V2Cgroup(self.mount / rel, str(rel))

    def create(self, run: str, instance: str, limits: Limits) -> V2Cgroup:
        # Controllers must be enabled in every ancestor's subtree_control, top-down, before a leaf
        # below it can have memory.max and pids.max.
        parent = self.mount
        for part in (ROOT_NAME, run):
            _write(parent / "cgroup.subtree_control", "+memory +pids")
            parent = parent / part
            try:
                parent.mkdir(exist_ok=True)
            except OSError as exc:
                raise CgroupError(f"cannot create cgroup {parent}: {exc.strerror}") from exc
        _write(parent / "cgroup.subtree_control", "+memory +pids")
        cg = self.open(run, instance)
        try:
            cg.directory.mkdir(exist_ok=True)
        except OSError as exc:
            raise CgroupError(f"cannot create cgroup {cg.directory}: {exc.strerror}") from exc
        _write(cg.directory / "memory.max", str(limits.memory_bytes))
        if (cg.directory / "memory.swap.max").exists():
            _write(cg.directory / "memory.swap.max", "0")
        _write(cg.directory / "pids.max", str(limits.pids_max))
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
    memory and a pids mount (this project's CI machine mounts v1 with an empty v2 beside it).
    """
    mounts = _mounts(Path(mountinfo_path).read_text())
    for path, fstype, _ in mounts:
        if fstype == "cgroup2":
            try:
                controllers = set((path / "cgroup.controllers").read_text().split())
            except OSError:
                continue
            if {"memory", "pids"} <= controllers:
                return V2Hierarchy(path)
    v1 = {opt: path for path, fstype, opts in mounts if fstype == "cgroup" for opt in opts}
    if "memory" in v1 and "pids" in v1:
        return V1Hierarchy(v1["memory"], v1["pids"])
    raise PreflightError(
        "no cgroup hierarchy offers both the memory and pids controllers (looked in /proc/self/mountinfo): "
        "boot with cgroup v2 (systemd.unified_cgroup_hierarchy=1) or mount the v1 memory and pids controllers"
    )
