"""The product's records and the rules that guard them, without HTTP: who may see what, which writes
are held as approval cards, what an approval posts, and the audit of operator reads.

Every record has an organization, an owner and an audience: ``private`` (the owner), ``team`` (the
organization), ``user:NAME`` (one named member) or ``external:ADDRESS`` (someone outside). An agent's
write whose audience is wider than ``private`` is never posted directly: it becomes an approval card
carrying the exact payload and the exact audience, and only the owner, approving *that* payload (by its
hash), makes it happen. People act for themselves; operators read through audited calls only.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.errors import RuntimeFault

SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    id INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, org TEXT NOT NULL, owner TEXT NOT NULL,
    audience TEXT NOT NULL, title TEXT NOT NULL DEFAULT '', body TEXT NOT NULL, parent INTEGER, at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS cards (
    id INTEGER PRIMARY KEY AUTOINCREMENT, org TEXT NOT NULL, owner TEXT NOT NULL, action TEXT NOT NULL,
    payload TEXT NOT NULL, audience TEXT NOT NULL, sha256 TEXT NOT NULL, status TEXT NOT NULL,
    posted INTEGER, at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS participants (
    conversation INTEGER NOT NULL, user TEXT NOT NULL, joined REAL NOT NULL, PRIMARY KEY (conversation, user)
);
CREATE TABLE IF NOT EXISTS effects (
    key TEXT PRIMARY KEY, org TEXT NOT NULL, owner TEXT NOT NULL, answer TEXT NOT NULL, at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, operator TEXT NOT NULL, route TEXT NOT NULL,
    record INTEGER NOT NULL, org TEXT NOT NULL, owner TEXT NOT NULL
);
"""


class ProductError(RuntimeFault):
    """A refused request: an HTTP status and a machine-readable reason; nothing was changed."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason = status, reason


@dataclass(frozen=True)
class Caller:
    """Who is asking: an instance's agent (by its grant), a person, or an operator (``user`` = their name)."""

    kind: str
    org: str
    user: str


def canonical(payload: dict[str, Any]) -> str:
    return json.dumps(payload, sort_keys=True, separators=(",", ":"))


def digest(action: str, payload: dict[str, Any], audience: str) -> str:
    """What an approval binds: the action, the exact payload and the exact audience."""
    return hashlib.sha256(canonical({"action": action, "payload": payload, "audience": audience}).encode()).hexdigest()


# Who the request being served is (``ProductStore.serving``): every record the store hands out is recorded
# with it, whichever route or helper asked for the record.
_SERVING: contextvars.ContextVar[Caller | None] = contextvars.ContextVar("pairproof_product_caller", default=None)


class ProductStore:
    def __init__(self, db_path: Path) -> None:
        # The store's own record of every record it handed out (``handed_out``): with the credential of the
        # request that asked (kind "platform": outside any request), whatever route, helper or audit did or
        # did not go with it. OP-2 judges operators' reads by it, not by the routes' word.
        self._handed: list[dict[str, Any]] = []
        self._lock = threading.RLock()
        self._db = sqlite3.connect(db_path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        self._db.close()

    # -- who read what -------------------------------------------------------------------------------

    @contextlib.contextmanager
    def serving(self, who: Caller):
        """While a request of ``who`` is served: every record handed out is recorded as read by ``who``."""
        token = _SERVING.set(who)
        try:
            yield
        finally:
            _SERVING.reset(token)

    def _out(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        who = _SERVING.get()
        at = time.time()
        with self._lock:
            self._handed.extend({"at": at, "kind": who.kind if who else "platform", "user": who.user if who else "",
                                 "record": r["id"], "org": r["org"], "owner": r["owner"]} for r in rows)
        return rows

    def handed_out(self) -> list[dict[str, Any]]:
        """Every record the store handed out so far, in order, with who asked (see ``_handed``)."""
        with self._lock:
            return [dict(r) for r in self._handed]

    # -- visibility ----------------------------------------------------------------------------------

    def _visible(self, who: Caller, row: sqlite3.Row) -> bool:
        if who.org != row["org"]:
            return False
        if who.user == row["owner"]:
            return True
        audience = row["audience"]
        if audience == "team":
            return True
        if audience == f"user:{who.user}":
            return True
        if row["kind"] == "message" and row["parent"] is not None:
            return self._participant_saw(who.user, row["parent"], row["at"])
        return False

    def _participant_saw(self, user: str, conversation: int, at: float) -> bool:
        joined = self._db.execute("SELECT joined FROM participants WHERE conversation = ? AND user = ?",
                                  (conversation, user)).fetchone()
        # A participant added later sees nothing from before they joined.
        return joined is not None and at >= joined["joined"]

    def _row(self, record_id: Any) -> sqlite3.Row | None:
        if not isinstance(record_id, int) or isinstance(record_id, bool):
            raise ProductError(400, "bad_record_id", "a record id is an integer")
        return self._db.execute("SELECT * FROM records WHERE id = ?", (record_id,)).fetchone()

    def record(self, record_id: Any) -> dict[str, Any] | None:
        """The stored record, whoever asks: the product's routes decide who may see it and what is audited
        (``get`` for the people and agents it is visible to, ``operator_read`` for operators, audited)."""
        with self._lock:
            row = self._row(record_id)
        return None if row is None else self._out([dict(row)])[0]

    def get(self, who: Caller, record_id: Any) -> dict[str, Any]:
        with self._lock:
            row = self._row(record_id)
            # Same answer for "absent" and "not yours": the id space must not be an oracle.
            if row is None or not self._visible(who, row):
                raise ProductError(404, "not_found_or_not_visible", "no such record for this caller")
            return self._out([dict(row)])[0]

    def list(self, who: Caller, kind: str | None = None, parent: int | None = None) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM records WHERE org = ? ORDER BY id", (who.org,)).fetchall()
            return self._out([dict(r) for r in rows if self._visible(who, r) and (kind is None or r["kind"] == kind)
                              and (parent is None or r["parent"] == parent)])

    # -- writes ----------------------------------------------------------------------------------------

    def _insert(self, kind: str, org: str, owner: str, audience: str, body: str, title: str = "",
                parent: int | None = None) -> int:
        cur = self._db.execute(
            "INSERT INTO records (kind, org, owner, audience, title, body, parent, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (kind, org, owner, audience, title, body, parent, time.time()))
        return int(cur.lastrowid)

    def person_write(self, who: Caller, kind: str, audience: str, body: str, title: str = "",
                     parent: int | None = None) -> int:
        """A person posting for themselves (B filing a ticket): their own decision, posted at once."""
        if who.kind != "person":
            raise ProductError(403, "people_only", "only a person writes directly")
        with self._lock:
            return self._insert(kind, who.org, who.user, audience, body, title, parent)

    def agent_write(self, who: Caller, action: str, payload: dict[str, Any], audience: str) -> dict[str, Any]:
        """An agent's write: personal ones are posted, any wider audience becomes an approval card."""
        if audience == "private":
            with self._lock:
                return {"posted": self._post(who.org, who.user, action, payload, audience)}
        with self._lock:
            cur = self._db.execute(
                "INSERT INTO cards (org, owner, action, payload, audience, sha256, status, at) "
                "VALUES (?, ?, ?, ?, ?, ?, 'pending', ?)",
                (who.org, who.user, action, canonical(payload), audience, digest(action, payload, audience), time.time()))
            return {"held": int(cur.lastrowid), "audience": audience}

    def _post(self, org: str, owner: str, action: str, payload: dict[str, Any], audience: str) -> int:
        if action == "add_participant":
            conversation = payload["conversation_id"]
            self._db.execute("INSERT OR IGNORE INTO participants VALUES (?, ?, ?)",
                             (conversation, payload["user"], time.time()))
            return int(conversation)
        kind = {"comment": "comment", "task": "task", "crm_note": "crm", "message": "message",
                "invitation": "invitation", "note": "note", "conversation_message": "message"}[action]
        return self._insert(kind, org, owner, audience, str(payload.get("body", "")), str(payload.get("title", "")),
                            payload.get("parent"))

    # -- approval cards ----------------------------------------------------------------------------------

    def cards(self, who: Caller) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM cards WHERE org = ? AND owner = ? ORDER BY id",
                                    (who.org, who.user)).fetchall()
        return [{**dict(r), "payload": json.loads(r["payload"])} for r in rows]

    def decide(self, who: Caller, card_id: Any, approve: bool, sha256: Any = None) -> dict[str, Any]:
        if who.kind != "person":
            raise ProductError(403, "owner_decides", "only the owner, as a person, decides a card")
        with self._lock:
            card = self._db.execute("SELECT * FROM cards WHERE id = ?", (card_id,)).fetchone() \
                if isinstance(card_id, int) else None
            if card is None or (card["org"], card["owner"]) != (who.org, who.user):
                raise ProductError(404, "not_found_or_not_visible", "no such card for this caller")
            if card["status"] != "pending":
                raise ProductError(409, "already_decided", f"card {card_id} is {card['status']}")
            if not approve:
                self._db.execute("UPDATE cards SET status = 'rejected' WHERE id = ?", (card_id,))
                return {"card": card_id, "status": "rejected"}
            if sha256 != card["sha256"]:
                raise ProductError(409, "payload_mismatch",
                                   "the approval names another payload or audience than the card holds")
            posted = self._post(card["org"], card["owner"], card["action"], json.loads(card["payload"]), card["audience"])
            self._db.execute("UPDATE cards SET status = 'posted', posted = ? WHERE id = ?", (posted, card_id))
            return {"card": card_id, "status": "posted", "record": posted}

    # -- conversations -----------------------------------------------------------------------------------

    def conversation(self, who: Caller, title: str) -> int:
        with self._lock:
            conversation = self._insert("conversation", who.org, who.user, "private", "", title)
            self._db.execute("INSERT INTO participants VALUES (?, ?, ?)", (conversation, who.user, 0.0))
            return conversation

    def conversation_owner(self, who: Caller, conversation: Any) -> sqlite3.Row:
        row = self._row(conversation)
        if row is None or row["kind"] != "conversation" or not self._visible(who, row):
            raise ProductError(404, "not_found_or_not_visible", "no such conversation for this caller")
        return row

    def messages(self, who: Caller, conversation: Any) -> list[dict[str, Any]]:
        with self._lock:
            row = self._row(conversation)
            if row is None or row["kind"] != "conversation":
                raise ProductError(404, "not_found_or_not_visible", "no such conversation for this caller")
            if who.user != row["owner"] and not self._participant_saw(who.user, conversation, float("inf")):
                raise ProductError(404, "not_found_or_not_visible", "no such conversation for this caller")
            rows = self._db.execute("SELECT * FROM records WHERE kind = 'message' AND parent = ? ORDER BY id",
                                    (conversation,)).fetchall()
            return self._out([dict(r) for r in rows if self._visible(who, r)])

    def message_ids(self, owner: Caller, conversation: int) -> list[int]:
        """The ids of the messages of ``owner``'s conversation that ``owner`` sees, no record handed out: an
        operator route reads (and audits) each one itself."""
        with self._lock:
            rows = self._db.execute("SELECT * FROM records WHERE kind = 'message' AND parent = ? ORDER BY id",
                                    (conversation,)).fetchall()
            return [r["id"] for r in rows if self._visible(owner, r)]

    def participants(self, conversation: int) -> list[str]:
        with self._lock:
            return [r["user"] for r in self._db.execute(
                "SELECT user FROM participants WHERE conversation = ? ORDER BY joined", (conversation,))]

    def purge_notes(self, who: Caller) -> int:
        with self._lock:
            cur = self._db.execute("DELETE FROM records WHERE kind = 'note' AND org = ? AND owner = ?", (who.org, who.user))
            return cur.rowcount

    # -- idempotent effects ------------------------------------------------------------------------------

    def effect(self, who: Caller, key: str) -> dict[str, Any] | None:
        """The stored answer of operation ``key`` for this caller, or None if it never happened."""
        with self._lock:
            row = self._db.execute("SELECT answer FROM effects WHERE key = ? AND org = ? AND owner = ?",
                                   (key, who.org, who.user)).fetchone()
        return json.loads(row["answer"]) if row else None

    def record_effect(self, who: Caller, key: str, answer: dict[str, Any]) -> None:
        with self._lock:
            self._db.execute("INSERT OR IGNORE INTO effects VALUES (?, ?, ?, ?, ?)",
                             (key, who.org, who.user, json.dumps(answer), time.time()))

    # -- operators -------------------------------------------------------------------------------------

    def operator_read(self, operator: Caller, record_id: Any, route: str) -> dict[str, Any]:
        """An operator's read: written to the audit first, then answered."""
        if operator.kind != "operator":
            raise ProductError(403, "operators_only", "this route is for operators")
        with self._lock:
            row = self._row(record_id)
            if row is None:
                raise ProductError(404, "not_found", "no such record")
            self._db.execute("INSERT INTO audit (at, operator, route, record, org, owner) VALUES (?, ?, ?, ?, ?, ?)",
                             (time.time(), operator.user, route, row["id"], row["org"], row["owner"]))
            return self._out([dict(row)])[0]

    def audit(self, who: Caller) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM audit WHERE org = ? AND owner = ? ORDER BY id",
                                    (who.org, who.user)).fetchall()
        return [dict(r) for r in rows]
