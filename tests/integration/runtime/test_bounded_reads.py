"""An answer read whole is bounded in time and in size (issue 28 item 3): the peer may be hostile (an agent's
API, through the broker or straight into its namespace). A server that drips its answer a byte at a time just
inside the per-read timeout held ``httpjson.request`` as long as it liked, and one that sends without end
filled the platform's memory; now the whole exchange has a deadline and the answer a limit."""

from __future__ import annotations

import http.client
import socket
import threading
import time

import pytest

from runtime import httpjson


def _old_request(method, url, body=None, headers=None, *, timeout, sock=None):
    """``httpjson.request`` as it was: per-read timeout, the whole body read at once."""
    conn = httpjson.connect(url, timeout, sock=sock)
    try:
        response = httpjson.send(conn, method, url, body, headers or {})
        return response.status, response.read()
    finally:
        conn.close()


class Dripping:
    """A real HTTP server on loopback: headers at once, then ``size`` body bytes, ``every`` seconds apart (or all
    at once with ``every`` 0), in chunks of ``chunk``."""

    def __init__(self, size: int, every: float, chunk: int = 1):
        self.size, self.every, self.chunk = size, every, chunk
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(1)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/v1/runs/x"
        self.done = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        try:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % self.size)
            sent = 0
            while sent < self.size and not self.done.is_set():
                n = min(self.chunk, self.size - sent)
                conn.sendall(b"x" * n)
                sent += n
                if self.every:
                    self.done.wait(self.every)
        except OSError:
            pass  # the reader cut it off
        finally:
            conn.close()

    def close(self) -> None:
        self.done.set()
        self.listener.close()


@pytest.mark.parametrize("reader", ["before", "now"])
def test_an_answer_dripped_inside_the_read_timeout_is_cut_at_the_deadline(reader):
    server = Dripping(size=40, every=0.1)  # 4 s of answer, no gap longer than 0.1 s
    started = time.monotonic()
    try:
        if reader == "before":
            status, body = _old_request("GET", server.url, timeout=1.0)
            assert (status, len(body)) == (200, 40) and time.monotonic() - started > 3.0  # held 4 s on a 1 s timeout
        else:
            with pytest.raises(TimeoutError, match="no whole answer within 1.0s"):
                httpjson.request("GET", server.url, timeout=1.0)
            assert time.monotonic() - started < 3.0
    finally:
        server.close()


@pytest.mark.parametrize("reader", ["before", "now"])
def test_an_answer_past_the_limit_is_not_read_into_memory(reader):
    server = Dripping(size=8 << 20, every=0, chunk=1 << 16)
    try:
        if reader == "before":
            assert len(_old_request("GET", server.url, timeout=10)[1]) == 8 << 20
        else:
            with pytest.raises(httpjson.AnswerTooLarge, match="passed 1048576 bytes"):
                httpjson.request("GET", server.url, timeout=10, limit=1 << 20)
            assert issubclass(httpjson.AnswerTooLarge, http.client.HTTPException)
    finally:
        server.close()


def test_a_peer_holding_connections_open_gets_no_more_than_the_servers_bound():
    """An agent that opens connections to its broker and sends nothing once cost the host a thread each, without
    end. A server holds at most ``max_connections``: past it a new connection is closed at once (its first read
    ends), and once the held ones close, requests are answered again."""
    class Hello(httpjson.JsonHandler):
        def do_GET(self):  # noqa: N802 - the stdlib's name
            self.send_json(200, {"ok": True})

    server = httpjson.QuietServer(("127.0.0.1", 0), Hello)
    server.max_connections = 4
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    held = []
    try:
        assert httpjson.request("GET", url, timeout=5)[0] == 200
        for _ in range(4):
            held.append(socket.create_connection(server.server_address[:2], timeout=5))
        deadline = time.monotonic() + 10
        while True:  # the server takes the held connections in its own time: until the next one is turned away
            extra = socket.create_connection(server.server_address[:2], timeout=5)
            try:
                extra.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                if extra.recv(1) == b"":
                    break
            except ConnectionResetError:
                break
            finally:
                extra.close()
            assert time.monotonic() < deadline, "a fifth connection was still served with four held open"
        for sock in held:
            sock.close()
        held.clear()
        deadline = time.monotonic() + 10
        while True:
            try:
                assert httpjson.request("GET", url, timeout=5)[0] == 200
                break
            except OSError:
                assert time.monotonic() < deadline, "the server did not answer again once the held ones closed"
                time.sleep(0.05)
    finally:
        for sock in held:
            sock.close()
        server.shutdown()
        server.server_close()
