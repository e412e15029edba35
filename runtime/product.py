"""The product server (tool side): records with an owner, and the MCP tool server brokers forward to.

Authorization happens here, on every call, from the caller's current grant (org, user, instance
generation), never from anything the agent says about itself: even a broker that misroutes a call
cannot make the server hand one user's record to another. The server advertises its whole tool surface
(including tools no broker has pinned yet); which of them an instance may call is the broker's pin list,
not discovery. Records live in SQLite.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from pathlib import Path
from typing import Any

from .authority import AuthorityError, Claims, Current, TokenAuthority
from .httpjson import JsonHandler, QuietServer, serve

log = logging.getLogger("pairproof.product")

SCHEMA = """
CREATE TABLE IF NOT EXISTS notes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    org TEXT NOT NULL, owner TEXT NOT NULL, audience TEXT NOT NULL DEFAULT 'private', body TEXT NOT NULL
);
"""

# Everything the server advertises. notes_purge is deliberately advertised and not pinned by the default
# managed configuration: a tool appearing upstream must not become callable by discovery alone.
TOOLS: list[dict[str, Any]] = [
    {"name": "notes_create", "description": "Create a private note for the caller.",
     "inputSchema": {"type": "object", "properties": {"body": {"type": "string", "maxLength": 10000}},
                     "required": ["body"], "additionalProperties": False}},
    {"name": "notes_get", "description": "Read one of the caller's notes by id.",
     "inputSchema": {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1}},
                     "required": ["id"], "additionalProperties": False}},
    {"name": "notes_list", "description": "List the caller's notes.",
     "inputSchema": {"type": "object", "properties": {}, "additionalProperties": False}},
    {"name": "notes_purge", "description": "Delete all of the caller's notes.",
     "inputSchema": {"type": "object", "properties": {}, "additionalProperties": False}},
]


class ToolError(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class ProductServer:
    def __init__(self, *, db_path: Path, authority: TokenAuthority, current: Current, host: str = "127.0.0.1") -> None:
        self.authority, self.current = authority, current
        self._lock = threading.Lock()
        self._db = sqlite3.connect(db_path, check_same_thread=False, isolation_level=None)
        self._db.executescript(SCHEMA)
        self._server = QuietServer((host, 0), self._handler())

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> ProductServer:
        serve(self._server, "product-server")
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._db.close()

    # -- authorization -------------------------------------------------------------------------------

    def caller(self, authorization: str | None) -> Claims:
        if not authorization or not authorization.startswith("Bearer "):
            raise AuthorityError("no_grant", "Authorization: Bearer <grant> is required")
        claims = self.authority.verify(authorization[len("Bearer "):])
        self.current.check(claims)
        return claims

    # -- tools ---------------------------------------------------------------------------------------

    def call_tool(self, who: Claims, name: str, arguments: dict) -> dict:
        with self._lock:
            if name == "notes_create":
                cur = self._db.execute("INSERT INTO notes (org, owner, body) VALUES (?, ?, ?)",
                                       (who.org, who.user, str(arguments.get("body", ""))))
                return {"id": cur.lastrowid}
            if name == "notes_get":
                row = self._db.execute("SELECT id, org, owner, body FROM notes WHERE id = ?",
                                       (arguments.get("id"),)).fetchone()
                # Same answer for "absent" and "someone else's": the id space must not be an oracle.
                if row is None or (row[1], row[2]) != (who.org, who.user):
                    raise ToolError("not_found_or_not_owner", "no such note for this caller")
                return {"id": row[0], "body": row[3]}
            if name == "notes_list":
                rows = self._db.execute("SELECT id, body FROM notes WHERE org = ? AND owner = ? ORDER BY id",
                                        (who.org, who.user)).fetchall()
                return {"notes": [{"id": i, "body": b} for i, b in rows]}
            if name == "notes_purge":
                cur = self._db.execute("DELETE FROM notes WHERE org = ? AND owner = ?", (who.org, who.user))
                return {"deleted": cur.rowcount}
        raise ToolError("unknown_tool", f"no tool named {name!r}")

    def handle_mcp(self, who: Claims, request: dict) -> dict | None:
        rid, method, params = request.get("id"), request.get("method"), request.get("params") or {}
        if method == "initialize":
            result: Any = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                           "serverInfo": {"name": "pairproof-product", "version": "0.1"}}
        elif method == "ping":
            result = {}
        elif method == "tools/list":
            result = {"tools": TOOLS}
        elif method == "tools/call":
            try:
                value = self.call_tool(who, params.get("name", ""), params.get("arguments") or {})
            except ToolError as exc:
                log.info("tool refused for %s/%s: %s", who.org, who.user, exc.reason)
                return {"jsonrpc": "2.0", "id": rid,
                        "error": {"code": -32000, "message": str(exc), "data": {"reason": exc.reason}}}
            result = {"content": [{"type": "text", "text": json.dumps(value)}], "structuredContent": value,
                      "isError": False}
        elif rid is None:
            return None  # a notification: nothing to answer
        else:
            return {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "method not found"}}
        return {"jsonrpc": "2.0", "id": rid, "result": result}

    def _handler(self):
        product = self

        class Handler(JsonHandler):
            def do_POST(self) -> None:
                if self.path != "/mcp":
                    self.refuse(404, "route_not_found", "the tool server answers at /mcp")
                    return
                try:
                    who = product.caller(self.headers.get("Authorization"))
                except AuthorityError as exc:
                    log.warning("refused grant: %s", exc.reason)
                    self.refuse(403, exc.reason, str(exc))
                    return
                raw = self.read_body()
                try:
                    request = json.loads(raw) if raw is not None else None
                except ValueError:
                    request = None
                if not isinstance(request, dict):
                    self.refuse(400, "bad_request", "one JSON-RPC request object per call")
                    return
                answer = product.handle_mcp(who, request)
                if answer is None:
                    self.send_response(202)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                else:
                    self.send_json(200, answer)

        return Handler
