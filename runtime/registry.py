"""The controller's registry on disk: which instances exist, their uid, generation and state.

SQLite, so a restarted controller finds its instances and two processes never half-write a record.
One live instance per (org, user) pair is a database constraint, not a convention: a person in two
organizations has two rows, a second row for the same pair is refused.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from runtime.errors import InstanceError, InstanceNotFound

SCHEMA = """
CREATE TABLE IF NOT EXISTS instances (
    id TEXT PRIMARY KEY,
    org TEXT NOT NULL,
    user TEXT NOT NULL,
    slot INTEGER NOT NULL UNIQUE,
    uid INTEGER NOT NULL UNIQUE,
    generation INTEGER NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('provisioned', 'running', 'sleeping', 'snapshotted', 'destroyed')),
    memory_bytes INTEGER NOT NULL,
    pids_max INTEGER NOT NULL,
    created REAL NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS one_live_instance_per_pair
    ON instances (org, user) WHERE state != 'destroyed';
"""


@dataclass(frozen=True)
class InstanceRecord:
    id: str
    org: str
    user: str
    slot: int
    uid: int
    generation: int
    state: str
    memory_bytes: int
    pids_max: int
    # Set on the record a wake returns (never stored): the depth it woke from, "frozen", "stopped",
    # "snapshotted", "provisioned" (a first wake) or "running" (it was awake already).
    woke_from: str = ""


class Registry:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(SCHEMA)
        # Simultaneous wakes use one connection from several threads: one statement at a time, each read
        # whole before the next.
        self._lock = threading.Lock()
        self._adding = threading.Lock()  # the next slot read and its row inserted as one step (``add``)

    def _rows(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    def close(self) -> None:
        self._db.close()

    def add(self, org: str, user: str, uid_for_slot: Callable[[int], int], memory_bytes: int,
            pids_max: int) -> InstanceRecord:
        """Register a new instance; its id is ``<org>-<user>-<slot>`` so a re-provisioned pair gets a new id."""
        # One controller owns a registry, but it may provision from several threads at once: the next slot is
        # read and its row inserted under one lock, or two provisions would take the same slot (and uid) and the
        # second be refused as if its pair existed. The UNIQUE constraints still refuse a second live row for the pair.
        with self._adding:
            [(slot,)] = self._rows("SELECT COALESCE(MAX(slot) + 1, 0) FROM instances")
            id = f"{org}-{user}-{slot}"
            try:
                self._rows(
                    "INSERT INTO instances VALUES (?, ?, ?, ?, ?, 1, 'provisioned', ?, ?, ?)",
                    (id, org, user, slot, uid_for_slot(slot), memory_bytes, pids_max, time.time()),
                )
            except sqlite3.IntegrityError as exc:
                raise InstanceError(
                    f"an instance for org {org!r}, user {user!r} already exists: one instance per (org, user) pair; "
                    "destroy it first or use the existing one"
                ) from exc
        return self.get(id)

    def get(self, id: str) -> InstanceRecord:
        row = next(iter(self._rows(
            "SELECT id, org, user, slot, uid, generation, state, memory_bytes, pids_max FROM instances WHERE id = ?", (id,)
        )), None)
        if row is None:
            raise InstanceNotFound(f"no instance {id!r} in {self.path}")
        return InstanceRecord(*row)

    def find(self, org: str, user: str) -> InstanceRecord:
        row = next(iter(self._rows(
            "SELECT id FROM instances WHERE org = ? AND user = ? AND state != 'destroyed'", (org, user)
        )), None)
        if row is None:
            raise InstanceNotFound(f"no live instance for org {org!r}, user {user!r}")
        return self.get(row[0])

    def all(self) -> list[InstanceRecord]:
        ids = [r[0] for r in self._rows("SELECT id FROM instances ORDER BY slot")]
        return [self.get(i) for i in ids]

    def set_state(self, id: str, state: str) -> InstanceRecord:
        self._rows("UPDATE instances SET state = ? WHERE id = ?", (state, id))
        return self.get(id)

    def bump_generation(self, id: str) -> InstanceRecord:
        self._rows("UPDATE instances SET generation = generation + 1 WHERE id = ?", (id,))
        return self.get(id)
