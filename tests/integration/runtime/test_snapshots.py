"""Snapshots at the store level: owner-bound, intact or refused whole."""

from __future__ import annotations

import os

import pytest

from runtime.snapshots import SnapshotError, SnapshotStore


@pytest.fixture
def store_and_volume(tmp_path):
    volume = tmp_path / "volume"
    volume.mkdir()
    (volume / "memory.md").write_text("- the blue door\n")
    return SnapshotStore(tmp_path / "state"), volume


def test_round_trip_for_the_owner(store_and_volume):
    store, volume = store_and_volume
    ref = store.take(volume, org="org1", user="alice", instance="org1-alice-0", generation=3)
    assert [r.id for r in store.list("org1", "alice")] == [ref.id] and store.list("org1", "bob") == []
    (volume / "memory.md").write_text("changed\n")
    store.restore(ref.id, org="org1", user="alice", volume=volume, uid=os.getuid())
    assert (volume / "memory.md").read_text() == "- the blue door\n"
    assert b"blue door" not in ref.path.read_bytes()


@pytest.mark.parametrize("damage", ["truncate", "flip", "header"])
def test_a_damaged_snapshot_is_refused_and_nothing_is_overwritten(store_and_volume, damage):
    store, volume = store_and_volume
    ref = store.take(volume, org="org1", user="alice", instance="org1-alice-0", generation=1)
    blob = bytearray(ref.path.read_bytes())
    if damage == "truncate":
        blob = blob[:-20]
    elif damage == "flip":
        blob[-5] ^= 0xFF
    else:
        blob[12] ^= 0x01  # inside the authenticated header
    ref.path.write_bytes(bytes(blob))
    (volume / "memory.md").write_text("current\n")
    with pytest.raises(SnapshotError) as exc:
        store.restore(ref.id, org="org1", user="alice", volume=volume, uid=os.getuid())
    assert exc.value.reason in ("corrupt", "not_found")
    assert (volume / "memory.md").read_text() == "current\n"
    assert sorted(p.name for p in volume.parent.iterdir()) == ["state", "volume"]


def test_another_owner_cannot_restore(store_and_volume):
    store, volume = store_and_volume
    ref = store.take(volume, org="org1", user="alice", instance="org1-alice-0", generation=1)
    with pytest.raises(SnapshotError, match="no snapshot") as exc:
        store.restore(ref.id, org="org1", user="bob", volume=volume, uid=os.getuid())
    assert exc.value.reason == "not_found"
