"""Request ids: the id a caller gives a request (``X-Request-Id``), carried with it through the platform
and written beside every decision the platform logs about it.

A platform is asked "did you really see my request, and what did you decide?" by the id it was given:
the servers (broker, proxy, product) bind the id of each request they handle, the controller binds the
id its caller gave an operation, and every log line written while an id is bound carries it (``Filter``).
Calls the platform makes on a request's behalf (broker to proxy or product, proxy to provider, agent to
broker) send the same id on, so the provider's own record of a model call names the turn it served.

Only well-formed ids are taken (``accept``): the id is written into the log, so it must not be a way to
put arbitrary text there.
"""

from __future__ import annotations

import contextvars
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager

HEADER = "X-Request-Id"
VALID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")
_CURRENT: contextvars.ContextVar[str] = contextvars.ContextVar("pairproof_request_id", default="")


def accept(value: object) -> str:
    """``value`` if it is a well-formed request id, else ``""`` (the request is handled without one)."""
    return value if isinstance(value, str) and VALID.fullmatch(value) else ""


def current() -> str:
    """The id bound to the request being handled in this thread, or ``""``."""
    return _CURRENT.get()


def bind(value: object) -> None:
    """Bind ``value`` (if well formed; otherwise nothing) for the rest of this thread's request: a server
    thread calls it once per request it reads, so a kept-alive connection's next request starts clean."""
    _CURRENT.set(accept(value))


@contextmanager
def bound(value: object) -> Iterator[str]:
    """Bind ``value`` while inside (the controller's operations, called by a driver)."""
    token = _CURRENT.set(accept(value))
    try:
        yield _CURRENT.get()
    finally:
        _CURRENT.reset(token)


def headers() -> dict[str, str]:
    """The header that sends the current id on with a call made for this request (empty without one)."""
    value = current()
    return {HEADER: value} if value else {}


class Filter(logging.Filter):
    """Puts the bound id on every record (``%(request_id)s``; ``-`` without one)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = current() or "-"
        return True
