"""What the reference driver's pieces share: HTTP calls, the contract's errors, argv edits, and the small
servers its broken arrangements put between the platform's parts."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from runtime import requestid
from runtime.errors import CapacityRefused, RuntimeFault

from ...errors import CapacityRefusedError, TargetError


def http_json(method: str, url: str, body: Mapping[str, object] | None, headers: dict[str, str] | None = None
          ) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
    request = urllib.request.Request(url, data, {"Content-Type": "application/json", **(headers or {})},
                                     method=method)
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else {}
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, json.loads(raw) if raw else {}


def before_command(argv: list[str], extra: Sequence[str]) -> list[str]:
    cut = argv.index("--")
    return argv[:cut] + list(extra) + argv[cut:]


def replace_args(argv: list[str], old: Sequence[str], new: Sequence[str]) -> list[str]:
    for i in range(len(argv) - len(old) + 1):
        if argv[i:i + len(old)] == list(old):
            return argv[:i] + list(new) + argv[i + len(old):]
    raise TargetError(f"cannot break the sandbox: {' '.join(old)!r} is not in the launcher's argv")


def request_header(request_id: str) -> dict[str, str]:
    return {requestid.HEADER: request_id} if request_id else {}


@contextmanager
def contract_errors() -> Iterator[None]:
    """The runtime's refusals and failures as the contract's errors (a capacity refusal keeps its reason)."""
    try:
        yield
    except CapacityRefused as exc:
        raise CapacityRefusedError(exc.reason) from exc
    except RuntimeFault as exc:
        raise TargetError(str(exc)) from exc


class ProductHttpClient:
    """The product server over HTTP with one bearer token."""

    def __init__(self, base: str, token: str) -> None:
        self.base, self.token = base, token

    def request(self, method: str, path: str, body: Mapping[str, object] | None = None,
                headers: Mapping[str, str] | None = None) -> tuple[int, object]:
        data = json.dumps(body).encode() if body is not None else (b"{}" if method == "POST" else None)
        request = urllib.request.Request(self.base + path, data, {"Content-Type": "application/json",
                                                                  "Authorization": f"Bearer {self.token}", **(headers or {})},
                                         method=method)
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                raw, status, kind = response.read(), response.status, response.headers.get("Content-Type", "")
        except urllib.error.HTTPError as exc:
            raw, status, kind = exc.read(), exc.code, exc.headers.get("Content-Type", "")
        if kind.startswith("text/html"):
            return status, raw.decode()
        return status, json.loads(raw) if raw else None


class NoSeal:
    """A snapshot sealer that seals nothing: the broken arrangement of SN-1's X control."""

    def seal(self, key: bytes, plain: bytes, aad: bytes) -> bytes:
        return plain

    def open(self, key: bytes, sealed: bytes, aad: bytes) -> bytes:
        return sealed


class LossyRelay:
    """Forwards each HTTP request to the product, reads the whole answer, and drops it (closes the
    connection instead): the request happened, its requester can never know."""

    def __init__(self, upstream: str) -> None:
        import socket as _socket
        import threading

        self.upstream = upstream.split("//", 1)[1].split(":")
        self._server = _socket.socket()
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(16)
        self.url = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @staticmethod
    def _read_http(conn) -> bytes:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return data
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        while len(body) < length:
            chunk = conn.recv(65536)
            if not chunk:
                break
            body += chunk
        return head + b"\r\n\r\n" + body

    def _serve(self) -> None:
        import socket as _socket

        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            with client:
                request = self._read_http(client)
                with _socket.create_connection((self.upstream[0], int(self.upstream[1])), timeout=30) as up:
                    up.sendall(request)
                    self._read_http(up)  # the product answered; the answer goes nowhere

    def close(self) -> None:
        self._server.close()
