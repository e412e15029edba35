"""The model proxy: the only holder of the provider key, the central admission and meter of model calls.

A call is admitted only for a model capability that verifies (signature, expiry) and is current
(instance, generation, lease, not revoked; see ``authority.Current``), and only while the end user has
spend left under the central cap, and its answer is delivered only if that is still so when it comes back
(a revocation stops calls in flight, not only new ones). Every admitted call, whatever its purpose (the main turn, a title, a
memory review), is forwarded with the provider key and metered in a ledger per org, user and purpose
from the provider's own usage figures. Refusals answer ``{"error": {"reason": CODE}}`` and are logged
with the instance and the reason only.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from .authority import AuthorityError, Current, TokenAuthority
from .httpjson import JsonHandler, QuietServer, serve

log = logging.getLogger("pairproof.proxy")
PURPOSES = ("turn", "title", "memory_review")
PRICE_IN, PRICE_OUT = 3e-6, 15e-6  # USD per token, the reference price list
ROUTES = {"/v1/chat/completions": "openai", "/v1/messages": "anthropic"}

LEDGER = """
CREATE TABLE IF NOT EXISTS calls (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL, org TEXT NOT NULL, user TEXT NOT NULL, instance TEXT NOT NULL, generation INTEGER NOT NULL,
    purpose TEXT NOT NULL, style TEXT NOT NULL, status INTEGER NOT NULL,
    input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL, cost REAL NOT NULL
);
"""


class ModelProxy:
    def __init__(self, *, provider_url: str, provider_key: str, authority: TokenAuthority, current: Current,
                 ledger_path: Path, default_cap_usd: float = 1.0, host: str = "127.0.0.1") -> None:
        self.provider_url, self._provider_key = provider_url.rstrip("/"), provider_key
        self.authority, self.current, self.default_cap = authority, current, default_cap_usd
        self._caps: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()
        self._db = sqlite3.connect(ledger_path, check_same_thread=False, isolation_level=None)
        self._db.executescript(LEDGER)
        self._server = QuietServer((host, 0), self._handler())
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> ModelProxy:
        self._thread = serve(self._server, "model-proxy")
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._db.close()

    # -- spend ---------------------------------------------------------------------------------------

    def set_cap(self, org: str, user: str, usd: float) -> None:
        self._caps[(org, user)] = usd

    def spent(self, org: str, user: str) -> float:
        with self._lock:
            (total,) = self._db.execute("SELECT COALESCE(SUM(cost), 0) FROM calls WHERE org = ? AND user = ?",
                                        (org, user)).fetchone()
        return total

    def ledger(self) -> list[dict]:
        with self._lock:
            cur = self._db.execute("SELECT * FROM calls ORDER BY seq")
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row)) for row in cur.fetchall()]

    def counts(self) -> dict[tuple[str, str, str], int]:
        """Admitted, answered calls per (org, user, purpose): what MD-4 compares with the provider."""
        with self._lock:
            rows = self._db.execute("SELECT org, user, purpose, COUNT(*) FROM calls WHERE status = 200 "
                                    "GROUP BY org, user, purpose").fetchall()
        return {(o, u, p): n for o, u, p, n in rows}

    # -- the call path -------------------------------------------------------------------------------

    def _admit(self, authorization: str | None):
        if not authorization or not authorization.startswith("Bearer "):
            raise AuthorityError("no_capability", "Authorization: Bearer <model capability> is required")
        claims = self.authority.verify(authorization[len("Bearer "):])
        self.current.check(claims)
        cap = self._caps.get((claims.org, claims.user), self.default_cap)
        if self.spent(claims.org, claims.user) >= cap:
            raise AuthorityError("spend_exhausted", f"spend cap of ${cap:.4f} reached for this user")
        return claims

    def _forward(self, style: str, path: str, body: dict, claims) -> tuple[int, dict]:
        end_user = f"{claims.org}:{claims.user}"  # the provider sees who, never which key the agent tried
        headers = {"Content-Type": "application/json"}
        if style == "openai":
            body["user"] = end_user
            headers["Authorization"] = f"Bearer {self._provider_key}"
        else:
            body.setdefault("metadata", {})["user_id"] = end_user
            headers["x-api-key"] = self._provider_key
            headers["anthropic-version"] = "2023-06-01"
        request = urllib.request.Request(self.provider_url + path, json.dumps(body).encode(), headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")

    def _meter(self, claims, purpose: str, style: str, status: int, answer: dict) -> None:
        usage = answer.get("usage") or {}
        tokens_in = usage.get("prompt_tokens", usage.get("input_tokens", 0)) if status == 200 else 0
        tokens_out = usage.get("completion_tokens", usage.get("output_tokens", 0)) if status == 200 else 0
        with self._lock:
            self._db.execute(
                "INSERT INTO calls (at, org, user, instance, generation, purpose, style, status, input_tokens, "
                "output_tokens, cost) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (time.time(), claims.org, claims.user, claims.instance, claims.generation, purpose, style, status,
                 tokens_in, tokens_out, tokens_in * PRICE_IN + tokens_out * PRICE_OUT))

    def _handler(self):
        proxy = self

        class Handler(JsonHandler):
            def do_POST(self) -> None:
                style = ROUTES.get(self.path)
                if style is None:
                    self.refuse(404, "route_not_allowed", "the proxy serves model completions only")
                    return
                try:
                    claims = proxy._admit(self.headers.get("Authorization"))
                except AuthorityError as exc:
                    log.warning("refused model call: %s", exc.reason)  # the reason, never the capability
                    self.refuse(429 if exc.reason == "spend_exhausted" else 403, exc.reason, str(exc))
                    return
                raw = self.read_body()
                try:
                    body = json.loads(raw) if raw is not None else None
                except ValueError:
                    body = None
                if not isinstance(body, dict):
                    self.refuse(400, "bad_request", "body must be a JSON object under 1 MiB")
                    return
                purpose = (body.get("metadata") or {}).get("purpose", "")
                purpose = purpose if purpose in PURPOSES else "other"
                status, answer = proxy._forward(style, self.path, body, claims)
                proxy._meter(claims, purpose, style, status, answer)
                try:
                    # The kill switch stops calls in flight too: an answer that arrives after the instance's
                    # authority ended (revoked, lease ended, recreated) is metered, since the provider spent
                    # it, but never delivered.
                    proxy.current.check(claims)
                except AuthorityError as exc:
                    log.warning("withheld model answer: %s", exc.reason)
                    self.refuse(403, exc.reason, str(exc))
                    return
                self.send_json(status, answer)

        return Handler
