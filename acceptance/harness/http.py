"""The harness's and the drivers' one HTTP client (JSON over HTTP) and one server-sent-event reader.

The harness reaches the runtime only through a driver, so it cannot share ``runtime/httpjson.py``'s client;
this is its twin. ``request`` makes one exchange and returns the whole ``Answer``, whatever its status (an
HTTP error status is an answer the case judges, never an exception); ``open_stream`` leaves the body to be
read as it comes. ``OSError`` and ``http.client.HTTPException`` reach the caller, which says what they mean
there (a driver: ``TargetError``). Each timeout is named by its purpose below; a call site that needs
another passes it.

Not here, on purpose: the scripts under ``acceptance/cases/inside/`` (and ``tests/support/tiny_agent.py``)
run inside a sandbox with the standard library only and carry their own few lines of HTTP.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from acceptance.errors import UnexpectedRedirect

DRIVER_TIMEOUT = 120.0  # a driver's call to the platform: a turn behind it may take a whole model answer
PRODUCT_TIMEOUT = 60.0  # a case's call to the product's own API (records, renders, conversations)
MAX_LINE = 1 << 20  # one line of a stream, read at most: an instance's bytes are bounded (DESIGN 5.11)


@dataclass(frozen=True)
class Answer:
    """One HTTP answer: its status, its whole body and its Content-Type."""

    status: int
    body: bytes
    content_type: str = ""

    def json(self) -> object:
        """The body as JSON; an empty body is ``{}``."""
        return json.loads(self.body) if self.body else {}


def _open(method: str, url: str, body: bytes | None, headers: Mapping[str, str] | None,
          timeout: float) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    where = urlsplit(url)
    conn = http.client.HTTPConnection(where.hostname, where.port or 80, timeout=timeout)
    try:
        # The request target is the URL's rest as given (path and query), not re-encoded.
        conn.request(method, url.split(where.netloc, 1)[1] or "/", body=body, headers=dict(headers or {}))
        response = conn.getresponse()
        if 300 <= response.status < 400:
            # Not followed, and not an answer a case may judge: a held call answered "303, see elsewhere" would
            # read as refused to ``status != 200``. The harness cannot judge it, so the test is broken.
            raise UnexpectedRedirect(f"{method} {url} answered {response.status} to "
                                     f"{response.getheader('Location')!r}; the harness follows no redirect")
        return conn, response
    except BaseException:
        conn.close()
        raise


def json_body(method: str, body: Mapping[str, object] | None, empty_post: bytes = b"") -> bytes | None:
    """A request body: ``body`` as JSON; without one, ``empty_post`` for a POST and nothing otherwise."""
    return json.dumps(body).encode() if body is not None else (empty_post if method == "POST" else None)


def request(method: str, url: str, body: bytes | None = None, headers: Mapping[str, str] | None = None, *,
            timeout: float) -> Answer:
    """One exchange: the whole answer, whatever its status; the connection is closed after."""
    conn, response = _open(method, url, body, headers, timeout)
    try:
        return Answer(response.status, response.read(), response.getheader("Content-Type") or "")
    finally:
        conn.close()


def open_stream(method: str, url: str, body: bytes | None = None, headers: Mapping[str, str] | None = None, *,
                timeout: float) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    """Send one request; the connection (the caller closes it) and the response, its body not yet read."""
    return _open(method, url, body, headers, timeout)


def lines_of(response: http.client.HTTPResponse) -> Iterator[str]:
    """The response's body line by line as it arrives (decoded, line ends stripped)."""
    while line := response.readline(MAX_LINE):
        yield line.decode(errors="replace").rstrip("\r\n")


def sse_events(lines: Iterable[str]) -> Iterator[list[tuple[str, str]]]:
    """Server-sent events from ``lines``: each event (ended by a blank line, or by the end) as its
    ``(field, value)`` lines in order, the value stripped; comments (``:``) are skipped. The caller decides
    what a field it does not expect means."""
    event: list[tuple[str, str]] = []
    for line in lines:
        if not line:
            if event:
                yield event
            event = []
        elif not line.startswith(":"):
            field, _, value = line.partition(":")
            event.append((field, value.strip()))
    if event:
        yield event


def sse_data(lines: Iterable[str]) -> Iterator[str]:
    """Each event's data (its ``data`` lines joined by newlines), events without data skipped."""
    for event in sse_events(lines):
        data = [value for field, value in event if field == "data"]
        if data:
            yield "\n".join(data)
