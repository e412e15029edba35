"""The effect journal: every outbound effect an instance makes, kept outside the conversation.

Before a write tool is dispatched it gets an operation id (also its idempotency key at the product) and
the state ``pending``; then ``dispatched`` once the request is on the wire, and ``completed`` when an
answer came back. A connection that failed before anything was sent is ``not_dispatched``; a request
sent without an answer is ``unknown``: nobody can tell from here whether it happened, and recovery asks
the product server (never the model) before anything is retried. Kept in SQLite in the instance's
platform folder, which no sandbox mounts.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import threading
import time
from pathlib import Path

STATES = ("pending", "dispatched", "completed", "not_dispatched", "unknown")
SCHEMA = """
CREATE TABLE IF NOT EXISTS ops (
    op TEXT PRIMARY KEY, tool TEXT NOT NULL, request TEXT NOT NULL, state TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0, generation INTEGER NOT NULL, at REAL NOT NULL
);
"""


class Journal:
    def __init__(self, path: Path) -> None:
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.executescript(SCHEMA)

    def begin(self, tool: str, request: dict, generation: int) -> str:
        op = "op_" + secrets.token_hex(8)
        with self._lock:
            self._db.execute("INSERT INTO ops (op, tool, request, state, generation, at) VALUES (?, ?, ?, 'pending', ?, ?)",
                             (op, tool, json.dumps(request), generation, time.time()))
        return op

    def mark(self, op: str, state: str, *, attempt: bool = False) -> None:
        assert state in STATES
        with self._lock:
            self._db.execute("UPDATE ops SET state = ?, attempts = attempts + ? WHERE op = ?", (state, int(attempt), op))

    def ops(self, *states: str) -> list[dict]:
        with self._lock:
            rows = self._db.execute("SELECT op, tool, request, state, attempts, generation FROM ops ORDER BY at").fetchall()
        return [{"op": o, "tool": t, "request": json.loads(r), "state": s, "attempts": a, "generation": g}
                for o, t, r, s, a, g in rows if not states or s in states]

    def close(self) -> None:
        self._db.close()
