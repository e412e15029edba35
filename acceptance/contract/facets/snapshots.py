"""The ``snapshots`` facet: take, list and restore volume snapshots, and read their bytes at rest; with its
check-driver round trip (a restore must bring back the volume as snapshotted).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from acceptance.contract.checking import OWNER, Checker, check
from acceptance.contract.core import InstanceRef, Principal


@runtime_checkable
class Snapshots(Protocol):
    """Volume snapshots: take, list, restore, and the bytes at rest."""

    def snapshot(self, ref: InstanceRef, *, request_id: str = "") -> str:
        """Snapshot the instance's volume; the snapshot id."""

    def snapshots(self, principal: Principal) -> list[str]:
        """The snapshot ids ``principal`` may see (their own)."""

    def restore(self, snapshot_id: str, into: InstanceRef, *, request_id: str = "") -> InstanceRef:
        """Restore a snapshot into ``into`` (refused unless the snapshot is its owner's); the new ref."""

    def snapshot_bytes(self, snapshot_id: str) -> bytes:
        """The snapshot as stored at rest, for the scanners."""


def round_trip(c: Checker) -> str:
    """A snapshot is listed, a restore brings back the volume as it was (what was written later is gone),
    and its bytes at rest are not empty."""
    t, ref = c.target, c.ref
    snap = t.snapshot(ref)
    check(snap in t.snapshots(OWNER), f"snapshot {snap} is not in snapshots({OWNER.name})")
    # Written after the snapshot: a restore brings back the volume as it was, so this goes (a restore that
    # restores nothing keeps it).
    later = f"{c.token}later"
    t.plant(ref, "memory", later)
    check(later in t.read_back(ref, "memory"), "plant after the snapshot: the token did not come back")
    c.ref = restored = t.restore(snap, into=ref)
    check(isinstance(restored, InstanceRef), f"restore returned {restored!r}")
    memory = t.read_back(restored, "memory")
    check(c.token + "memory" in memory, "the restored instance lost its memory token")
    check(later not in memory, "restore left what was written after the snapshot: it restored nothing")
    check(len(t.snapshot_bytes(snap)) > 0, "snapshot_bytes is empty")
    return "snapshot, snapshots, restore (the volume as snapshotted: later memory gone), snapshot_bytes"
