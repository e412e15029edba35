"""The upstream LLM provider, faked: the only fake in pairproof, and a real HTTP service on a real socket.

It speaks enough of the OpenAI chat-completions (``POST /v1/chat/completions``) and Anthropic messages
(``POST /v1/messages``) APIs for a platform to run its turns against it. What it answers is scripted per
end user, as a queue of replies and tool calls; what it was asked is recorded (which end user, for what
purpose, which tools were offered, the system prompt, how many tokens, the request id it came with); and
everything it returns, ids and token counts included, is a function of the scripts and the requests
alone, so a case sees the same bytes on every run. A request with ``stream: true`` is answered with
server-sent events as each API streams (see ``_openai_events`` and ``_anthropic_events``; the OpenAI-style
stream ends with a usage chunk only when ``stream_options.include_usage`` asks for it, as OpenAI's does),
recorded just as completely as a whole answer (with ``stream: true`` in its record). The harness drives it in-process or over
HTTP through ``/_control/...``. Its boundary: it checks the provider key and the request shape, and nothing else; it
is no model, keeps no conversation state beyond the scripts, and never logs a payload.
"""

from __future__ import annotations

import copy
import hmac
import json
import re
import threading
import time
from collections import deque
from dataclasses import dataclass
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from acceptance.errors import ScriptError

OPENAI_PATH = "/v1/chat/completions"
ANTHROPIC_PATH = "/v1/messages"
CONTROL_SCRIPT = "/_control/script"
CONTROL_RECORDS = "/_control/records"
CONTROL_RESET = "/_control/reset"
DEFAULT_REPLY = "ok"
MAX_BODY_BYTES = 16 << 20
STEP_FORMS = "a step is {'reply': text} or {'tool': name, 'arguments': {...}}"


_PIECES = re.compile(r"[A-Za-z]+|[0-9]|[^\sA-Za-z0-9]")


def _tokens(text: str) -> int:
    """Deterministic stand-in for a tokenizer, never zero: a word a token plus one for each 6 letters past
    the first 6, a digit a token, any other visible character a token, whitespace free. Deliberately unlike
    the platform's own estimate (four characters a token): a meter that estimates where the provider
    reported usage disagrees with the provider's bill on any ordinary text."""
    return max(1, sum(1 + (len(p) - 1) // 6 if p[0].isalpha() else 1 for p in _PIECES.findall(text)))


def prompt_tokens(messages: list[Any]) -> int:
    return _tokens(json.dumps(messages, sort_keys=True))


def completion_tokens(step: dict[str, Any]) -> int:
    """A reply counts its text; a tool call counts the JSON of its name and arguments."""
    if "reply" in step:
        return _tokens(step["reply"])
    return _tokens(json.dumps({"name": step["tool"], "arguments": step["arguments"]}, sort_keys=True))


def parse_steps(steps: object) -> list[dict[str, Any]]:
    """Checked, normalized copies of ``steps``; raises ScriptError naming the first bad field."""
    if not isinstance(steps, list):
        raise ScriptError(f"steps must be a list: {STEP_FORMS}")
    parsed = []
    for i, step in enumerate(steps):
        where = f"steps[{i}]"
        if not isinstance(step, dict):
            raise ScriptError(f"{where} must be an object: {STEP_FORMS}")
        if "reply" in step:
            if set(step) - {"reply", "delay"}:
                raise ScriptError(f"{where} mixes 'reply' with {sorted(set(step) - {'reply', 'delay'})}: {STEP_FORMS}")
            if not isinstance(step["reply"], str):
                raise ScriptError(f"{where}.reply must be a string")
            delay = step.get("delay", 0)
            if not isinstance(delay, (int, float)) or isinstance(delay, bool) or not 0 <= delay <= 30:
                raise ScriptError(f"{where}.delay must be a number of seconds from 0 to 30 (a turn held in flight)")
            parsed.append({"reply": step["reply"], **({"delay": float(delay)} if delay else {})})
        elif "tool" in step:
            if set(step) - {"tool", "arguments"}:
                raise ScriptError(f"{where} has unknown fields {sorted(set(step) - {'tool', 'arguments'})}: {STEP_FORMS}")
            if not isinstance(step["tool"], str) or not step["tool"]:
                raise ScriptError(f"{where}.tool must be a non-empty string (the tool's name)")
            arguments = step.get("arguments", {})
            if not isinstance(arguments, dict):
                raise ScriptError(f"{where}.arguments must be an object")
            try:
                # A round trip both proves the arguments can go on the wire and detaches them from the caller.
                arguments = json.loads(json.dumps(arguments))
            except (TypeError, ValueError) as e:
                raise ScriptError(f"{where}.arguments must be JSON-serializable: {e}") from None
            parsed.append({"tool": step["tool"], "arguments": arguments})
        else:
            raise ScriptError(f"{where} has neither 'reply' nor 'tool': {STEP_FORMS}")
    return parsed


@dataclass(frozen=True)
class _Response:
    status: int
    payload: dict[str, Any]
    allow: str = ""
    events: tuple[bytes, ...] = ()  # a streamed answer: server-sent events, in order
    delay: float = 0.0  # a scripted slow answer, slept after the first event (before the whole answer if not streamed)


class _Rejected(Exception):
    """A model request the provider refuses: answered with ``status`` and recorded, consuming no step."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message


def _error(style: str, kind: str, message: str) -> dict[str, Any]:
    if style == "anthropic":
        return {"type": "error", "error": {"type": kind, "message": message}}
    return {"error": {"type": kind, "message": message}}


@dataclass(frozen=True)
class _Call:
    """What a model request says about itself, read leniently so that refused requests are recorded too."""

    style: str
    path: str
    model: str
    user: str
    purpose: str
    tools: tuple[str, ...]
    messages: int
    system: str  # the system prompt as sent: where a platform puts the settings a user chose
    stream: bool = False
    # The whole request as it arrived (prompt, history, tools, metadata): what the provider was shown, for a
    # sweep that looks for another principal's data in a principal's requests (WD-1).
    body: Any = None

    @classmethod
    def read(cls, style: str, path: str, body: object) -> _Call:
        body = body if isinstance(body, dict) else {}
        metadata = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
        user = body.get("user") if style == "openai" else metadata.get("user_id")
        tools = body.get("tools") if isinstance(body.get("tools"), list) else []
        names = [_tool_name(style, t) for t in tools]
        messages = body.get("messages") if isinstance(body.get("messages"), list) else []
        if style == "openai":
            system = next((m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "system"), "")
        else:
            system = body.get("system")
        return cls(style=style, path=path, model=_str(body.get("model")), user=_str(user),
                   purpose=_str(metadata.get("purpose")), tools=tuple(n for n in names if n),
                   messages=len(messages), system=_str(system), stream=body.get("stream") is True,
                   body=copy.deepcopy(body))


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _tool_name(style: str, tool: object) -> str:
    if not isinstance(tool, dict):
        return ""
    if style == "openai":
        function = tool.get("function")
        return _str(function.get("name")) if isinstance(function, dict) else ""
    return _str(tool.get("name"))


def _validate(style: str, body: object) -> None:
    """Refuse a body the real provider would refuse, naming the field, so a platform bug is not masked."""
    def bad(message: str) -> _Rejected:
        return _Rejected(400, "invalid_request_error", message)

    if not isinstance(body, dict):
        raise bad("the request body must be a JSON object")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise bad("model: a non-empty string is required")
    messages = body.get("messages")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise bad("messages: a list of message objects is required")
    if not isinstance(body.get("stream", False), bool):
        raise bad("stream must be a boolean")
    options = body.get("stream_options")
    if options is not None:
        if style != "openai" or not body.get("stream"):
            raise bad("stream_options: only allowed when stream is true (chat completions)")
        if not isinstance(options, dict) or not isinstance(options.get("include_usage", False), bool):
            raise bad("stream_options must be an object whose include_usage is a boolean")
    tools = body.get("tools", [])
    if not isinstance(tools, list):
        raise bad("tools must be a list")
    for i, tool in enumerate(tools):
        if style == "openai" and (not isinstance(tool, dict) or tool.get("type") != "function"):
            raise bad(f"tools[{i}]: each tool must be {{'type': 'function', 'function': {{'name': ...}}}}")
        if not _tool_name(style, tool):
            field = "function.name" if style == "openai" else "name"
            raise bad(f"tools[{i}].{field}: a non-empty string is required")
    metadata = body.get("metadata", {})
    if not isinstance(metadata, dict):
        raise bad("metadata must be an object")
    if not isinstance(metadata.get("purpose", ""), str):
        raise bad("metadata.purpose must be a string")
    if style == "openai":
        if not isinstance(body.get("user", ""), str):
            raise bad("user must be a string")
        return
    if not isinstance(metadata.get("user_id", ""), str):
        raise bad("metadata.user_id must be a string")
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise bad("max_tokens: a positive integer is required")


def _openai_reply(seq: int, model: str, step: dict[str, Any], usage: dict[str, int]) -> dict[str, Any]:
    if "reply" in step:
        message: dict[str, Any] = {"role": "assistant", "content": step["reply"]}
        finish = "stop"
    else:
        call = {"id": f"call_{seq}", "type": "function",
                "function": {"name": step["tool"], "arguments": json.dumps(step["arguments"])}}
        message, finish = {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls"
    return {"id": f"chatcmpl-{seq}", "object": "chat.completion", "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": usage["input"], "completion_tokens": usage["output"],
                      "total_tokens": usage["input"] + usage["output"]}}


def _anthropic_reply(seq: int, model: str, step: dict[str, Any], usage: dict[str, int]) -> dict[str, Any]:
    if "reply" in step:
        content, stop = [{"type": "text", "text": step["reply"]}], "end_turn"
    else:
        content = [{"type": "tool_use", "id": f"toolu_{seq}", "name": step["tool"], "input": step["arguments"]}]
        stop = "tool_use"
    return {"id": f"msg_{seq}", "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": stop, "usage": {"input_tokens": usage["input"], "output_tokens": usage["output"]}}


PIECE = 8  # characters per streamed fragment: a reply of any length arrives in several deltas


def _pieces(text: str) -> list[str]:
    return [text[i:i + PIECE] for i in range(0, len(text), PIECE)] or [""]


def _sse(payload: dict[str, Any], event: str = "") -> bytes:
    return (f"event: {event}\n" if event else "").encode() + b"data: " + json.dumps(payload).encode() + b"\n\n"


def _openai_events(seq: int, model: str, step: dict[str, Any], usage: dict[str, int],
                   include_usage: bool) -> list[bytes]:
    """``chat.completion.chunk`` events as OpenAI streams them: the role, the text (or one tool call: its id
    and name, then its arguments in fragments), the finish reason; then, only when the request asked for it
    with ``stream_options.include_usage`` (as OpenAI does), a last chunk with ``usage`` and no choices; then
    ``data: [DONE]``. The first element is sent before a scripted delay, the rest after it."""
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return _sse({"id": f"chatcmpl-{seq}", "object": "chat.completion.chunk", "model": model,
                     "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    events = [chunk({"role": "assistant", "content": ""})]
    if "reply" in step:
        events += [chunk({"content": piece}) for piece in _pieces(step["reply"])]
        events.append(chunk({}, "stop"))
    else:
        events.append(chunk({"tool_calls": [{"index": 0, "id": f"call_{seq}", "type": "function",
                                             "function": {"name": step["tool"], "arguments": ""}}]}))
        events += [chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
                   for piece in _pieces(json.dumps(step["arguments"]))]
        events.append(chunk({}, "tool_calls"))
    if include_usage:
        events.append(_sse({"id": f"chatcmpl-{seq}", "object": "chat.completion.chunk", "model": model, "choices": [],
                            "usage": {"prompt_tokens": usage["input"], "completion_tokens": usage["output"],
                                      "total_tokens": usage["input"] + usage["output"]}}))
    return events + [b"data: [DONE]\n\n"]


def _anthropic_events(seq: int, model: str, step: dict[str, Any], usage: dict[str, int]) -> list[bytes]:
    """The messages API's stream: ``message_start`` (the input tokens), one content block (``text_delta``s,
    or a ``tool_use`` block with ``input_json_delta``s), ``message_delta`` (stop reason and the output
    tokens) and ``message_stop``. Usage is always in it, as Anthropic always sends it."""
    events = [_sse({"type": "message_start", "message": {
        "id": f"msg_{seq}", "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "usage": {"input_tokens": usage["input"], "output_tokens": 0}}}, "message_start")]
    if "reply" in step:
        block: dict[str, Any] = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": piece} for piece in _pieces(step["reply"])]
        stop = "end_turn"
    else:
        block = {"type": "tool_use", "id": f"toolu_{seq}", "name": step["tool"], "input": {}}
        deltas = [{"type": "input_json_delta", "partial_json": piece} for piece in _pieces(json.dumps(step["arguments"]))]
        stop = "tool_use"
    events.append(_sse({"type": "content_block_start", "index": 0, "content_block": block}, "content_block_start"))
    events += [_sse({"type": "content_block_delta", "index": 0, "delta": d}, "content_block_delta") for d in deltas]
    events.append(_sse({"type": "content_block_stop", "index": 0}, "content_block_stop"))
    events.append(_sse({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                        "usage": {"output_tokens": usage["output"]}}, "message_delta"))
    return events + [_sse({"type": "message_stop"}, "message_stop")]


class ProviderMock:
    """A scripted provider on a real socket. Use as a context manager, or ``start()`` and ``stop()``."""

    def __init__(self, key: str, *, host: str = "127.0.0.1", port: int = 0) -> None:
        if not isinstance(key, str) or not key:
            # An empty key would make the bare "Bearer " header a valid credential.
            raise ScriptError("key must be a non-empty string: the provider key the platform must present")
        self._key, self._host, self._port = key, host, port
        self._lock = threading.Lock()
        self._scripts: dict[str, deque[dict[str, Any]]] = {}
        self._records: list[dict[str, Any]] = []
        self._next_seq = 1
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> ProviderMock:
        if self._server is not None:
            raise ScriptError(f"the provider mock already serves {self.url}: stop() it before starting it again")
        self._server = _Server((self._host, self._port), self)
        # stop() waits up to one poll interval for the loop to notice; a short one keeps teardowns quick.
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.01},
                                        name=f"provider-mock:{self._server.server_address[1]}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        server, thread, self._server, self._thread = self._server, self._thread, None, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join()

    def __enter__(self) -> ProviderMock:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        if self._server is None:
            raise ScriptError("the provider mock has no address until start() binds it")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def script(self, user: str, steps: list[dict[str, Any]]) -> None:
        """Queue ``steps`` for end user ``user``; all are checked first, so a bad step queues none."""
        if not isinstance(user, str):
            raise ScriptError("user must be a string (the end-user id; '' for requests that carry none)")
        parsed = parse_steps(steps)
        with self._lock:
            self._scripts.setdefault(user, deque()).extend(parsed)

    def records(self) -> list[dict[str, Any]]:
        with self._lock:
            return copy.deepcopy(self._records)

    def reset(self) -> None:
        """Drop scripts and records; sequence numbers (and so ids) start again from 1."""
        with self._lock:
            self._scripts.clear()
            self._records.clear()
            self._next_seq = 1

    # -- requests ---------------------------------------------------------------------------------------

    def handle(self, method: str, path: str, headers: Message, raw: bytes | None) -> _Response:
        style = {OPENAI_PATH: "openai", ANTHROPIC_PATH: "anthropic"}.get(path)
        if style is not None:
            if method != "POST":
                return _Response(405, _error(style, "method_not_allowed", f"{path} accepts POST only"), "POST")
            return self._model(style, path, headers, raw)
        control = {CONTROL_SCRIPT: "POST", CONTROL_RESET: "POST", CONTROL_RECORDS: "GET"}.get(path)
        if control is None:
            return _Response(404, _error("openai", "not_found", f"no such endpoint: {path}"))
        if method != control:
            return _Response(405, _error("openai", "method_not_allowed", f"{path} accepts {control} only"), control)
        if path == CONTROL_RECORDS:
            return _Response(200, {"records": self.records()})
        if path == CONTROL_RESET:
            self.reset()
            return _Response(200, {"reset": True})
        return self._control_script(raw)

    def _control_script(self, raw: bytes | None) -> _Response:
        try:
            body = _json(raw)
            if not isinstance(body, dict):
                raise ScriptError("the body must be a JSON object {'user': str, 'steps': [...]}")
            unknown = set(body) - {"user", "steps"}
            if unknown:
                raise ScriptError(f"unknown fields {sorted(unknown)}: the body is {{'user': str, 'steps': [...]}}")
            if "user" not in body or "steps" not in body:
                raise ScriptError(f"{'user' if 'user' not in body else 'steps'} is required")
            self.script(body["user"], body["steps"])
        except ScriptError as e:
            return _Response(400, _error("openai", "invalid_request_error", str(e)))
        with self._lock:
            queued = len(self._scripts.get(body["user"], ()))
        return _Response(200, {"user": body["user"], "queued": queued})

    def _model(self, style: str, path: str, headers: Message, raw: bytes | None) -> _Response:
        try:
            body = _json(raw)
        except ScriptError:
            body = None
        call = _Call.read(style, path, body)
        try:
            self._authenticate(style, headers)
            if style == "anthropic" and not headers.get("anthropic-version"):
                raise _Rejected(400, "invalid_request_error", "anthropic-version: header is required")
            if body is None:
                raise _Rejected(400, "invalid_request_error", "the request body is not valid JSON")
            _validate(style, body)
        except _Rejected as e:
            self._record(call, e.status, None, headers.get("X-Request-Id") or "")
            return _Response(e.status, _error(style, e.kind, e.message))
        prompt = prompt_tokens(body["messages"])
        seq, step = self._record(call, 200, prompt, headers.get("X-Request-Id") or "")
        usage = {"input": prompt, "output": completion_tokens(step)}
        delay = step.get("delay", 0.0)  # a scripted slow answer: keeps a turn in flight for crash and revocation cases
        if call.stream:
            if style == "openai":
                include = bool((body.get("stream_options") or {}).get("include_usage"))
                events = _openai_events(seq, call.model, step, usage, include)
            else:
                events = _anthropic_events(seq, call.model, step, usage)
            return _Response(200, {}, events=tuple(events), delay=delay)
        if delay:
            time.sleep(delay)
        build = _openai_reply if style == "openai" else _anthropic_reply
        return _Response(200, build(seq, call.model, step, usage))

    def _authenticate(self, style: str, headers: Message) -> None:
        if style == "openai":
            presented, expected, kind = headers.get("Authorization", ""), f"Bearer {self._key}", "invalid_api_key"
        else:
            presented, expected, kind = headers.get("x-api-key", ""), self._key, "authentication_error"
        # Constant time, and the message never echoes what was presented: a refusal must not leak a key.
        if not hmac.compare_digest(presented.encode(), expected.encode()):
            raise _Rejected(401, kind, "the provider key is missing or wrong")

    def _record(self, call: _Call, status: int, prompt: int | None, request_id: str = "") -> tuple[int, dict[str, Any]]:
        """Number the request, take its step (if it succeeded) and record it, all under one lock.

        One lock hold keeps seq order, record order and each user's step order the same thing; the record
        is in place before the response is written, so a client that has its answer finds its record.
        """
        with self._lock:
            seq, self._next_seq = self._next_seq, self._next_seq + 1
            step: dict[str, Any] | None = None
            usage = None
            if prompt is not None:
                queue = self._scripts.get(call.user)
                step = queue.popleft() if queue else None
                usage = {"input": prompt, "output": completion_tokens(step or {"reply": DEFAULT_REPLY})}
            self._records.append({
                "seq": seq, "at": time.time(), "style": call.style, "path": call.path, "model": call.model, "user": call.user,
                "purpose": call.purpose, "tools": list(call.tools), "messages": call.messages, "system": call.system,
                "stream": call.stream, "status": status, "request_id": request_id[:64],
                "usage": usage, "step": copy.deepcopy(step), "body": call.body,
            })
        return seq, step or {"reply": DEFAULT_REPLY}


def _json(raw: bytes | None) -> Any:
    if raw is None:
        raise ScriptError(f"the body has an invalid Content-Length or exceeds {MAX_BODY_BYTES} bytes")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise ScriptError(f"the body is not valid JSON: {e}") from None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # A client holding a connection open must not hang the harness's teardown in stop().
    block_on_close = False
    # The default backlog of 5 drops a burst of concurrent connects, which clients retry only after a second.
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], mock: ProviderMock) -> None:
        self.mock = mock
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = 30  # a silent client's thread gives up instead of living as long as the process

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: request lines and errors would carry payload fragments into the platform's logs."""

    def _dispatch(self, method: str) -> None:
        response = self.server.mock.handle(method, urlsplit(self.path).path, self.headers, self._body())
        if response.events:
            self._stream(response)
            return
        data = json.dumps(response.payload).encode()
        self.send_response(response.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if response.allow:
            self.send_header("Allow", response.allow)
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, response: _Response) -> None:
        """Server-sent events, each written as it is made; the body ends when the connection closes (HTTP/1.0)."""
        self.send_response(response.status)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        first, *rest = response.events
        try:
            self.wfile.write(first)
            if response.delay:
                time.sleep(response.delay)
            for event in rest:
                self.wfile.write(event)
        except OSError:
            pass  # the client went away mid-stream: the call is recorded, the rest is not wanted

    def _body(self) -> bytes | None:
        """The request body; b"" when none was sent, None when its length is invalid or too large."""
        length = self.headers.get("Content-Length")
        if length is None:
            return b""
        try:
            size = int(length)
        except ValueError:
            return None
        if not 0 <= size <= MAX_BODY_BYTES:
            return None
        return self.rfile.read(size)
