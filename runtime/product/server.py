"""The product server: a real HTTP service over ``store.ProductStore``, for agents, people and operators.

Three doors, each with its own credential, and authorization on every call from that credential alone
(never from what a caller says about itself):

- ``POST /mcp``: the MCP tool server brokers forward to, with an instance's grant (checked against the
  controller's current generation and lease). It advertises its whole tool surface, including tools no
  broker has pinned: which of them an instance may call is the broker's pin list, not discovery.
- ``/api/...``: the people's API, with a person token: their records, approval cards, the audit of
  operator reads of their content, rendered records.
- ``/api/operator/...``: read-only routes for support operators, each writing an audit record per record
  read before answering. An operator token opens nothing else, and nobody may act as someone else.

The route table is public (``routes()``) so the suite can enumerate every real route; ``add_route``
lets a deployment add one and returns what removes it (the suite's broken control adds an unaudited one).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from runtime.authority.capabilities import AuthorityError, Current, TokenAuthority
from runtime.httpjson import JsonHandler, QuietServer, serve
from runtime.product.render import render
from runtime.product.store import Caller, ProductError, ProductStore

log = logging.getLogger("pairproof.product")
IDEMPOTENCY = "__idempotency_key"


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


TEXT = {"type": "string", "maxLength": 10000}
ID = {"type": "integer", "minimum": 1}
NAME = {"type": "string", "pattern": "^[a-z0-9][a-z0-9_]{0,31}$"}
ADDRESS = {"type": "string", "maxLength": 320}

# Everything the server advertises. notes_purge is deliberately advertised and not pinned by the default
# managed configuration: a tool appearing upstream must not become callable by discovery alone.
TOOLS: list[dict[str, Any]] = [
    {"name": "notes_create", "description": "Create a private note.", "inputSchema": _schema({"body": TEXT}, ["body"])},
    {"name": "notes_get", "description": "Read one of your notes.", "inputSchema": _schema({"id": ID}, ["id"])},
    {"name": "notes_list", "description": "List your notes.", "inputSchema": _schema({}, [])},
    {"name": "notes_purge", "description": "Delete all your notes.", "inputSchema": _schema({}, [])},
    {"name": "issues_list", "description": "List the team's issues.", "inputSchema": _schema({}, [])},
    {"name": "issue_get", "description": "Read an issue and its comments.", "inputSchema": _schema({"id": ID}, ["id"])},
    {"name": "issue_comment", "description": "Comment on an issue (team-visible).",
     "inputSchema": _schema({"issue_id": ID, "body": TEXT}, ["issue_id", "body"])},
    {"name": "task_create", "description": "Create a task, for you or assigned to a colleague.",
     "inputSchema": _schema({"title": TEXT, "assignee": NAME}, ["title"])},
    {"name": "crm_note", "description": "Add a note to a CRM account (team-visible).",
     "inputSchema": _schema({"account": {"type": "string", "maxLength": 200}, "body": TEXT}, ["account", "body"])},
    {"name": "message_send", "description": "Send a message to an outside address.",
     "inputSchema": _schema({"to": ADDRESS, "body": TEXT}, ["to", "body"])},
    {"name": "invite", "description": "Invite an outside address to the workspace.",
     "inputSchema": _schema({"email": ADDRESS}, ["email"])},
    {"name": "conversation_post", "description": "Post in one of your conversations.",
     "inputSchema": _schema({"conversation_id": ID, "body": TEXT}, ["conversation_id", "body"])},
    {"name": "conversation_add_participant", "description": "Add a colleague to one of your conversations.",
     "inputSchema": _schema({"conversation_id": ID, "user": NAME}, ["conversation_id", "user"])},
]


@dataclass(frozen=True)
class Route:
    method: str
    pattern: re.Pattern[str]
    door: str  # "agent", "person" or "operator": whose credential opens it
    handler: Callable[..., Any]
    html: bool = False

    @property
    def template(self) -> str:
        return self.pattern.pattern


class ProductServer:
    def __init__(self, *, db_path: Path, authority: TokenAuthority, current: Current, host: str = "127.0.0.1") -> None:
        self.authority, self.current = authority, current
        self.people = TokenAuthority("person")
        self.operators = TokenAuthority("operator")
        self.store = ProductStore(db_path)
        self._routes: list[Route] = []
        self._register()
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
        self.store.close()

    # -- credentials ---------------------------------------------------------------------------------

    def person_token(self, org: str, user: str) -> str:
        return self.people.issue("", org, user, 0, "", ttl=24 * 3600)

    def operator_token(self, name: str) -> str:
        return self.operators.issue("", "", name, 0, "", ttl=24 * 3600)

    def _caller(self, door: str, authorization: str | None) -> Caller:
        token = authorization[len("Bearer "):] if authorization and authorization.startswith("Bearer ") else ""
        if not token:
            raise ProductError(401, "no_credential", "Authorization: Bearer <token> is required")
        kind = token.split(".", 1)[0]
        if door == "person" and kind == "ppoperator":
            raise ProductError(403, "operator_cannot_impersonate", "an operator token opens operator routes only")
        if door == "operator" and kind != "ppoperator":
            raise ProductError(403, "operators_only", "this route is for operators")
        try:
            if door == "agent":
                claims = self.authority.verify(token)
                self.current.check(claims)
                return Caller("agent", claims.org, claims.user)
            if door == "person":
                claims = self.people.verify(token)
                return Caller("person", claims.org, claims.user)
            claims = self.operators.verify(token)
            return Caller("operator", "", claims.user)
        except AuthorityError as exc:
            raise ProductError(403, exc.reason, str(exc)) from None

    # -- the route table -----------------------------------------------------------------------------

    def routes(self) -> list[Route]:
        return list(self._routes)

    def add_route(self, method: str, template: str, door: str, handler: Callable[..., Any], html: bool = False
                  ) -> Callable[[], None]:
        """Add a route behind ``door`` (as a deployment adds one); returns what removes it again."""
        route = Route(method, re.compile(template), door, handler, html)
        self._routes.append(route)

        def remove() -> None:
            # A new list, not an edit in place: a request being routed keeps the table it started with.
            self._routes = [r for r in self._routes if r is not route]
        return remove

    def _register(self) -> None:
        s = self.store
        add = self.add_route
        add("POST", r"/mcp", "agent", self._mcp)
        add("GET", r"/api/effects/(op_[0-9a-f]{16})", "agent",
            lambda who, key: {"operation": key, "happened": s.effect(who, key) is not None})
        add("POST", r"/api/issues", "person",
            lambda who, body: {"id": s.person_write(who, "issue", "team", _text(body, "body"), _text(body, "title"))})
        add("POST", r"/api/conversations", "person", lambda who, body: {"id": s.conversation(who, _text(body, "title"))})
        add("GET", r"/api/records", "person", lambda who, query: {"records": s.list(who, query.get("kind"))})
        add("GET", r"/api/records/(\d+)", "person", lambda who, rid: s.get(who, int(rid)))
        add("GET", r"/api/records/(\d+)/children", "person", lambda who, rid: {"records": s.list(who, parent=int(rid))})
        add("GET", r"/api/conversations/(\d+)/messages", "person", lambda who, cid: {"messages": s.messages(who, int(cid))})
        add("GET", r"/api/approvals", "person", lambda who, query: {"cards": s.cards(who)})
        add("POST", r"/api/approvals/(\d+)/approve", "person",
            lambda who, cid, body: s.decide(who, int(cid), True, body.get("sha256")))
        add("POST", r"/api/approvals/(\d+)/reject", "person", lambda who, cid, body: s.decide(who, int(cid), False))
        add("GET", r"/api/audit", "person", lambda who, query: {"reads": s.audit(who)})
        add("GET", r"/api/render/(\d+)", "person", lambda who, rid: render(s.get(who, int(rid))["body"]), html=True)
        add("GET", r"/api/operator/records/(\d+)", "operator",
            lambda who, rid: s.operator_read(who, int(rid), "GET /api/operator/records/{id}"))
        add("GET", r"/api/operator/conversations/(\d+)/messages", "operator", self._operator_messages)

    def _operator_messages(self, who: Caller, cid: str) -> dict[str, Any]:
        conversation = self.store.operator_read(who, int(cid), "GET /api/operator/conversations/{id}/messages")
        owner = Caller("person", conversation["org"], conversation["owner"])
        ids = self.store.message_ids(owner, int(cid))  # ids only: each message is read below, audited
        return {"messages": [self.store.operator_read(who, i, "GET /api/operator/conversations/{id}/messages")
                             for i in ids]}

    # -- the MCP tool server -----------------------------------------------------------------------------

    def _mcp(self, who: Caller, request: dict[str, Any]) -> dict[str, Any] | None:
        key = request.pop(IDEMPOTENCY, None)
        if key and request.get("method") == "tools/call":
            # One operation, one effect: the same key again gets the first answer, nothing is done twice.
            earlier = self.store.effect(who, key)
            if earlier is not None:
                return {**earlier, "id": request.get("id")}
            answer = self._mcp_call(who, request)
            if answer is not None and "result" in answer:
                self.store.record_effect(who, key, answer)
            return answer
        return self._mcp_call(who, request)

    def _mcp_call(self, who: Caller, request: dict[str, Any]) -> dict[str, Any] | None:
        rid, method, params = request.get("id"), request.get("method"), request.get("params") or {}
        if method == "initialize":
            result: Any = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                           "serverInfo": {"name": "pairproof-product", "version": "0.2"}}
        elif method == "ping":
            result = {}
        elif method == "tools/list":
            result = {"tools": TOOLS}
        elif method == "tools/call":
            name, arguments = params.get("name", ""), params.get("arguments") or {}
            # Debug logging is off by default: at DEBUG this line writes the payload, which is why LG-1
            # has a broken control that turns it on.
            log.debug("tool call %s by %s/%s: %s", name, who.org, who.user, json.dumps(arguments))
            try:
                value = self.call_tool(who, name, arguments)
            except ProductError as exc:
                log.info("tool %s refused for %s/%s: %s", name, who.org, who.user, exc.reason)
                return {"jsonrpc": "2.0", "id": rid,
                        "error": {"code": -32000, "message": str(exc), "data": {"reason": exc.reason}}}
            result = {"content": [{"type": "text", "text": json.dumps(value)}], "structuredContent": value,
                      "isError": False}
        elif rid is None:
            return None  # a notification: nothing to answer
        else:
            return {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "method not found"}}
        return {"jsonrpc": "2.0", "id": rid, "result": result}

    def call_tool(self, who: Caller, name: str, a: dict[str, Any]) -> dict[str, Any]:
        s = self.store
        if name == "notes_create":
            return {"id": s.agent_write(who, "note", {"body": a.get("body", "")}, "private")["posted"]}
        if name == "notes_get":
            row = s.get(who, a.get("id"))
            if row["kind"] != "note":
                raise ProductError(404, "not_found_or_not_visible", "no such note for this caller")
            return {"id": row["id"], "body": row["body"]}
        if name == "notes_list":
            return {"notes": [{"id": r["id"], "body": r["body"]} for r in s.list(who, "note")]}
        if name == "notes_purge":
            return {"deleted": s.purge_notes(who)}
        if name == "issues_list":
            return {"issues": [{"id": r["id"], "title": r["title"]} for r in s.list(who, "issue")]}
        if name == "issue_get":
            issue = s.get(who, a.get("id"))
            comments = [{"id": c["id"], "author": c["owner"], "body": c["body"]} for c in s.list(who, "comment", issue["id"])]
            # What the issue says is data for the agent to read, not an instruction with any authority.
            return {"id": issue["id"], "title": issue["title"], "author": issue["owner"], "body": issue["body"],
                    "comments": comments}
        if name == "issue_comment":
            issue = s.get(who, a.get("issue_id"))
            if issue["kind"] != "issue":
                raise ProductError(404, "not_found_or_not_visible", "no such issue for this caller")
            return s.agent_write(who, "comment", {"parent": issue["id"], "body": a.get("body", "")}, issue["audience"])
        if name == "task_create":
            assignee = a.get("assignee") or who.user
            audience = "private" if assignee == who.user else f"user:{assignee}"
            return s.agent_write(who, "task", {"title": a.get("title", ""), "body": a.get("title", "")}, audience)
        if name == "crm_note":
            return s.agent_write(who, "crm_note", {"title": a.get("account", ""), "body": a.get("body", "")}, "team")
        if name == "message_send":
            return s.agent_write(who, "message", {"body": a.get("body", "")}, f"external:{a.get('to', '')}")
        if name == "invite":
            return s.agent_write(who, "invitation", {"body": a.get("email", "")}, f"external:{a.get('email', '')}")
        if name == "conversation_post":
            conversation = s.conversation_owner(who, a.get("conversation_id"))
            audience = "private" if s.participants(conversation["id"]) == [who.user] else f"conversation:{conversation['id']}"
            return s.agent_write(who, "conversation_message", {"parent": conversation["id"], "body": a.get("body", "")},
                                 audience)
        if name == "conversation_add_participant":
            conversation = s.conversation_owner(who, a.get("conversation_id"))
            return s.agent_write(who, "add_participant", {"conversation_id": conversation["id"], "user": a.get("user")},
                                 f"user:{a.get('user')}")
        raise ProductError(404, "unknown_tool", f"no tool named {name!r}")

    # -- HTTP ------------------------------------------------------------------------------------------

    def _handler(self):
        product = self

        class Handler(JsonHandler):
            component = "product server"

            def _dispatch(self, method: str) -> None:
                if any(h.lower() in ("x-act-as", "x-impersonate", "x-on-behalf-of") for h in self.headers):
                    self._error(ProductError(403, "impersonation_refused", "nobody acts as someone else here"))
                    return
                split = urlsplit(self.path)
                matches = [(r, m) for r in product._routes if (m := r.pattern.fullmatch(split.path))]
                route = next(((r, m) for r, m in matches if r.method == method), None)
                if route is None:
                    reason = ("method_not_allowed", 405) if matches else ("route_not_found", 404)
                    self._error(ProductError(reason[1], reason[0], f"no {method} route {split.path}"))
                    return
                r, m = route
                try:
                    who = product._caller(r.door, self.headers.get("Authorization"))
                    if method == "POST":
                        raw = self.read_body()
                        try:
                            body = json.loads(raw) if raw else None
                        except ValueError:
                            body = None
                        if not isinstance(body, dict):
                            raise ProductError(400, "bad_request", "the body must be one JSON object under 1 MiB")
                        body.pop(IDEMPOTENCY, None)  # only the header may carry it
                        if r.template == "/mcp" and self.headers.get("Idempotency-Key"):
                            body[IDEMPOTENCY] = self.headers["Idempotency-Key"][:64]
                        args: tuple[Any, ...] = (*m.groups(), body)
                    else:
                        args = m.groups() or ({k: v[-1] for k, v in parse_qs(split.query).items()},)
                    with product.store.serving(who):
                        value = r.handler(who, *args)
                except ProductError as exc:
                    log.info("%s %s refused: %s", method, r.template, exc.reason)
                    self._error(exc)
                    return
                if value is None:
                    self.send_response(202)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif r.html:
                    body = value.encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html; charset=utf-8")
                    self.send_header("Content-Security-Policy", "default-src 'self'; img-src 'self'")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                else:
                    self.send_json(200, value)

            def _error(self, exc: ProductError) -> None:
                self.send_json(exc.status, {"error": {"type": "pairproof_refused", "reason": exc.reason,
                                                      "message": str(exc)}})

            def do_GET(self) -> None:
                self._dispatch("GET")

            def do_POST(self) -> None:
                self._dispatch("POST")

            def _other(self) -> None:
                self._dispatch(self.command)

            do_PUT = do_DELETE = do_PATCH = _other

        return Handler


def _text(body: dict[str, Any], key: str) -> str:
    value = body.get(key, "")
    if not isinstance(value, str) or len(value) > 10000:
        raise ProductError(400, "bad_field", f"{key} must be a string of at most 10000 characters")
    return value
