"""What the reference driver's pieces share: HTTP calls, the contract's errors, argv edits, and the small
servers its broken arrangements put between the platform's parts."""

from __future__ import annotations

import functools
import inspect
import json
import sqlite3
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager

from acceptance.errors import CapacityRefusedError, HarnessError, TargetError
from acceptance.harness import http
from runtime.authority import requestid
from runtime.errors import CapacityRefused, RuntimeFault
from runtime.isolation.sandbox import add_mounts  # noqa: F401  (an argv edit, for the drivers built on this one)
from runtime.snapshots import SnapshotError


def http_json(method: str, url: str, body: Mapping[str, object] | None, headers: dict[str, str] | None = None
          ) -> tuple[int, dict]:
    answer = http.request(method, url, http.json_body(method, body), {"Content-Type": "application/json", **(headers or {})},
                          timeout=http.DRIVER_TIMEOUT)
    return answer.status, answer.json()


def sse_data(method: str, url: str, body: Mapping[str, object], headers: dict[str, str] | None = None
             ) -> tuple[int, Iterator[str]]:
    """A request answered with server-sent events: the status, and each event's data as it arrives (an
    answer that is not a stream: its body, as the one item)."""
    conn, response = http.open_stream(method, url, json.dumps(body).encode(),
                                      {"Content-Type": "application/json", **(headers or {})},
                                      timeout=http.DRIVER_TIMEOUT)

    def events() -> Iterator[str]:
        try:
            if "text/event-stream" not in (response.getheader("Content-Type") or ""):
                yield response.read().decode(errors="replace")
                return
            yield from http.sse_data(http.lines_of(response))
        finally:
            conn.close()

    return response.status, events()


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


# What a runtime call may fail with, besides the runtime's own errors (all RuntimeFault, refusals of a
# credential, a product request or a snapshot included): the host (files, processes, sockets, HTTP), the
# registry and ledgers (sqlite), a service's answer that is not JSON.
_FAILURES = (OSError, sqlite3.Error, subprocess.SubprocessError, json.JSONDecodeError)


@contextmanager
def contract_errors() -> Iterator[None]:
    """The runtime's refusals and failures as the contract's errors: a capacity refusal keeps its reason, a
    snapshot refusal its reason word, the rest their message. The harness's own errors pass unchanged."""
    try:
        yield
    except HarnessError:
        raise
    except CapacityRefused as exc:
        raise CapacityRefusedError(exc.reason) from exc
    except SnapshotError as exc:
        raise TargetError(f"{exc.reason}: {exc}") from exc
    except RuntimeFault as exc:
        raise TargetError(str(exc)) from exc
    except _FAILURES as exc:
        raise TargetError(f"{type(exc).__name__}: {exc}") from exc


class _ContractContext(AbstractContextManager):
    """A context manager whose entry and exit report runtime failures as the contract's errors (what the
    block itself raises is the block's, and passes through untouched)."""

    def __init__(self, inner: AbstractContextManager) -> None:
        self.inner = inner

    def __enter__(self):
        with contract_errors():
            return self.inner.__enter__()

    def __exit__(self, *exc_info):
        with contract_errors():
            return self.inner.__exit__(*exc_info)


def _reports_contract_errors(method: Callable) -> Callable:
    @functools.wraps(method)
    def mapped(*args, **kwargs):
        with contract_errors():
            result = method(*args, **kwargs)
        return _ContractContext(result) if isinstance(result, AbstractContextManager) else result
    mapped.reports_contract_errors = True
    return mapped


def reports_contract_errors(cls: type) -> type:
    """Class decorator: every public method of ``cls`` (inherited ones included) reports a runtime failure
    as the contract's error (``contract_errors``), and so does a context manager it returns, on entry and
    exit. One mechanism for the whole driver, so no method can forget it."""
    for name in dir(cls):
        if name.startswith("_"):
            continue
        value = inspect.getattr_static(cls, name)
        if inspect.isfunction(value) and not getattr(value, "reports_contract_errors", False):
            setattr(cls, name, _reports_contract_errors(value))
    return cls


@reports_contract_errors
class ProductHttpClient:
    """The product server over HTTP with one bearer token."""

    def __init__(self, base: str, token: str) -> None:
        self.base, self.token = base, token

    def request(self, method: str, path: str, body: Mapping[str, object] | None = None,
                headers: Mapping[str, str] | None = None) -> tuple[int, object]:
        answer = http.request(method, self.base + path, http.json_body(method, body, empty_post=b"{}"),
                              {"Content-Type": "application/json", "Authorization": f"Bearer {self.token}",
                               **(headers or {})}, timeout=http.PRODUCT_TIMEOUT)
        if answer.content_type.startswith("text/html"):
            return answer.status, answer.body.decode()
        return answer.status, json.loads(answer.body) if answer.body else None


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
