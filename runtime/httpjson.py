"""Small shared pieces for the runtime's JSON-over-HTTP servers (proxy, product server, broker) and its
one HTTP client.

Servers: one threaded server class that keeps quiet (a platform log must not carry request payloads) and one
helper to answer JSON; each server's handler stays a readable list of routes. Every request that carries
a request id (``requestid.HEADER``) has it bound while it is handled, and its answer (status and refusal
reason, never the payload or the path) is logged with it: the platform's own record that it saw that very
request and what it decided.

Client: ``request`` (one exchange, its status and body), or ``connect`` then ``send`` when the caller must
tell "could not connect" from "sent, no answer" or read the answer as it comes; ``sse_events`` reads a
server-sent-event stream one event at a time and ``sse_data`` gives an event's data fields. An HTTP error
status is an answer, never an exception; ``OSError`` and ``http.client.HTTPException`` reach the caller,
which maps them to its own answer (a 502 with a reason) or error. The reference agent is the exception: it
is a stdlib-only script inside the sandbox and keeps its own client. Each timeout is a named purpose below.
"""

from __future__ import annotations

import http.client
import json
import logging
import socket
import socketserver
import threading
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from runtime.authority import requestid
from runtime.errors import UnsafeTarget

MAX_BODY = 1 << 20
log = logging.getLogger("pairproof.requests")

# How long the runtime waits for an answer, per purpose.
PROVIDER_TIMEOUT = 60.0  # the model proxy's call to the provider
FORWARD_TIMEOUT = 120.0  # the broker forwarding an agent's call (model, tools, run control): a whole model turn
EFFECT_TIMEOUT = 30.0  # an effect's dispatch to the product, and asking the product whether it happened
# Connections one server holds at once (``QuietServer``): far above what a platform's own traffic to one
# instance's broker, the proxy or the product opens, low enough that no peer can take the host's threads.
MAX_CONNECTIONS = 128
AGENT_TIMEOUT = 120.0  # the platform's own call to an agent's API (a turn's start and status, readiness)


class QuietServer(ThreadingHTTPServer):
    """A threading server that logs no request line and holds at most ``max_connections`` connections at once:
    a peer that opens connections and sends nothing (an agent, at its broker) costs one thread each, and past
    the bound a new connection is closed at once rather than given another thread on the host."""

    daemon_threads = True
    allow_reuse_address = True
    max_connections = MAX_CONNECTIONS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._open = 0
        self._open_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            full = self._open >= self.max_connections
            if not full:
                self._open += 1
        if full:
            log.warning("%s: %d connections open, a new one is closed", type(self).__name__, self.max_connections)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._closed()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._closed()

    def _closed(self) -> None:
        with self._open_lock:
            self._open -= 1

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls socket.getfqdn(): a reverse DNS lookup of its own address, i.e.
        # network egress at start-up for nothing. Bind without it.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), port


class JsonHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    component = "server"  # who answers, in the decision line (a server's handler names itself)
    _reason = ""

    def parse_request(self) -> bool:
        ok = super().parse_request()
        # Once per request, so the next request on a kept-alive connection starts without an id.
        requestid.bind(self.headers.get(requestid.HEADER) if ok else "")
        self._reason = ""
        return ok

    def send_response(self, code: int, message: str | None = None) -> None:
        super().send_response(code, message)
        if requestid.current():
            log.info("%s answered %s %d%s", self.component, self.command, code,
                     f" {self._reason}" if self._reason else "")

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        pass  # request lines can carry ids and paths of private records; servers log decisions instead

    def read_body(self) -> bytes | None:
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit() or int(length) > MAX_BODY:
            return None
        return self.rfile.read(int(length))

    def send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(payload).encode()
        error = payload.get("error") if isinstance(payload, dict) else None
        if isinstance(error, dict) and isinstance(error.get("reason"), str):
            self._reason = error["reason"][:64]
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def start_stream(self, status: int, content_type: str = "text/event-stream") -> None:
        """Answer headers for a body sent as it comes (HTTP/1.1 chunked): ``send_chunk`` each piece, then
        ``end_stream``. For relaying server-sent events without holding the whole answer."""
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def send_chunk(self, data: bytes) -> None:
        if data:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

    def end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def refuse(self, status: int, reason: str, message: str) -> None:
        self.send_json(status, {"error": {"type": "pairproof_refused", "reason": reason, "message": message}})


def serve(server: QuietServer, name: str) -> threading.Thread:
    # shutdown() waits for the loop's next poll: at the default 0.5 s, stopping a broker (two servers) took
    # a second of every sleep, recreate, restore and destroy.
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, name=name, daemon=True)
    thread.start()
    return thread


# -- the client ----------------------------------------------------------------------------------------

def _checked(url: str):
    """``url`` split, if what a caller joined to its base cannot have changed the host: no userinfo, an http
    scheme, a host, and a target that starts with ``/`` (or is empty)."""
    where = urlsplit(url)
    rest = url.split(where.netloc, 1)[1] if where.netloc else url
    if where.scheme != "http" or not where.hostname or "@" in where.netloc or (rest and not rest.startswith("/")):
        raise UnsafeTarget(f"refused to send to {url!r}: its host is not the one its base names")
    return where


def connect(url: str, timeout: float, *, sock: socket.socket | None = None) -> http.client.HTTPConnection:
    """A connection to ``url``'s host, connected now (OSError if it cannot be), or over ``sock``, a socket
    the caller has already connected (one made inside a sandbox's network namespace, say). A URL whose host a
    joined path could have changed is ``UnsafeTarget`` (an OSError), before anything is sent."""
    where = _checked(url)
    conn = http.client.HTTPConnection(where.hostname, where.port or 80, timeout=timeout)
    if sock is not None:
        conn.sock = sock
    else:
        try:
            conn.connect()
        except BaseException:
            conn.close()
            raise
    return conn


def send(conn: http.client.HTTPConnection, method: str, url: str, body: bytes | None,
         headers: Mapping[str, str]) -> http.client.HTTPResponse:
    """Send one request on ``conn``; the response, its body not yet read."""
    # The request target is the URL's rest as given (path, query), not re-encoded: what the caller forwards
    # (an agent's run-control path, say) goes on byte for byte.
    target = url.split(_checked(url).netloc, 1)[1] or "/"
    conn.request(method, target, body=body, headers=dict(headers))
    return conn.getresponse()


# The most one answer read whole (``request``) may hold: an agent's, a product's or a provider's answer is read
# into memory, and the side that sends it may be hostile.
MAX_ANSWER = 64 << 20


class AnswerTooLarge(http.client.HTTPException):
    """An answer longer than the reader's limit: read no further."""


def request(method: str, url: str, body: bytes | None = None, headers: Mapping[str, str] | None = None, *,
            timeout: float, sock: socket.socket | None = None, limit: int = MAX_ANSWER) -> tuple[int, bytes]:
    """One request: (status, the whole body), whatever the status; the connection is closed after.

    ``timeout`` bounds the whole exchange, not each read: a peer that answers one byte at a time just inside
    a per-read timeout (an agent holding a turn open) is cut off at it (``TimeoutError``, an OSError); an
    answer past ``limit`` bytes raises ``AnswerTooLarge`` once the limit is passed, the rest unread."""
    conn = connect(url, timeout, sock=sock)
    cut = threading.Event()

    def cut_off() -> None:
        cut.set()
        try:
            if conn.sock is not None:
                conn.sock.shutdown(socket.SHUT_RDWR)  # the blocked read returns; nothing more is read
        except OSError:
            pass

    watchdog = threading.Timer(timeout, cut_off)
    watchdog.daemon = True
    watchdog.start()
    try:
        try:
            response = send(conn, method, url, body, headers or {})
            chunks, size = [], 0
            while chunk := response.read(65536):
                size += len(chunk)
                if size > limit:
                    raise AnswerTooLarge(f"{method} {url}: the answer passed {limit} bytes; the rest was not read")
                chunks.append(chunk)
        except (OSError, http.client.HTTPException):
            if cut.is_set():
                raise TimeoutError(f"{method} {url}: no whole answer within {timeout}s") from None
            raise
        if cut.is_set():
            raise TimeoutError(f"{method} {url}: no whole answer within {timeout}s")
        return response.status, b"".join(chunks)
    finally:
        watchdog.cancel()
        conn.close()


def sse_events(response: http.client.HTTPResponse) -> Iterator[bytes]:
    """Each server-sent event of ``response`` as it arrives: its lines and the blank line that ends it (the
    last may lack it, if the stream ended without one). Lines are read up to 1 MB each."""
    lines: list[bytes] = []
    while True:
        line = response.readline(1 << 20)
        if not line:
            if lines:
                yield b"".join(lines)
            return
        lines.append(line)
        if line in (b"\n", b"\r\n"):
            yield b"".join(lines)
            lines = []


def sse_data(event: bytes) -> Iterator[bytes]:
    """The data fields of one event, each stripped (event names, ids and comments skipped)."""
    for line in event.splitlines():
        if line.startswith(b"data:"):
            yield line[len(b"data:"):].strip()
