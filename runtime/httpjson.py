"""Small shared pieces for the runtime's JSON-over-HTTP servers (proxy, product server, broker).

One threaded server class that keeps quiet (a platform log must not carry request payloads) and one
helper to answer JSON; each server's handler stays a readable list of routes. Every request that carries
a request id (``requestid.HEADER``) has it bound while it is handled, and its answer (status and refusal
reason, never the payload or the path) is logged with it: the platform's own record that it saw that very
request and what it decided.
"""

from __future__ import annotations

import json
import logging
import socketserver
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from runtime.authority import requestid

MAX_BODY = 1 << 20
log = logging.getLogger("pairproof.requests")


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

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
