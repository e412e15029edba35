"""The model proxy: the only holder of the provider key, the central admission and meter of model calls.

A call is admitted only for a model capability that verifies (signature, expiry) and is current
(instance, generation, lease, not revoked; see ``authority.Current``), and only while the end user has
spend left under the central cap, and its answer is delivered only if that is still so when it comes back
(a revocation stops calls in flight, not only new ones). Every admitted call, whatever its purpose (the main turn, a title, a
memory review), is forwarded with the provider key and metered in a ledger per org, user and purpose
from the provider's own usage figures. Refusals answer ``{"error": {"reason": CODE}}`` and are logged
with the instance and the reason only.

Purpose (``attribute``): a purpose the request declares (``metadata.purpose``) is used if it is one of
``PURPOSES``. Otherwise the request is recognised by its shape, from its instructions (the system prompt
and the last user message) and the tools it offers:

- a *title* request offers no tools and asks for a title ("Title for: ...", "generate a short title ...",
  "a title for this conversation");
- a *memory review* offers no tools, or only tools whose names say memory, and asks to review, update,
  consolidate or extract memory;
- anything else, and anything that matches both, is metered as ``unattributed``: never lumped into the
  turn, never dropped. A request whose purpose was not declared is forwarded tagged with the purpose it is
  metered under (``metadata.purpose``), so the provider's bill and the ledger name the same thing; a
  declared purpose is forwarded untouched.

Streaming (``stream: true``): the provider's server-sent events are relayed to the caller as they arrive
(chunked, nothing held back but the closing event), each only while the instance's authority still holds: once it ends (kill
switch, lease ended) the relay stops with an error event (``data: {"error": {"reason": ...}}``) and the
rest is not delivered (before the first event, the caller gets the same 403 a whole answer gets). An
OpenAI-style stream is forwarded with ``stream_options.include_usage`` set, so its last chunk carries the
provider's usage (relayed too); the call is metered from it, exactly as a whole answer is metered from its
``usage``, before the stream's closing event (``[DONE]``, ``message_stop``) is relayed. A stream that
ends without usage (cut off, or a provider that sends none) is still metered, once, with usage estimated
from what was asked and relayed (``ESTIMATE``: four characters a token), marked ``usage = 'estimated'`` in
the ledger and logged as such: never dropped.
"""

from __future__ import annotations

import http.client
import json
import logging
import re
import sqlite3
import threading
import time
from pathlib import Path

from runtime import httpjson
from runtime.authority import requestid
from runtime.authority.capabilities import AuthorityError, Current, TokenAuthority
from runtime.httpjson import JsonHandler, QuietServer, serve

log = logging.getLogger("pairproof.proxy")
PURPOSES = ("turn", "title", "memory_review")
UNATTRIBUTED = "unattributed"
ESTIMATE = 4  # characters a token, for a stream that ended without the provider's usage
TITLE_ASK = re.compile(r"^\s*title for\b|\b(?:generate|create|write|suggest|give|make|propose)\b[^.?!\n]{0,60}"
                       r"\btitle\b|\btitle\b[^.?!\n]{0,30}\b(?:for|of) (?:this|the) (?:conversation|chat|session|thread)\b",
                       re.IGNORECASE)
MEMORY_ASK = re.compile(r"\b(?:review|update|consolidate|curate|extract)\w*\b[^.?!\n]{0,60}\bmemor(?:y|ies)\b"
                        r"|\bmemor(?:y|ies)\b[^.?!\n]{0,30}\breview", re.IGNORECASE)
PRICE_IN, PRICE_OUT = 3e-6, 15e-6  # USD per token, the reference price list
ROUTES = {"/v1/chat/completions": "openai", "/v1/messages": "anthropic"}

LEDGER = """
CREATE TABLE IF NOT EXISTS calls (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL, org TEXT NOT NULL, user TEXT NOT NULL, instance TEXT NOT NULL, generation INTEGER NOT NULL,
    purpose TEXT NOT NULL, style TEXT NOT NULL, status INTEGER NOT NULL,
    input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL, cost REAL NOT NULL,
    usage TEXT NOT NULL DEFAULT 'provider'
);
"""


def _text(content: object) -> str:
    """A message's text, whether a string or a list of content blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(b.get("text", "") for b in content if isinstance(b, dict) and isinstance(b.get("text"), str))
    return ""


def _tool_names(body: dict) -> list[str]:
    names = []
    for tool in body.get("tools") or []:
        if isinstance(tool, dict):
            function = tool.get("function") if isinstance(tool.get("function"), dict) else tool
            names.append(str(function.get("name", "")))
    return names


def declared(body: dict) -> str:
    """The purpose the request declares, if it is one the ledger knows; '' otherwise."""
    metadata = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
    purpose = metadata.get("purpose")
    return purpose if purpose in PURPOSES else ""


def attribute(body: dict) -> str:
    """The purpose a call is metered under: declared, or recognised by its shape, or UNATTRIBUTED."""
    if declared(body):
        return declared(body)
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    system = [_text(m.get("content")) for m in messages if m.get("role") in ("system", "developer")]
    system.append(_text(body.get("system")))
    last_user = next((_text(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")
    asks = "\n".join([*system, last_user])
    tools = _tool_names(body)
    title = not tools and bool(TITLE_ASK.search(asks))
    memory = all("memory" in t.lower() for t in tools) and bool(MEMORY_ASK.search(asks))
    if title != memory:
        return "title" if title else "memory_review"
    return UNATTRIBUTED


class ModelProxy:
    def __init__(self, *, provider_url: str, provider_key: str, authority: TokenAuthority, current: Current,
                 ledger_path: Path, default_cap_usd: float = 1.0, host: str = "127.0.0.1") -> None:
        self.provider_url, self._provider_key = provider_url.rstrip("/"), provider_key
        self.authority, self.current, self.default_cap = authority, current, default_cap_usd
        self._caps: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._db = sqlite3.connect(ledger_path, check_same_thread=False, isolation_level=None)
        self._db.executescript(LEDGER)
        if "usage" not in [row[1] for row in self._db.execute("PRAGMA table_info(calls)")]:
            self._db.execute("ALTER TABLE calls ADD COLUMN usage TEXT NOT NULL DEFAULT 'provider'")
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
        with self._lock:
            self._db.close()
            self._closed = True

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
        """Admitted, answered calls per (org, user, purpose)."""
        return {k: v["calls"] for k, v in self.usage().items()}

    def usage(self) -> dict[tuple[str, str, str], dict[str, int]]:
        """Admitted, answered calls and their metered tokens per (org, user, purpose): ``calls``,
        ``input_tokens``, ``output_tokens``. What MD-4 compares with the provider's own record."""
        with self._lock:
            rows = self._db.execute("SELECT org, user, purpose, COUNT(*), SUM(input_tokens), SUM(output_tokens) "
                                    "FROM calls WHERE status = 200 GROUP BY org, user, purpose").fetchall()
        return {(o, u, p): {"calls": n, "input_tokens": i, "output_tokens": out} for o, u, p, n, i, out in rows}

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

    def _prepare(self, style: str, body: dict, claims) -> dict[str, str]:
        """The upstream headers, and the end user set in ``body``: the provider sees who, never which key the
        agent tried."""
        end_user = f"{claims.org}:{claims.user}"
        headers = {"Content-Type": "application/json", **requestid.headers()}  # the provider records the id
        if style == "openai":
            body["user"] = end_user
            headers["Authorization"] = f"Bearer {self._provider_key}"
        else:
            body.setdefault("metadata", {})["user_id"] = end_user
            headers["x-api-key"] = self._provider_key
            headers["anthropic-version"] = "2023-06-01"
        return headers

    def _forward(self, style: str, path: str, body: dict, claims) -> tuple[int, dict]:
        headers = self._prepare(style, body, claims)
        status, raw = httpjson.request("POST", self.provider_url + path, json.dumps(body).encode(), headers,
                                       timeout=httpjson.PROVIDER_TIMEOUT)
        return status, json.loads(raw if status < 400 else raw or b"{}")

    def _relay(self, handler, style: str, path: str, body: dict, claims) -> tuple[int, dict, _Relay | None]:
        """Forward a streaming call and relay its events to ``handler``'s caller as they arrive, each only
        while the instance's authority holds. (status, what the stream amounted to, the relay to ``finish``
        once metered); an answer that is not a stream (a refusal) comes back as ``_forward``'s, with no relay."""
        if style == "openai":
            options = body.get("stream_options") if isinstance(body.get("stream_options"), dict) else {}
            body["stream_options"] = {**options, "include_usage": True}  # the usage chunk is what is metered
        headers = self._prepare(style, body, claims)
        url = self.provider_url.rstrip("/") + path
        conn = None
        try:
            conn = httpjson.connect(url, httpjson.PROVIDER_TIMEOUT)
            response = httpjson.send(conn, "POST", url, json.dumps(body).encode(), headers)
            if response.status != 200 or not response.getheader("Content-Type", "").startswith("text/event-stream"):
                raw = response.read()
                conn.close()
                try:
                    return response.status, json.loads(raw or b"{}"), None
                except ValueError:
                    return 502, {"error": {"reason": "provider_bad_answer", "message": "not JSON"}}, None
        except (OSError, http.client.HTTPException) as exc:
            if conn is not None:
                conn.close()
            return 502, {"error": {"reason": "provider_unreachable", "message": type(exc).__name__}}, None
        stream, relay = _Stream(style, body), _Relay(self, handler, claims)
        try:
            for event in httpjson.sse_events(response):
                stream.feed(event)
                if stream.final(event):
                    relay.last = event  # sent by finish(), once the call is metered
                else:
                    relay.send(event)
        except (OSError, http.client.HTTPException):
            stream.cut = True  # cut off upstream: metered with what came
        finally:
            conn.close()
        return 200, stream.answer(), relay

    def _meter(self, claims, purpose: str, style: str, status: int, answer: dict) -> None:
        usage = answer.get("usage") or {}
        source = "provider" if status == 200 else "none"
        if status == 200 and not usage and answer.get("pairproof_estimate"):
            usage, source = answer["pairproof_estimate"], "estimated"
            log.warning("metered a %s model call without the provider's usage (estimated)", purpose)
        tokens_in = usage.get("prompt_tokens", usage.get("input_tokens", 0)) if status == 200 else 0
        tokens_out = usage.get("completion_tokens", usage.get("output_tokens", 0)) if status == 200 else 0
        with self._lock:
            if self._closed:  # a call still in flight when the platform stopped: said, since it cannot be recorded
                log.warning("a %s model call ended after the proxy stopped: its ledger is closed", purpose)
                return
            self._db.execute(
                "INSERT INTO calls (at, org, user, instance, generation, purpose, style, status, input_tokens, "
                "output_tokens, cost, usage) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (time.time(), claims.org, claims.user, claims.instance, claims.generation, purpose, style, status,
                 tokens_in, tokens_out, tokens_in * PRICE_IN + tokens_out * PRICE_OUT, source))

    def _handler(self):
        proxy = self

        class Handler(JsonHandler):
            component = "model proxy"

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
                purpose = attribute(body)
                if not declared(body) and isinstance(body.get("metadata", {}), dict):
                    # Forwarded tagged with what it is metered as; a declared purpose goes on untouched.
                    body["metadata"] = {**body.get("metadata", {}), "purpose": purpose}
                relay = None
                if body.get("stream") is True:
                    status, answer, relay = proxy._relay(self, style, self.path, body, claims)
                else:
                    status, answer = proxy._forward(style, self.path, body, claims)
                proxy._meter(claims, purpose, style, status, answer)
                if relay is not None:
                    relay.finish()  # relayed as it came, each event only while authority held (``_Relay``)
                    return
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


class _Relay:
    """The caller's side of a relayed stream: each event is sent only while the instance's authority holds;
    once it has ended, the caller gets the reason (an error event, or a 403 if nothing was sent yet) and no
    more. The stream's last event (``[DONE]``, ``message_stop``) is held until the call is metered, so a
    caller with the whole answer finds it in the ledger, as with a whole answer."""

    def __init__(self, proxy: ModelProxy, handler, claims) -> None:
        self.proxy, self.handler, self.claims = proxy, handler, claims
        self.started, self.open, self.last = False, True, b""

    def send(self, event: bytes) -> None:
        if not self.open:
            return  # read on to the end all the same: the usage chunk is what is metered
        try:
            self.proxy.current.check(self.claims)
        except AuthorityError as exc:
            # The kill switch holds mid-stream: nothing more is relayed once authority has ended.
            log.warning("withheld the rest of a streamed model answer: %s", exc.reason)
            self.open = False
            try:
                if self.started:
                    refusal = {"error": {"type": "pairproof_refused", "reason": exc.reason, "message": str(exc)}}
                    self.handler.send_chunk(b"data: " + json.dumps(refusal).encode() + b"\n\n")
                    self.handler.end_stream()
                else:
                    self.handler.refuse(403, exc.reason, str(exc))
            except OSError:
                pass  # the caller went away meanwhile: nothing more to tell it
            self.started = True
            return
        try:
            if not self.started:
                self.handler.start_stream(200)
                self.started = True
            self.handler.send_chunk(event)
        except OSError:
            self.open = False  # the caller went away; the call is metered all the same

    def finish(self) -> None:
        if self.last:
            self.send(self.last)
        if not self.started:
            self.handler.refuse(502, "provider_empty_stream", "the provider's stream ended before its first event")
        elif self.open:
            try:
                self.handler.end_stream()
            except OSError:
                pass


class _Stream:
    """What a relayed stream amounted to: its usage (from the provider) and, for a stream that ended
    without it, an estimate from what was asked and what came."""

    def __init__(self, style: str, body: dict) -> None:
        self.style, self.cut = style, False
        self.usage: dict = {}
        self.text: list[str] = []
        self.tool_calls: dict[int, dict] = {}
        self._prompt = len(json.dumps(body.get("messages"), sort_keys=True)) + len(json.dumps(body.get("system") or ""))

    def feed(self, event: bytes) -> None:
        for data in httpjson.sse_data(event):
            if data == b"[DONE]":
                continue
            try:
                chunk = json.loads(data)
            except ValueError:
                continue
            if isinstance(chunk, dict):
                (self._openai if self.style == "openai" else self._anthropic)(chunk)

    def _openai(self, chunk: dict) -> None:
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            delta = (choice or {}).get("delta") or {}
            if isinstance(delta.get("content"), str):
                self.text.append(delta["content"])
            for call in delta.get("tool_calls") or []:
                slot = self.tool_calls.setdefault(call.get("index", 0), {"id": "", "name": "", "arguments": ""})
                function = call.get("function") or {}
                slot["id"] = call.get("id") or slot["id"]
                slot["name"] = function.get("name") or slot["name"]
                slot["arguments"] += function.get("arguments") or ""

    def _anthropic(self, chunk: dict) -> None:
        kind = chunk.get("type")
        if kind == "message_start":
            usage = (chunk.get("message") or {}).get("usage") or {}
            self.usage = {**self.usage, "input_tokens": usage.get("input_tokens", 0)}
        elif kind == "message_delta" and isinstance(chunk.get("usage"), dict):
            self.usage = {**self.usage, "output_tokens": chunk["usage"].get("output_tokens", 0)}
        elif kind == "content_block_start":
            block = chunk.get("content_block") or {}
            if block.get("type") == "tool_use":
                self.tool_calls[chunk.get("index", 0)] = {"id": block.get("id", ""), "name": block.get("name", ""),
                                                          "arguments": ""}
        elif kind == "content_block_delta":
            delta = chunk.get("delta") or {}
            if delta.get("type") == "text_delta":
                self.text.append(delta.get("text", ""))
            elif delta.get("type") == "input_json_delta" and chunk.get("index", 0) in self.tool_calls:
                self.tool_calls[chunk.get("index", 0)]["arguments"] += delta.get("partial_json", "")

    def final(self, event: bytes) -> bool:
        """The stream's closing event: ``data: [DONE]`` (OpenAI) or ``message_stop`` (Anthropic)."""
        if self.style == "openai":
            return any(line.strip() == b"data: [DONE]" for line in event.splitlines())
        return any(line.startswith(b"data:") and b'"message_stop"' in line for line in event.splitlines())

    def complete(self) -> bool:
        """The provider's usage came whole (Anthropic's comes in two parts)."""
        if self.style == "openai":
            return bool(self.usage)
        return "input_tokens" in self.usage and "output_tokens" in self.usage

    def answer(self) -> dict:
        """The stream as a whole answer's shape, for the meter: usage, and the message it assembled to."""
        calls = [{"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                 for _, c in sorted(self.tool_calls.items())]
        message = {"role": "assistant", "content": "".join(self.text) or None, **({"tool_calls": calls} if calls else {})}
        answer: dict = {"choices": [{"message": message}], "stream_cut": self.cut}
        if self.complete():
            answer["usage"] = self.usage
        else:
            out = len("".join(self.text)) + sum(len(c["name"]) + len(c["arguments"]) for c in self.tool_calls.values())
            answer["pairproof_estimate"] = {"input_tokens": max(1, -(-self._prompt // ESTIMATE)),
                                            "output_tokens": max(1, -(-out // ESTIMATE))}
        return answer
