"""Finding and removing what runs left: sandboxes, cgroups, volumes, uid claims.

A run's footprint is fully named by its run id: ``<root>/runs/<run>/`` (registry, image, volumes),
``<cgroup mount>/pairproof/<run>/`` (one cgroup per sandbox, holding every process the run started) and
its uid claim. Sandboxes create no host mounts or network namespaces (their mounts live in their own
mount namespace and vanish with it), so removing those three removes the run.

A run is *live* while the process recorded in its ``owner.json`` exists with the same start time;
``clean`` leaves live runs alone unless asked, so it never ends processes of a run still in progress.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from runtime.isolation import cgroups, uids
from runtime.walk import remove_quietly

log = logging.getLogger("pairproof.cleanup")


@dataclass(frozen=True)
class Leftover:
    run: str
    live: bool
    state_dir: Path | None
    cgroup_dirs: tuple[Path, ...] = field(default_factory=tuple)
    processes: tuple[int, ...] = field(default_factory=tuple)


def process_start_time(pid: int) -> int | None:
    """The kernel's start time of ``pid`` (field 22 of stat), so a reused pid is not taken for its owner. Read as
    bytes: the process's name (field 2) is whatever it set (``PR_SET_NAME``), any bytes, a ")" among them."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return int(stat.rsplit(b")", 1)[1].split()[19])


def _owner_alive(state_dir: Path) -> bool:
    try:
        owner = json.loads((state_dir / "owner.json").read_text())
    except (OSError, ValueError):
        return False
    return owner.get("start") is not None and process_start_time(int(owner["pid"])) == owner["start"]


def _procs_under(directory: Path) -> set[int]:
    found: set[int] = set()
    for procs in directory.rglob("cgroup.procs"):
        try:
            found.update(int(p) for p in procs.read_text().split())
        except OSError:
            pass
    return found


def find(root: Path, hierarchy: cgroups.Hierarchy | None = None) -> list[Leftover]:
    """Every run kept under ``root``, live or not, with its cgroups.

    Only runs with state under this root: cgroups are machine-wide, and another state root's runs (another
    CI job, another test session) are none of this root's business, even with ``--all``.
    """
    hierarchy = hierarchy or cgroups.detect()
    by_cgroup = dict(hierarchy.run_dirs())
    runs_dir = root / "runs"
    names = {d.name for d in runs_dir.iterdir() if d.is_dir()} if runs_dir.is_dir() else set()
    leftovers = []
    for run in sorted(names):
        state = runs_dir / run if (runs_dir / run).is_dir() else None
        dirs = tuple(by_cgroup.get(run, ()))
        procs = sorted(set().union(*(_procs_under(d) for d in dirs))) if dirs else []
        leftovers.append(Leftover(run, bool(state and _owner_alive(state)), state, dirs, tuple(procs)))
    return leftovers


def _remove_cgroup_tree(directory: Path) -> None:
    # Leaves first: a cgroup directory can only be removed once it has no children and no processes.
    for child in sorted((d for d in directory.rglob("*") if d.is_dir()), key=lambda d: len(d.parts), reverse=True):
        cgroups._rmdir(child)
    cgroups._rmdir(directory)


def remove_run(root: Path, run: str, *, hierarchy: cgroups.Hierarchy | None = None, keep_state: bool = False) -> None:
    """Kill every process in the run's cgroups, remove them, and (unless ``keep_state``) its files."""
    hierarchy = hierarchy or cgroups.detect()
    for name, dirs in hierarchy.run_dirs():
        if name != run:
            continue
        for d in dirs:
            for instance in (c for c in d.iterdir() if c.is_dir()):
                cg = hierarchy.open(run, instance.name)
                cg.kill_all()
            _remove_cgroup_tree(d)
    _remove_empty_root(hierarchy)
    if not keep_state:
        # The instances' volumes among it: by descriptor, any depth (an instance nests as deep as it likes).
        remove_quietly(root / "runs" / run, log)
        uids.release_run(root / "uid-claims", run)


def _remove_empty_root(hierarchy: cgroups.Hierarchy) -> None:
    # The shared pairproof/ parent goes with the last run; while another run lives in it, rmdir fails
    # (EBUSY/ENOTEMPTY) and that is the answer we want.
    for parent in hierarchy.roots():
        try:
            parent.rmdir()
        except OSError:
            pass


def clean(root: Path, *, include_live: bool = False, hierarchy: cgroups.Hierarchy | None = None) -> list[Leftover]:
    """Remove every run that is not live (or every run, with ``include_live``); return what was removed."""
    hierarchy = hierarchy or cgroups.detect()
    removed = []
    for leftover in find(root, hierarchy):
        if leftover.live and not include_live:
            continue
        remove_run(root, leftover.run, hierarchy=hierarchy)
        removed.append(leftover)
    return removed
