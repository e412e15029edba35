"""The broker: one per instance, the only way out of its sandbox, and the only way in to its agent.

Agent side (a listener on 127.0.0.1 inside the instance's network namespace, its only reachable address):
``POST /mcp`` goes through ``McpFilter`` (exact methods, exact pinned tool names, schema-checked
arguments, explicit answers for resources/prompts/batches/notifications) and then to the product's tool
server with the instance's grant; ``POST /v1/chat/completions`` and ``/v1/messages`` go to the model proxy
with the instance's short-lived model capability in place of whatever ``x-api-key`` the agent's adapter
sent; a model call the agent declares no purpose for is declared a turn when its last user message is exactly
the input of a run the platform started (``declared_turn``), as the proxy meters by purpose. Nothing else, and
never a URL the request names: absolute URIs and CONNECT are refused.

Platform side (a listener on the host): the agent's run-control API, for an exact route set only
(start a run, read it, read its events, stop it), forwarded into the sandbox with the instance's
run-control key (``Authorization: Bearer``), which the agent requires; whoever calls the platform side
never supplies or sees it.

While its instance is frozen the broker is *suspended*: both sides refuse every request at once
(``instance_frozen``, 503), nothing is forwarded or held for the thaw.

The grant and the capability stay in this process; every refusal answers with a reason code and is
logged with the reason and the route if it is one the broker serves (else the refused path's length and
digest: a path is the agent's text), never the payload.
"""

from __future__ import annotations

import errno
import hashlib
import http.client
import json
import logging
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping

from runtime import httpjson
from runtime.authority import requestid
from runtime.authority.journal import Journal
from runtime.authority.mcp_filter import McpFilter
from runtime.httpjson import JsonHandler, QuietServer, serve
from runtime.isolation.netns import socket_in
from runtime.wait import until

log = logging.getLogger("pairproof.broker")
AGENT_PORT = 8765  # where the agent finds its broker, inside its own network namespace
RUNCTL_PORT = 8642  # where the reference agent serves its run-control API, inside its namespace
RUNCTL_STARTUP = 5.0  # how long a just-woken agent may take to open it
MODEL_ROUTES = ("/v1/chat/completions", "/v1/messages")
RUN_ID = r"[A-Za-z0-9_-]{1,64}"
RUN_INPUTS_KEPT = 16  # the inputs of this many recent runs are recognised in the agent's model calls
# Tools whose call changes something at the product: journaled, sent with an idempotency key.
EFFECT_TOOLS = frozenset({"notes_create", "notes_purge", "issue_comment", "task_create", "crm_note", "message_send",
                          "invite", "conversation_post", "conversation_add_participant"})
RUNCTL_ROUTES = (
    ("POST", re.compile(r"/v1/runs")),
    ("GET", re.compile(rf"/v1/runs/{RUN_ID}")),
    ("GET", re.compile(rf"/v1/runs/{RUN_ID}/events")),
    ("POST", re.compile(rf"/v1/runs/{RUN_ID}/stop")),
)

# How many forwarded requests the broker remembers (``forwarded``): the newest, an agent flooding it cannot grow
# the platform's memory without bound.
FORWARDED_KEPT = 100_000

# A refused route is the agent's (or the caller's) text: a path, a query, an absolute URI, a CONNECT authority
# can carry whatever the instance holds. The log names a route the broker serves as it is, anything else by its
# length and a digest (enough to match two refusals of one request, nothing of its content).
_SERVED_PATHS = frozenset({"/mcp", "/whoami", *MODEL_ROUTES})
_METHOD = re.compile(r"[A-Z]{1,10}")


def loggable_route(route: str) -> str:
    """``route`` as the log may name it: a route the side that refused it serves (the agent side: its paths
    only, without a method; the platform side: "METHOD path" of the run-control routes), else its length and
    digest. A run-control path refused on the agent side is the agent's text like any other."""
    method, _, path = route.rpartition(" ")
    method = method if _METHOD.fullmatch(method) else ("(a method)" if method else "")
    served = any(m == method and rx.fullmatch(path) for m, rx in RUNCTL_ROUTES) if method else path in _SERVED_PATHS
    if not served:
        path = f"(an unserved path of {len(path)} bytes, sha256 {hashlib.sha256(path.encode()).hexdigest()[:12]})"
    return f"{method} {path}".strip()


LOOPBACK_DEADLINE = 5.0  # seconds for a new sandbox's loopback to come up before the broker binds in it

class Broker:
    def __init__(self, *, instance: str, sandbox_pid: int, grant: str, model_capability: str, product_url: str,
                 proxy_url: str, mcp_filter: McpFilter, journal: Journal | None = None,
                 generation: int = 0, runctl_key: str = "", agent_port: int = RUNCTL_PORT,
                 renew_model: Callable[[], str | None] | None = None, model_renew_after: float = 0.0) -> None:
        self.instance, self.sandbox_pid = instance, sandbox_pid
        # The model capability is short-lived: an instance that runs longer than it would lose the model. Past
        # ``model_renew_after`` seconds the next model call first asks ``renew_model`` (the controller: a fresh
        # one only while this instance's lease is current, not revoked, not frozen; else None, and the one held
        # runs out).
        self._renew_model, self._model_renew_after = renew_model, model_renew_after
        self._model_renew_at = time.monotonic() + model_renew_after
        self.agent_port = agent_port  # where the agent serves its own API (its turn API), in its namespace
        self._grant, self._model = grant, model_capability
        self._runctl_key = runctl_key  # this instance's only: never logged, never handed out
        self.product_url, self.proxy_url = product_url.rstrip("/"), proxy_url.rstrip("/")
        self.filter = mcp_filter  # the platform's, shared: built (and its pins checked) once, not per wake
        self.pinned_extra: dict[str, Mapping] = {}
        self.journal, self.generation = journal, generation
        # The latest refusals (route, reason), for the driver's ``broker_refusals``: bounded, as an agent decides
        # how many requests it makes to be refused.
        self.refusals: deque[tuple[str, str]] = deque(maxlen=FORWARDED_KEPT)
        # Everything forwarded for the agent, in order (``forwarded``): when, the route, and for /mcp the JSON-RPC
        # method and tool; what an idle instance sent out through its broker is judged from it (NT-5).
        self._forwarded: deque[dict[str, object]] = deque(maxlen=FORWARDED_KEPT)
        # The request id of the last run started through the platform side: a call the agent makes without an
        # id of its own (an agent that does not send ids on, such as hermes-agent) is logged and sent on under
        # it, so the platform's record still ties the call to the run that caused it.
        self.run_request_id = ""
        # The inputs of the last runs started through the platform side: a model call the agent does not declare a
        # purpose for, whose last user message is exactly one of them, is that run's turn, and is declared so
        # (``declared_turn``); anything else goes on undeclared, for the proxy to attribute by its shape.
        self._run_inputs: deque[str] = deque(maxlen=RUN_INPUTS_KEPT)
        self._run_request_ids: deque[str] = deque(maxlen=RUN_INPUTS_KEPT)
        self._lock = threading.Lock()
        self.suspended = False  # its instance is frozen: refuse everything, on both sides
        inner = socket_in(sandbox_pid)
        inner.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

        def bound() -> bool:
            # bwrap reports the sandbox's pid before its child has brought loopback up in the new namespace:
            # until then 127.0.0.1 is not an address there (EADDRNOTAVAIL), a wait, not a failure.
            try:
                inner.bind(("127.0.0.1", AGENT_PORT))
            except OSError as exc:
                if exc.errno != errno.EADDRNOTAVAIL:
                    raise
                return False
            return True

        try:
            until(bound, LOOPBACK_DEADLINE, f"loopback never came up in {instance}'s network namespace", every=0.005)
        except BaseException:
            inner.close()
            raise
        inner.listen(64)
        self._agent_side = QuietServer(("127.0.0.1", AGENT_PORT), self._agent_handler(), bind_and_activate=False)
        self._agent_side.socket.close()
        self._agent_side.socket = inner
        self._platform_side = QuietServer(("127.0.0.1", 0), self._platform_handler())

    @property
    def runctl_url(self) -> str:
        host, port = self._platform_side.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> Broker:
        serve(self._agent_side, f"broker-{self.instance}")
        serve(self._platform_side, f"broker-runctl-{self.instance}")
        return self

    def stop(self) -> None:
        for server in (self._agent_side, self._platform_side):
            server.shutdown()
            server.server_close()

    def hand_out_capabilities(self, reason: str) -> dict[str, str]:
        """What this broker holds, for a qualification harness that replays it as a thief would. Every call
        is logged with its reason (never the values): a platform must be able to tell when this happened."""
        if not reason.strip():
            raise ValueError("say why the broker's capabilities are being handed out")
        log.warning("broker %s handed out its capabilities: %s", self.instance, reason)
        with self._lock:
            return {"grant": self._grant, "model": self._model, **({"runctl": self._runctl_key} if self._runctl_key else {})}

    def rotate(self, *, grant: str | None = None, model_capability: str | None = None) -> None:
        with self._lock:
            self._grant = grant or self._grant
            self._model = model_capability or self._model
            if model_capability:
                self._model_renew_at = time.monotonic() + self._model_renew_after

    def _model_capability(self) -> str:
        """The model capability to send: renewed first when it is due (``renew_model``)."""
        with self._lock:
            if self._renew_model is not None and time.monotonic() >= self._model_renew_at:
                fresh = self._renew_model()
                if fresh:
                    self._model = fresh
                    log.info("broker %s: model capability renewed under its current lease", self.instance)
                self._model_renew_at = time.monotonic() + (self._model_renew_after if fresh else 30.0)
            return self._model

    def set_product_upstream(self, url: str) -> str:
        """Point this broker's link to the product (its configured upstream) at ``url``, as a deployment that
        moves the product behind another address does; returns the address it replaces."""
        with self._lock:
            before, self.product_url = self.product_url, url.rstrip("/")
        return before

    def _refused(self, route: str, reason: str) -> None:
        self.refusals.append((route, reason))
        log.warning("broker %s refused %s: %s", self.instance, loggable_route(route), reason)

    # -- upstream calls ------------------------------------------------------------------------------

    def _post(self, url: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        # The request's id goes on with it: the proxy and the product log their decision under it too.
        try:
            return httpjson.request("POST", url, body, {**headers, **requestid.headers()},
                                    timeout=httpjson.FORWARD_TIMEOUT)
        except (OSError, http.client.HTTPException) as exc:
            return 502, json.dumps({"error": {"reason": "upstream_unreachable", "message": str(exc)}}).encode()

    @property
    def forwarded(self) -> list[dict[str, object]]:
        """Every request forwarded for the agent so far, in order: ``at`` (epoch seconds), ``route``, and for
        /mcp its ``method``, ``tool`` (a tools/call's name, else empty), ``params_keys`` and ``params_bytes`` (the
        size of its params as JSON). The last ``FORWARDED_KEPT`` only: an agent cannot grow it without bound."""
        with self._lock:
            return [dict(r) for r in self._forwarded]

    def _forwarding(self, route: str, **what: object) -> None:
        with self._lock:
            self._forwarded.append({"at": time.time(), "route": route, **what})

    def forward_mcp(self, raw: bytes) -> tuple[int, dict | None]:
        decision = self.filter.decide(raw)
        if not decision.forward:
            self._refused("/mcp", decision.reason)
            return (200, decision.response) if decision.response is not None else (202, None)
        with self._lock:
            grant = self._grant
        request = decision.request or {}
        tool = (request.get("params") or {}).get("name", "")
        method = str(request.get("method", ""))
        params = request.get("params")
        self._forwarding("/mcp", method=method, tool=str(tool) if method == "tools/call" else "",
                         params_keys=sorted(params) if isinstance(params, dict) else [],
                         params_bytes=len(json.dumps(params)) if params is not None else 0)
        if self.journal is not None and request.get("method") == "tools/call" and tool in EFFECT_TOOLS:
            op = self.journal.begin(tool, request, self.generation)
            status, body = dispatch_effect(self.product_url, self.journal, op, request, grant)
        else:
            status, body = self._post(self.product_url + "/mcp", json.dumps(request).encode(),
                                      {"Content-Type": "application/json", "Authorization": f"Bearer {grant}"})
        if status == 202:
            return 202, None
        answer = _json_object(body)
        if "id" in request:
            # A request gets its JSON-RPC answer over HTTP 200, as MCP clients expect: an HTTP error leaves
            # some (hermes's among them) waiting out their own timeout. When the product gave none
            # (unreachable, the answer lost, the grant refused), the answer is an error naming the reason;
            # the journal has recorded what is known of the effect either way.
            if answer.get("jsonrpc") != "2.0" or answer.get("id") != request["id"]:
                return 200, _upstream_error(request["id"], status, answer)
            status = 200
        if decision.request and decision.request.get("method") == "tools/list" and "result" in answer:
            answer["result"] = self.filter.filter_tools_list(answer["result"])
        return status, answer

    def forward_model(self, path: str, raw: bytes, relay: JsonHandler | None = None) -> tuple[int, bytes | None]:
        """Forward a model call to the proxy with the instance's capability. A streamed answer (server-sent
        events) is passed through to ``relay``'s caller as it arrives, chunk by chunk, and (status, None) is
        returned; any other answer is returned whole."""
        self._forwarding(path)
        capability = self._model_capability()
        raw = declared_turn(raw, self._run_inputs)
        # The agent's adapter speaks x-api-key; the proxy wants the capability as a Bearer token. What the
        # agent sent is dropped, never forwarded: the sandbox holds no credential to forward.
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {capability}", **requestid.headers()}
        url = self.proxy_url.rstrip("/") + path
        conn = None
        try:
            conn = httpjson.connect(url, httpjson.FORWARD_TIMEOUT)
            response = httpjson.send(conn, "POST", url, raw, headers)
            if relay is None or not response.getheader("Content-Type", "").startswith("text/event-stream"):
                return response.status, response.read()
            relay.start_stream(response.status)
            try:
                while chunk := response.read1(65536):
                    relay.send_chunk(chunk)  # as it comes: nothing of a streamed answer is held back here
                relay.end_stream()
            except (OSError, http.client.HTTPException):
                relay.close_connection = True  # cut off on either side: the agent sees the stream end early
            return response.status, None
        except (OSError, http.client.HTTPException) as exc:
            return 502, json.dumps({"error": {"reason": "upstream_unreachable", "message": str(exc)}}).encode()
        finally:
            if conn is not None:
                conn.close()

    def forward_runctl(self, method: str, path: str, raw: bytes | None) -> tuple[int, bytes]:
        if method == "POST" and path == RUNCTL_ROUTES[0][1].pattern:
            if requestid.current():
                self.run_request_id = requestid.current()
                self._run_request_ids.append(self.run_request_id)
            run_input = _run_input(raw)
            if run_input:
                self._run_inputs.append(run_input)
        deadline = time.monotonic() + RUNCTL_STARTUP
        while True:
            sock = socket_in(self.sandbox_pid)
            sock.settimeout(httpjson.FORWARD_TIMEOUT)
            try:
                sock.connect(("127.0.0.1", self.agent_port))
                break
            except ConnectionRefusedError as exc:
                sock.close()
                # The agent serves its run-control API a moment after it is ready for the controller.
                if time.monotonic() > deadline:
                    return 502, json.dumps({"error": {"reason": "agent_unreachable", "message": str(exc)}}).encode()
                time.sleep(0.02)
        headers = {"Content-Type": "application/json", **requestid.headers()}
        if self._runctl_key:
            headers["Authorization"] = f"Bearer {self._runctl_key}"
        try:
            return httpjson.request(method, f"http://127.0.0.1:{self.agent_port}{path}", raw, headers,
                                    timeout=httpjson.FORWARD_TIMEOUT, sock=sock)
        except (OSError, http.client.HTTPException) as exc:
            return 502, json.dumps({"error": {"reason": "agent_unreachable", "message": str(exc)}}).encode()

    # -- the two listeners ---------------------------------------------------------------------------

    def _agent_handler(self):
        broker = self

        class AgentSide(JsonHandler):
            component = f"broker {broker.instance} (agent side)"

            def parse_request(self) -> bool:
                ok = super().parse_request()
                # The agent's X-Request-Id is its text, and the id is written on every log line of the request:
                # only an id the platform gave one of this instance's runs is kept, any other is replaced by the
                # current run's (an agent that names its turn's id keeps the chain; one that names a canary
                # puts nothing in the log).
                if requestid.current() not in broker._run_request_ids:
                    requestid.bind(broker.run_request_id)
                return ok

            def _route_refused(self, status: int, reason: str) -> bool:
                broker._refused(self.path[:200], reason)
                self.refuse(status, reason, f"the broker does not forward this ({reason})")
                return True

            def _frozen(self) -> bool:
                return broker.suspended and self._route_refused(503, "instance_frozen")

            def _checked(self) -> bool:
                if self._frozen():
                    return True
                if not self.path.startswith("/"):  # "GET http://elsewhere/ HTTP/1.1": a proxy request
                    return self._route_refused(400, "absolute_uri_refused")
                return False

            def do_GET(self) -> None:
                if self._checked():
                    return
                if self.path == "/whoami":
                    self.send_json(200, {"instance": broker.instance})
                    return
                self._route_refused(404, "route_not_allowed")

            def do_POST(self) -> None:
                if self._checked():
                    return
                if not requestid.current() and broker.run_request_id:
                    requestid.bind(broker.run_request_id)
                raw = self.read_body()
                if raw is None:
                    self._route_refused(413, "body_missing_or_too_large")
                    return
                if self.path == "/mcp":
                    status, answer = broker.forward_mcp(raw)
                    if answer is None:
                        self.send_response(status)
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                    else:
                        self.send_json(status, answer)
                elif self.path in MODEL_ROUTES:
                    status, body = broker.forward_model(self.path, raw, relay=self)
                    if body is None:
                        return  # a stream: passed through to the agent as it came
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                else:
                    self._route_refused(404, "route_not_allowed")

            def do_CONNECT(self) -> None:
                if not self._frozen():
                    self._route_refused(405, "connect_refused")

            def _other(self) -> None:
                if not self._frozen():
                    self._route_refused(405, "method_not_allowed")

            do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _other

        return AgentSide

    def _platform_handler(self):
        broker = self

        class PlatformSide(JsonHandler):
            component = f"broker {broker.instance} (platform side)"

            def _dispatch(self, method: str) -> None:
                if broker.suspended:
                    broker._refused(f"{method} {self.path[:200]}", "instance_frozen")
                    self.refuse(503, "instance_frozen", "the instance is frozen: wake it first")
                    return
                if not any(m == method and rx.fullmatch(self.path) for m, rx in RUNCTL_ROUTES):
                    broker._refused(f"{method} {self.path[:200]}", "route_not_allowed")
                    self.refuse(403, "route_not_allowed", "not in the run-control route set")
                    return
                raw = self.read_body() if method == "POST" else None
                status, body = broker.forward_runctl(method, self.path, raw)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._dispatch("GET")

            def do_POST(self) -> None:
                self._dispatch("POST")

            def _other(self) -> None:
                broker._refused(f"{self.command} {self.path[:200]}", "route_not_allowed")
                self.refuse(403, "route_not_allowed", "not in the run-control route set")

            do_PUT = do_DELETE = do_PATCH = do_CONNECT = do_OPTIONS = _other

        return PlatformSide


def _run_input(raw: bytes | None) -> str:
    """The user's message of a run start (its ``input``, a string), or ''."""
    try:
        body = json.loads(raw or b"")
    except ValueError:
        return ""
    value = body.get("input") if isinstance(body, dict) else None
    return value if isinstance(value, str) else ""


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks
        return "".join(b.get("text", "") for b in content if isinstance(b, dict) and isinstance(b.get("text"), str))
    return ""


def declared_turn(raw: bytes, run_inputs) -> bytes:
    """``raw`` with ``metadata.purpose = "turn"`` when the agent declared no purpose and the call's last user
    message is exactly the input of a run the platform started (the turn's own call, or a later round of it
    after tool results); otherwise ``raw`` untouched. What this cannot tell apart: a background call that
    ends with the user's very message (it is counted as the turn)."""
    try:
        body = json.loads(raw)
    except ValueError:
        return raw
    if not isinstance(body, dict) or not run_inputs:
        return raw
    metadata = body.get("metadata", {})
    if not isinstance(metadata, dict) or metadata.get("purpose"):
        return raw  # declared by the agent (or out of shape, for the proxy to refuse): not ours to say
    messages = body.get("messages") if isinstance(body.get("messages"), list) else []
    last_user = next((_text(m.get("content")) for m in reversed(messages)
                      if isinstance(m, dict) and m.get("role") == "user"), None)
    if last_user is None or last_user not in run_inputs:
        return raw
    body["metadata"] = {**metadata, "purpose": "turn"}
    return json.dumps(body).encode()


def _json_object(body: bytes) -> dict:
    try:
        answer = json.loads(body or b"{}")
    except ValueError:
        return {}
    return answer if isinstance(answer, dict) else {}


def _upstream_error(request_id: object, status: int, answer: dict) -> dict:
    """The JSON-RPC error the agent gets for a tool request the product did not answer in JSON-RPC."""
    error = answer.get("error") if isinstance(answer.get("error"), dict) else {}
    reason = str(error.get("reason") or error.get("code") or f"upstream_status_{status}")
    return {"jsonrpc": "2.0", "id": request_id,
            "error": {"code": -32000, "message": reason, "data": {"status": status, "reason": reason}}}


def dispatch_effect(product_url: str, journal: Journal, op: str, request: dict, grant: str) -> tuple[int, bytes]:
    """Send one effectful call with its idempotency key, journaling what is known at each step."""
    url = product_url.rstrip("/") + "/mcp"
    try:
        conn = httpjson.connect(url, httpjson.EFFECT_TIMEOUT)
    except OSError as exc:
        journal.mark(op, "not_dispatched", attempt=True)
        return 502, json.dumps({"error": {"reason": "not_dispatched", "message": str(exc)}}).encode()
    journal.mark(op, "dispatched", attempt=True)
    try:
        response = httpjson.send(conn, "POST", url, json.dumps(request).encode(),
                                 {"Content-Type": "application/json", "Authorization": f"Bearer {grant}",
                                  "Idempotency-Key": op, **requestid.headers()})
        body = response.read()
    except (OSError, http.client.HTTPException) as exc:
        # Sent, and no answer: it may or may not have happened. Only the product can say.
        journal.mark(op, "unknown")
        return 502, json.dumps({"error": {"reason": "outcome_unknown", "message": str(exc)}}).encode()
    finally:
        conn.close()
    journal.mark(op, "completed")
    return response.status, body
