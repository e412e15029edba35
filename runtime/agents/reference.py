"""The minimal reference agent: the process that lives inside one instance's sandbox.

It keeps the private state the seed names, on the private volume: a conversation transcript
(``/data/transcript.jsonl``), a memory file (``/data/memory.md``), task state (``/data/tasks.json``) and
saved files (``/data/files/``). A turn is real: the user's message goes to the model with the tools the
broker offers (``tools/list``), streamed as real agents stream it (``stream: true``: the reply and the tool
calls are assembled from the server-sent deltas), tool calls go to the broker's MCP endpoint, and the loop
ends with the model's reply; the first turn also asks for a title and every turn ends with a memory review, both
background model calls metered like any other. The agent holds no credential: its model adapter sends a
placeholder ``x-api-key`` that the broker replaces.

One interface: a run-control HTTP API on 127.0.0.1:8642 inside the sandbox (start a run, read it, its
events, stop it; and the tool surface it would offer) which only the platform reaches, through the
instance's broker: the platform delivers every turn as a run. It answers only a request with the
instance's run-control key (``Authorization: Bearer <key>``; the key is in ``/run/agent/runctl.key``,
readable by the agent's uid alone, fresh each wake; without it, 401). The agent also serves routes a real
gateway has (jobs, sessions, platform events) so that the broker's route set is tested against something
real.

Its tool surface comes from the operator's managed configuration (``/etc/pairproof/managed.json``,
read-only) through two loaders: tools the agent implements itself (``toolsets.builtin``) and the tools of
each MCP server reached through the broker (``mcp.servers``; the product's unprefixed, another server's as
``server__name``). Two bridges would widen it (``tool_search`` offers every built-in tool on request,
``connections`` lists linked accounts); the managed file keeps them off. The user's own settings
(``/data/config.json``, written by a ``settings:`` message) are applied only at the exact paths the managed
file lists in ``user_settable``: everything else in them is ignored and reported, never merged.

Standard library only: it runs under the sandbox's system Python and is copied into the instance image.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
import threading
import time

# http.client and http.server are imported where used: start to ready is the agent's Python start-up,
# and those two (with what they pull in) would add about half to it. The run-control port listens (and
# the platform counts the agent ready) before http.server is imported; connections wait in its backlog.

DATA = os.environ.get("PAIRPROOF_DATA", "/data")
BROKER = os.environ.get("PAIRPROOF_BROKER", "")
MANAGED = os.environ.get("PAIRPROOF_MANAGED", "/etc/pairproof/managed.json")
# Seconds between model-catalog refreshes (a DNS lookup and a connection to the catalog host); 0, the
# default, is off: the seed's idle experiment found this the one source of background egress.
CATALOG_REFRESH = float(os.environ.get("PAIRPROOF_CATALOG_REFRESH", "0") or 0)
CATALOG_HOST = "models.catalog.example"
RUNCTL_PORT = 8642
RUNCTL_KEY_FILE = os.environ.get("PAIRPROOF_RUNCTL_KEY_FILE", "/run/agent/runctl.key")
SAFE_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
MAX_TOOL_ROUNDS = 5
MAX_SETTING = 200
_state_lock = threading.Lock()
# The id of the request (a turn, a run) this thread works for: sent with every call to the broker, so the
# platform's decisions and the provider's record of a model call name the turn they served.
_request = threading.local()
REQUEST_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")


def _bind_request(value: object) -> None:
    _request.id = value if isinstance(value, str) and REQUEST_ID.match(value) else ""


# -- private state on the volume ---------------------------------------------------------------------

def _append_line(path: str, record: dict) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _write_atomic(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _read(path: str, default: str = "") -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return default


def _tasks() -> list:
    return json.loads(_read(os.path.join(DATA, "tasks.json"), "[]"))


def _remember(message: str) -> None:
    """The agent's own memory rules: what it keeps, it keeps on the volume."""
    if message.startswith("remember:"):
        with open(os.path.join(DATA, "memory.md"), "a", encoding="utf-8") as f:
            f.write("- " + message[len("remember:"):].strip() + "\n")
    elif message.startswith("task:"):
        tasks = _tasks()
        tasks.append({"id": len(tasks) + 1, "title": message[len("task:"):].strip(), "state": "open"})
        _write_atomic(os.path.join(DATA, "tasks.json"), json.dumps(tasks))
    elif message.startswith("settings:"):
        # The user's own file, kept as given: what of it applies is decided when it is read (resolve()).
        _write_atomic(os.path.join(DATA, "config.json"), message[len("settings:"):].strip())
    elif message.startswith("save "):
        name, _, content = message[len("save "):].partition(":")
        if SAFE_NAME.match(name.strip()):
            os.makedirs(os.path.join(DATA, "files"), mode=0o700, exist_ok=True)
            _write_atomic(os.path.join(DATA, "files", name.strip()), content.strip())


# -- configuration: the managed file, the user's settings, the effective tool surface -------------------

class ManagedConfigInvalid(Exception):
    pass


def _strict_json(text: str) -> object:
    def no_duplicates(pairs):
        keys = [k for k, _ in pairs]
        if len(keys) != len(set(keys)):
            raise ValueError("duplicate key")
        return dict(pairs)
    return json.loads(text, object_pairs_hook=no_duplicates)


def load_managed(path: str = MANAGED) -> dict:
    """The managed file, or ManagedConfigInvalid: the agent runs on nothing it cannot fully read."""
    try:
        config = _strict_json(_read(path, ""))
    except ValueError as exc:
        raise ManagedConfigInvalid(f"{path}: not strict JSON ({exc})") from None
    expected = {"schema": str, "model": dict, "toolsets": dict, "mcp": dict, "tool_search": dict,
                "connections": dict, "defaults": dict, "user_settable": list}
    if not isinstance(config, dict) or set(config) != set(expected):
        raise ManagedConfigInvalid(f"{path}: expected exactly the keys {sorted(expected)}")
    for key, kind in expected.items():
        if not isinstance(config[key], kind):
            raise ManagedConfigInvalid(f"{path}: {key} must be a {kind.__name__}")
    if config["schema"] != "pairproof.managed/1":
        raise ManagedConfigInvalid(f"{path}: schema {config['schema']!r} is not pairproof.managed/1")
    unknown = [t for t in config["toolsets"].get("builtin", []) if t not in BUILTIN]
    if unknown:
        raise ManagedConfigInvalid(f"{path}: unknown built-in tools {unknown}")
    return config


def _flatten(value: object, prefix: str = "") -> list[tuple[str, object]]:
    if isinstance(value, dict) and value:
        return [leaf for k, v in value.items() for leaf in _flatten(v, f"{prefix}{k}.")]
    return [(prefix[:-1], value)]


def resolve(managed: dict, user: object) -> tuple[dict, list[str]]:
    """The effective settings: the managed defaults, with each user leaf applied only if its exact path is
    in ``user_settable`` and its value has the default's type; the refused paths, for the record."""
    settings = json.loads(json.dumps(managed["defaults"]))
    refused: list[str] = []
    if not isinstance(user, dict):
        return settings, ([] if user is None else ["(not an object)"])
    for path, value in _flatten(user):
        parts = path.split(".")
        node = settings
        for part in parts[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        allowed = path in managed["user_settable"] and isinstance(node, dict) and parts[-1] in node
        if allowed and type(value) is type(node[parts[-1]]) and len(str(value)) <= MAX_SETTING:
            node[parts[-1]] = value
        else:
            refused.append(path)
    return settings, refused


def user_config() -> object:
    try:
        return _strict_json(_read(os.path.join(DATA, "config.json"), "null"))
    except ValueError:
        return "(unreadable)"


def effective() -> dict:
    """Managed plus what the user may set: the configuration one turn runs under."""
    settings, refused = resolve(MANAGED_CONFIG, user_config())
    return {**MANAGED_CONFIG, "settings": settings, "refused_settings": refused}


# Tools the agent implements itself, each with its JSON schema; the managed file says which are offered.
BUILTIN = {
    "memory_note": {"description": "Keep a note in the user's private memory.",
                    "parameters": {"type": "object", "properties": {"text": {"type": "string", "maxLength": 2000}},
                                   "required": ["text"], "additionalProperties": False}},
    "task_add": {"description": "Add a task to the user's private task list.",
                 "parameters": {"type": "object", "properties": {"title": {"type": "string", "maxLength": 500}},
                                "required": ["title"], "additionalProperties": False}},
    "shell": {"description": "Run a command in the agent's sandbox.",
              "parameters": {"type": "object", "properties": {"argv": {"type": "array", "items": {"type": "string"}}},
                             "required": ["argv"], "additionalProperties": False}},
}
BRIDGES = {
    "tool_search": {"description": "Find more tools by name; every built-in tool becomes callable.",
                    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}},
    "connections_list": {"description": "List the user's linked accounts.",
                         "parameters": {"type": "object", "properties": {}}},
}
MANAGED_CONFIG: dict = {}


def surface(config: dict) -> dict[str, dict]:
    """Every tool offered to the model under ``config``: name -> {route, description, parameters}.

    The route is how the tool became available: ``builtin``, ``bridge:<name>`` or ``mcp:<server>``."""
    tools: dict[str, dict] = {}
    for name in config["toolsets"].get("builtin", []):
        tools[name] = {"route": "builtin", **BUILTIN[name]}
    if config["tool_search"].get("enabled") is True:
        tools["tool_search"] = {"route": "bridge:tool_search", **BRIDGES["tool_search"]}
    if config["connections"].get("enabled") is True:
        tools["connections_list"] = {"route": "bridge:connections", **BRIDGES["connections_list"]}
    for server, how in config["mcp"].get("servers", {}).items():
        if not isinstance(how, dict) or how.get("via") != "broker":
            continue  # the broker is the only way out of the sandbox; anything else is not a server here
        for t in list_server_tools(server):
            name = t["name"] if server == "product" else f"{server}__{t['name']}"
            tools[name] = {"route": f"mcp:{server}", "upstream": t["name"], "description": t.get("description", ""),
                           "parameters": t.get("inputSchema", {})}
    return tools


def _load_tool_servers(deadline: float) -> None:
    """List every tool server once the broker answers (it may still be starting: the controller starts it
    beside the sandbox); a server still unreachable at the deadline is listed on the first turn."""
    for server in MANAGED_CONFIG["mcp"]["servers"]:
        while True:
            try:
                _list(server, timeout=max(0.1, deadline - time.monotonic()))
            except OSError:  # the broker is not listening yet
                if time.monotonic() < deadline:
                    time.sleep(0.01)
                    continue
            except ModelUnavailable:
                pass  # the broker answered: the server behind it is down; the first turn tries again
            break


def _call_builtin(name: str, arguments: dict) -> dict:
    if name == "memory_note":
        with _state_lock, open(os.path.join(DATA, "memory.md"), "a", encoding="utf-8") as f:
            f.write("- " + str(arguments.get("text", "")) + "\n")
        return {"ok": True}
    if name == "task_add":
        with _state_lock:
            tasks = _tasks()
            tasks.append({"id": len(tasks) + 1, "title": str(arguments.get("title", "")), "state": "open"})
            _write_atomic(os.path.join(DATA, "tasks.json"), json.dumps(tasks))
        return {"ok": True, "id": len(tasks)}
    if name == "shell":
        import subprocess

        done = subprocess.run([str(a) for a in arguments.get("argv", [])], capture_output=True, timeout=10)
        return {"rc": done.returncode, "stdout": done.stdout.decode(errors="replace")[:4000]}
    if name == "tool_search":
        return {"tools": sorted(BUILTIN)}
    if name == "connections_list":
        return {"connections": []}
    return {"error": {"reason": f"no built-in tool {name}"}}


def call_tool(tools: dict[str, dict], name: str, arguments: dict) -> dict:
    """Run one tool call the model asked for, if (and only if) the surface offers it."""
    tool = tools.get(name)
    if tool is None and name in BUILTIN and "tool_search" in tools:
        tool = {"route": "bridge:tool_search"}  # what a search bridge does: any built-in tool, on request
    if tool is None:
        return {"error": {"reason": f"tool {name} is not offered"}}
    if tool["route"].startswith("mcp:"):
        try:
            return _mcp("tools/call", {"name": tool["upstream"], "arguments": arguments})
        except ModelUnavailable as exc:
            # Reported to the model as the tool's result; whether the effect happened is for the
            # platform's journal to settle, not for the conversation.
            return {"error": {"reason": str(exc)}}
    return _call_builtin(name, arguments)


# -- the broker: model and tools -----------------------------------------------------------------------

class ModelUnavailable(Exception):
    pass


def _token() -> str:
    return os.urandom(6).hex()


def _broker_open(path: str, payload: dict, headers: dict | None, timeout: float):
    """POST ``payload`` to the broker: (connection, response), the response's body not yet read."""
    import http.client  # half of urllib.request's import time, which start to ready pays (tools load at start)
    from urllib.parse import urlsplit

    where = urlsplit(BROKER)
    conn = http.client.HTTPConnection(where.hostname, where.port or 80, timeout=timeout)
    sent = {"Content-Type": "application/json", **(headers or {})}
    if getattr(_request, "id", ""):
        sent["X-Request-Id"] = _request.id
    try:
        conn.request("POST", path, json.dumps(payload).encode(), sent)
        return conn, conn.getresponse()
    except BaseException:
        conn.close()
        raise


def _refused(status: int, body: bytes) -> ModelUnavailable:
    try:
        detail = json.loads(body or b"{}")
    except ValueError:
        detail = {}
    error = detail.get("error") if isinstance(detail, dict) and isinstance(detail.get("error"), dict) else {}
    return ModelUnavailable(str(error.get("reason") or error.get("type") or status))


def _broker_post(path: str, payload: dict, headers: dict | None = None, timeout: float = 120) -> dict:
    import http.client

    try:
        conn, response = _broker_open(path, payload, headers, timeout)
        try:
            body = response.read()
        finally:
            conn.close()
    except http.client.HTTPException as exc:
        raise ModelUnavailable(f"broker_http_error: {type(exc).__name__}") from None
    if response.status >= 400:
        raise _refused(response.status, body)
    return json.loads(body) if body else {}


def _broker_stream(path: str, payload: dict, headers: dict | None = None, timeout: float = 120) -> dict:
    """A streamed chat completion through the broker: the assistant message assembled from its deltas (text
    and tool calls, whose arguments arrive in fragments). A stream that carries an error event, or ends
    before ``data: [DONE]``, is ModelUnavailable: half an answer is not an answer."""
    import http.client

    text: list[str] = []
    calls: dict[int, dict] = {}
    done = False
    try:
        conn, response = _broker_open(path, payload, headers, timeout)
        try:
            if response.status >= 400 or not (response.getheader("Content-Type") or "").startswith("text/event-stream"):
                body = response.read()
                if response.status >= 400:
                    raise _refused(response.status, body)
                answer = json.loads(body) if body else {}  # a platform that answered whole: taken as it is
                return answer["choices"][0]["message"]
            while not done:
                line = response.readline()
                if not line:
                    break
                if not line.startswith(b"data:"):
                    continue  # event names, comments, the blank line between events
                data = line[len(b"data:"):].strip()
                if data == b"[DONE]":
                    done = True
                    continue
                chunk = json.loads(data)
                if isinstance(chunk.get("error"), dict):
                    raise _refused(502, data)  # authority ended mid-stream, or the provider failed
                for choice in chunk.get("choices") or []:
                    delta = choice.get("delta") or {}
                    if delta.get("content"):
                        text.append(delta["content"])
                    for call in delta.get("tool_calls") or []:
                        slot = calls.setdefault(call.get("index", 0), {"id": "", "type": "function",
                                                                       "function": {"name": "", "arguments": ""}})
                        slot["id"] = call.get("id") or slot["id"]
                        function = call.get("function") or {}
                        slot["function"]["name"] = function.get("name") or slot["function"]["name"]
                        slot["function"]["arguments"] += function.get("arguments") or ""
        finally:
            conn.close()
    except (http.client.HTTPException, ValueError) as exc:
        raise ModelUnavailable(f"broker_http_error: {type(exc).__name__}") from None
    if not done:
        raise ModelUnavailable("stream_incomplete")
    message: dict = {"role": "assistant", "content": "".join(text) or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message


def _mcp(method: str, params: dict | None = None, timeout: float = 120) -> dict:
    request = {"jsonrpc": "2.0", "id": int.from_bytes(os.urandom(4), "big") >> 2, "method": method}
    if params is not None:
        request["params"] = params
    return _broker_post("/mcp", request, timeout=timeout)


_listed: dict[str, list] = {}


def _list(server: str, timeout: float) -> None:
    """Ask the broker for the server's tools and keep them; raises what the call raises."""
    answer = _mcp("tools/list", timeout=timeout)
    if "result" in answer:
        _listed[server] = answer["result"].get("tools", [])


def list_server_tools(server: str, timeout: float = 120) -> list:
    """The server's tools (through the broker), listed anew; while it cannot be reached, the last list
    it gave (loaded at start), so a link fault does not change what the model is offered."""
    try:
        _list(server, timeout)
    except (ModelUnavailable, OSError):
        pass
    return _listed.get(server, [])


def _model(messages: list, purpose: str, tools: list | None = None, config: dict | None = None) -> dict:
    config = config or MANAGED_CONFIG
    body = {"model": config["model"]["main" if purpose == "turn" else "aux"], "messages": messages,
            "metadata": {"purpose": purpose}}
    if tools:
        body["tools"] = tools
    # The adapter's own header style; the broker swaps it for the real capability.
    if purpose == "turn":  # the conversation streams, as real agents' does; background calls answer whole
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        return _broker_stream("/v1/chat/completions", body, {"x-api-key": "sandbox-holds-no-key"})
    answer = _broker_post("/v1/chat/completions", body, {"x-api-key": "sandbox-holds-no-key"})
    return answer["choices"][0]["message"]


def _openai_tools(tools: dict[str, dict]) -> list:
    return [{"type": "function", "function": {"name": name, "description": t["description"],
                                              "parameters": t["parameters"]}} for name, t in tools.items()]


def turn(message: str) -> str:
    with _state_lock:
        transcript = os.path.join(DATA, "transcript.jsonl")
        first = not os.path.exists(transcript)
        _append_line(transcript, {"role": "user", "content": message, "at": time.time()})
        _remember(message)
    if not BROKER:
        reply = "Noted."
    else:
        try:
            reply = _converse(message)
            if first:
                _model([{"role": "user", "content": f"Title for: {message[:200]}"}], "title")
            _model([{"role": "user", "content": "Review memory after this turn."}], "memory_review")
        except ModelUnavailable as exc:
            reply = f"model unavailable: {exc}"
    with _state_lock:
        _append_line(os.path.join(DATA, "transcript.jsonl"), {"role": "assistant", "content": reply, "at": time.time()})
    return reply


def _converse(message: str) -> str:
    config = effective()
    tools = surface(config)
    display = config["settings"]["display"]
    messages = [{"role": "system", "content": f"You are the user's personal agent. Personality: "
                 f"{display['personality']}. Language: {display['language']}."},
                {"role": "user", "content": message}]
    for _ in range(MAX_TOOL_ROUNDS):
        answer = _model(messages, "turn", _openai_tools(tools), config)
        calls = answer.get("tool_calls") or []
        if not calls:
            return answer.get("content") or ""
        messages.append(answer)
        for call in calls:
            fn = call["function"]
            try:
                arguments = json.loads(fn.get("arguments") or "{}")
            except ValueError:
                arguments = {}
            result = call_tool(tools, fn["name"], arguments if isinstance(arguments, dict) else {})
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)})
    return "I stopped after too many tool calls."


# -- runs: the run-control API -------------------------------------------------------------------------

RUNS: dict[str, dict] = {}


def start_run(message: str, request_id: str = "") -> str:
    run_id = "run_" + _token()
    RUNS[run_id] = {"id": run_id, "status": "running", "events": [{"type": "run.started"}]}

    def work() -> None:
        _bind_request(request_id)
        reply = turn(message)
        RUNS[run_id]["events"].append({"type": "message", "content": reply})
        if RUNS[run_id]["status"] == "running":
            RUNS[run_id]["status"] = "completed"
    threading.Thread(target=work, daemon=True).start()
    return run_id


def _runctl_key() -> bytes:
    """The instance's run-control key; b"" (every request refused) when the platform gave none."""
    try:
        with open(RUNCTL_KEY_FILE, "rb") as f:
            return f.read().strip()
    except OSError:
        return b""


def surface_view() -> dict:
    """The tools this agent would offer the model now (name -> route), and the settings it runs under."""
    config = effective()
    return {"tools": {name: t["route"] for name, t in surface(config).items()},
            "settings": config["settings"], "refused_settings": config["refused_settings"]}


def _run_control_server(listening: socket.socket, key: bytes) -> None:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    expected = b"Bearer " + key
    keyed = expected != b"Bearer "

    class RunControl(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format, *args):  # noqa: A002
            pass

        def parse_request(self) -> bool:
            """Every route needs the key: compared in constant time, never echoed; a wrong one closes."""
            if not super().parse_request():
                return False
            import hmac  # here, not at start: hashlib's import would compete with readiness

            presented = (self.headers.get("Authorization") or "").encode("latin-1", "replace")
            if keyed and hmac.compare_digest(presented, expected):
                return True
            self.close_connection = True
            body = json.dumps({"error": {"code": "unauthorized", "message": "the run-control key is required"}}).encode()
            self.send_response(401)
            self.send_header("WWW-Authenticate", "Bearer")
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)
            return False

        def _send(self, status: int, payload: dict) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _run(self, run_id: str) -> dict | None:
            run = RUNS.get(run_id)
            if run is None:
                self._send(404, {"error": {"code": "run_not_found", "message": f"no run {run_id}"}})
            return run

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0") or 0)) or b"{}")
            parts = self.path.strip("/").split("/")
            if parts == ["v1", "runs"]:
                self._send(202, {"run_id": start_run(str(body.get("input", "")), self.headers.get("X-Request-Id", ""))})
            elif len(parts) == 4 and parts[:2] == ["v1", "runs"] and parts[3] == "stop":
                run = self._run(parts[2])
                if run:
                    run["status"] = "stopped"
                    self._send(200, {"run_id": parts[2], "status": "stopped"})
            elif parts == ["v1", "platform", "events"]:
                self._send(200, {"accepted": True})  # a gateway's own route: the broker must not expose it
            else:
                self._send(404, {"error": {"code": "not_found"}})

        def do_GET(self) -> None:
            parts = self.path.strip("/").split("/")
            if len(parts) == 3 and parts[:2] == ["v1", "runs"]:
                run = self._run(parts[2])
                if run:
                    self._send(200, {"run_id": run["id"], "status": run["status"]})
            elif len(parts) == 4 and parts[:2] == ["v1", "runs"] and parts[3] == "events":
                run = self._run(parts[2])
                if run:
                    self._send(200, {"events": run["events"]})
            elif parts == ["v1", "surface"]:
                self._send(200, surface_view())
            elif parts in (["v1", "jobs"], ["v1", "sessions"]):
                # Routes a real gateway serves (cron jobs, every session of the instance): not for the platform.
                self._send(200, {"items": list(RUNS) if parts[1] == "sessions" else []})
            else:
                self._send(404, {"error": {"code": "not_found"}})

    class Server(ThreadingHTTPServer):
        daemon_threads = True

    # The socket is bound and listening already. (HTTPServer's own server_bind, not called here, would do a
    # reverse DNS lookup of its address: egress for nothing, which NT-5 would rightly catch.)
    server = Server(("127.0.0.1", RUNCTL_PORT), RunControl, bind_and_activate=False)
    server.socket.close()
    server.socket = listening
    server.server_name, server.server_port = "127.0.0.1", RUNCTL_PORT
    server.serve_forever()


def _refresh_catalog() -> None:
    while True:
        try:
            for *_, address in socket.getaddrinfo(CATALOG_HOST, 443, type=socket.SOCK_STREAM):
                socket.create_connection(address[:2], timeout=2).close()
        except OSError:
            pass
        time.sleep(CATALOG_REFRESH)


def serve() -> int:
    global MANAGED_CONFIG
    try:
        MANAGED_CONFIG = load_managed()
    except ManagedConfigInvalid as exc:
        print(f"pairproof agent: refusing to start: managed config {exc}", file=sys.stderr)
        return 78  # EX_CONFIG
    os.makedirs(DATA, exist_ok=True)
    if BROKER:  # tool servers are loaded at start, as a gateway loads its MCP servers; turns refresh them
        _load_tool_servers(deadline=time.monotonic() + 5)
    if CATALOG_REFRESH > 0:
        threading.Thread(target=_refresh_catalog, daemon=True).start()
    # Everything the agent is started with is read before it counts as ready: the key the platform wrote for this
    # wake too (a start-up input is read while starting, where the platform's trace of a start sees it).
    key = _runctl_key()
    listening = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listening.bind(("127.0.0.1", RUNCTL_PORT))
    listening.listen(64)  # from here the platform counts the agent ready: what connects waits to be served
    _run_control_server(listening, key)
    return 0


if __name__ == "__main__":
    sys.exit(serve())
