"""The capacity model: the seed's admission arithmetic, budgeting resident state, active work and retained
storage separately.

Memory pays for the shared control plane and its headroom, each resident instance (an idle allowance, or
the larger active one while it runs a turn) and each resident instance's broker. Disk pays for headroom,
every stored user's volume (a sleeping user's volume still takes disk) and the stored snapshots. All
figures are integer MB and *chosen accounting inputs*, not measurements: a fleet that fits proves only
that it fits this arithmetic, not that it runs at an acceptable latency (CPU, I/O, simultaneous wakes and
provider limits need their own qualification).

This module is pure and stdlib only; the controller measures its fleet and host and asks ``admit``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path

from runtime.errors import ConfigError


def _check(record: object) -> None:
    """Every field a non-negative int (bools are not counts); the message names the field and the fix."""
    kind = type(record).__name__.lower()
    for f in fields(record):
        value = getattr(record, f.name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{kind}.{f.name} is {value!r} ({type(value).__name__}): "
                              "give a whole number of MB (or of instances) as an int")
        if value < 0:
            raise ConfigError(f"{kind}.{f.name} is {value}: give a number >= 0")


def _from_mapping(cls, values: Mapping[str, object]):
    names = [f.name for f in fields(cls)]
    kind = cls.__name__.lower()
    missing = [n for n in names if n not in values]
    unknown = sorted(k for k in values if k not in names)
    if missing or unknown:
        raise ConfigError(f"{kind} has " + "; ".join(
            ([f"missing {', '.join(missing)}"] if missing else []) + ([f"unknown {', '.join(unknown)}"] if unknown else [])
        ) + f": give exactly {', '.join(names)}")
    return cls(**{n: values[n] for n in names})


class _Counts:
    """Integer MB (or instance) fields, checked on creation; ``of`` builds one from a mapping."""

    def __post_init__(self) -> None:
        _check(self)

    @classmethod
    def of(cls, values: Mapping[str, object]):
        return _from_mapping(cls, values)


@dataclass(frozen=True)
class Budget(_Counts):
    """The chosen allowances, in MB."""

    shared_memory_mb: int
    memory_headroom_mb: int
    idle_instance_mb: int
    active_instance_mb: int
    broker_mb: int
    volume_mb: int
    disk_headroom_mb: int


@dataclass(frozen=True)
class Fleet(_Counts):
    """What is on the host: instances with a running sandbox (``resident``), those running a turn
    (``active``, a subset of resident), users whose volume is kept (``stored_users``) and snapshot MB."""

    resident: int
    active: int
    stored_users: int
    snapshots_mb: int

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.active > self.resident:
            raise ConfigError(f"fleet.active is {self.active} but fleet.resident is {self.resident}: an active "
                              "instance is also resident, so give active <= resident")


@dataclass(frozen=True)
class Host(_Counts):
    """What the host offers to admit against, in MB."""

    memory_mb: int
    disk_mb: int


@dataclass(frozen=True)
class Need:
    memory_mb: int
    disk_mb: int


@dataclass(frozen=True)
class Admission:
    """The answer: ``ok``, and a reason naming each resource that does not fit (or what fits)."""

    ok: bool
    reason: str


def need(budget: Budget, fleet: Fleet) -> Need:
    """The memory and disk ``fleet`` needs under ``budget``."""
    idle = fleet.resident - fleet.active
    memory = (
        budget.shared_memory_mb + budget.memory_headroom_mb
        + idle * budget.idle_instance_mb
        + fleet.active * budget.active_instance_mb
        + fleet.resident * budget.broker_mb
    )
    disk = budget.disk_headroom_mb + fleet.stored_users * budget.volume_mb + fleet.snapshots_mb
    return Need(memory_mb=memory, disk_mb=disk)


def admit(budget: Budget, fleet: Fleet, host: Host) -> Admission:
    """Whether ``fleet`` fits ``host`` under ``budget``; both resources are checked, every misfit named."""
    needed = need(budget, fleet)
    misfits = []
    if needed.memory_mb > host.memory_mb:
        misfits.append(f"memory: {needed.memory_mb} MB needed for {fleet.resident} resident ({fleet.active} active), "
                       f"host has {host.memory_mb} MB")
    if needed.disk_mb > host.disk_mb:
        misfits.append(f"disk: {needed.disk_mb} MB needed for {fleet.stored_users} stored users "
                       f"({fleet.snapshots_mb} MB snapshots), host has {host.disk_mb} MB")
    if misfits:
        return Admission(False, "; ".join(misfits))
    return Admission(True, f"fits: memory {needed.memory_mb} of {host.memory_mb} MB, disk {needed.disk_mb} of "
                           f"{host.disk_mb} MB")


def measure_host(path: Path, meminfo: Path = Path("/proc/meminfo")) -> Host:
    """The machine's total memory and the free space of the file system holding ``path``, in whole MB."""
    total_kb = next(int(line.split()[1]) for line in meminfo.read_text().splitlines() if line.startswith("MemTotal:"))
    st = os.statvfs(path)
    return Host(memory_mb=total_kb // 1024, disk_mb=st.f_bavail * st.f_frsize // (1 << 20))


def megabytes(size_bytes: int) -> int:
    """Bytes as whole MB, rounded up: a stored byte is never free."""
    return math.ceil(size_bytes / (1 << 20))


# The seed's worked example. Its memory inputs are the seed's (640 MB idle, 1,024 MB active, 60 MB broker,
# 3,000 MB shared memory plus headroom, split here 2,000 + 1,000); its disk total of 77,000 MB is split by
# choice into 5,000 MB headroom, 20 volumes of 2,000 MB and 32,000 MB of snapshots.
# Ten resident, four active, twenty stored: memory 11,536 MB, disk 77,000 MB.
SEED_EXAMPLE = (
    Budget(shared_memory_mb=2000, memory_headroom_mb=1000, idle_instance_mb=640, active_instance_mb=1024,
           broker_mb=60, volume_mb=2000, disk_headroom_mb=5000),
    Fleet(resident=10, active=4, stored_users=20, snapshots_mb=32000),
)

# The reference runtime's allowances: its sandboxes are limited to 256 MB, which is what an active
# instance may take; idle agents and brokers are small Python processes.
REFERENCE_BUDGET = Budget(shared_memory_mb=256, memory_headroom_mb=256, idle_instance_mb=64, active_instance_mb=256,
                          broker_mb=16, volume_mb=64, disk_headroom_mb=512)
