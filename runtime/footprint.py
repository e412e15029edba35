"""One instance's footprint measured on this host, beside the capacity budget's allowances (``pairproof measure``).

The budget's allowances (``capacity.Budget``) are chosen accounting inputs; this module measures the ones an
instance itself determines, on the running platform, so they can be compared and a budget generated from
them (``budget_from``) instead of typed in:

- *idle*: the memory charged to the instance's cgroup once it is ready and has answered a turn (its imports
  loaded), with nothing running: the kernel's own ``memory.usage_in_bytes`` (v1) or ``memory.current`` (v2).
- *active*: the cgroup's peak charge (``memory.max_usage_in_bytes`` / ``memory.peak``) over the measured turns.
- *broker*: a broker is threads of the controller, in no cgroup of its own, so its figure is what waking the
  instance added to the controller process's resident set (``VmRSS``). Coarse (the allocator keeps what it
  freed), reported as measured.
- *disk*: the blocks the instance's volume takes after the turns (``st_blocks``): a fresh instance's floor,
  not the quota ``volume_mb`` allows it.

The measured instance is provisioned, measured and destroyed on the caller's controller (kept, if asked, for
a caller that checks the figures against the cgroup itself).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from pathlib import Path

from runtime.capacity import Budget
from runtime.errors import InstanceError
from runtime.walk import MAX_DEPTH, TooDeep, walk

MB = 1 << 20


@dataclass(frozen=True)
class Footprint:
    """What one instance took, in bytes; ``instance`` is the one measured."""

    instance: str
    idle_bytes: int
    active_bytes: int
    broker_bytes: int
    disk_bytes: int
    turns: int

    def megabytes(self) -> dict[str, int]:
        """Each figure in whole MB, rounded up (as admission counts: a charged byte is never free)."""
        return {"idle_instance_mb": math.ceil(self.idle_bytes / MB), "active_instance_mb": math.ceil(self.active_bytes / MB),
                "broker_mb": math.ceil(self.broker_bytes / MB), "disk_mb": math.ceil(self.disk_bytes / MB)}


def _rss_bytes(status: Path = Path("/proc/self/status")) -> int:
    line = next(x for x in status.read_text().splitlines() if x.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


def _blocks_bytes(folder: Path) -> int:
    """The disk an instance's volume takes, walked as root by descriptor: the volume is the instance's, and a
    folder it swaps for a link while it is walked must lead nowhere (``runtime.walk`` opens no name through a
    link; every entry is measured relative to its folder's descriptor, unfollowed). Each file is counted once
    however many names it has (a thousand hard links to one file take its blocks once), and a folder the walk
    could not enter (swapped for a link or another folder while it was walked) is an ``InstanceError`` naming
    it, never a smaller figure in silence."""
    total = 0
    seen: set[tuple[int, int]] = set()
    unwalked: list[str] = []
    too_deep: list[str] = []

    def note(error: OSError) -> None:
        if isinstance(error, TooDeep):
            too_deep.append(str(error.filename))
        elif not isinstance(error, FileNotFoundError):  # gone meanwhile: nothing of it takes disk
            unwalked.append(f"{error.filename}: {error.strerror}")

    for _root, dirs, files, root_fd in walk(folder, onerror=note):
        for name in dirs + files:
            try:
                st = os.stat(name, dir_fd=root_fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    if too_deep:
        raise InstanceError(f"the volume {folder} nests folders deeper than {MAX_DEPTH} ({too_deep[0]}): not "
                            "measured (its disk use is its quota's to bound)")
    if unwalked:
        raise InstanceError(f"the volume {folder} changed while it was measured ({len(unwalked)} folder"
                            f"{'s' if len(unwalked) > 1 else ''} not walked: {unwalked[0]}): measure it again, with "
                            "the instance asleep")
    return total


def measure(controller, *, turns: int = 3, org: str = "measure", user: str = "footprint", keep: bool = False
            ) -> Footprint:
    """Provision an instance on ``controller``, wake it, run ``turns`` turns and measure it (see the module's
    docstring); destroyed after unless ``keep``. Needs a controller with a platform (turns go through it)."""
    if turns < 1:
        raise ValueError(f"turns is {turns}: the active figure needs at least one turn")
    record = controller.provision(org, user)
    try:
        before = _rss_bytes()
        controller.wake(record.id)
        broker = max(0, _rss_bytes() - before)
        cgroup = controller.sandbox(record.id).cgroup
        controller.turn(record.id, "measure: a first turn, so the idle figure has its imports loaded")
        idle = cgroup.memory_current()
        cgroup.reset_peak()
        for i in range(turns):
            controller.turn(record.id, f"measure: turn {i + 1} of {turns}")
        active = max(cgroup.memory_peak(), idle)
        disk = _blocks_bytes(controller.volume_path(record.id))
    except BaseException:
        controller.destroy(record.id)
        raise
    if not keep:
        controller.destroy(record.id)
    return Footprint(record.id, idle, active, broker, disk, turns)


def budget_from(footprint: Footprint, base: Budget, margin: float = 1.25) -> Budget:
    """``base`` with the allowances an instance determines (idle, active, broker) replaced by the measured
    figures times ``margin``, in whole MB rounded up; the shared, headroom and storage allowances are
    choices a measurement of one instance cannot make, and stay ``base``'s."""
    if margin < 1:
        raise ValueError(f"margin is {margin}: a budget below what was measured would admit what does not fit")
    mb = footprint.megabytes()
    idle = math.ceil(mb["idle_instance_mb"] * margin)
    return replace(base, idle_instance_mb=idle, active_instance_mb=max(idle, math.ceil(mb["active_instance_mb"] * margin)),
                   broker_mb=math.ceil(mb["broker_mb"] * margin))
