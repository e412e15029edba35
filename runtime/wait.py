"""Waiting for a condition with a deadline, the runtime's way (the runtime cannot import the harness's
``acceptance/harness/wait.py``; this is its twin): poll, and when the deadline passes raise
``DeadlineExceeded`` with the caller's message, which names what did not happen.

Only waits for a condition come here. A deadline that bounds something else (a read loop, a connect retry
whose timeout is an answer, a turn's growing poll) stays where it is; ``tests/unit/test_single_helpers.py``
lists each with its reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from runtime.errors import DeadlineExceeded

T = TypeVar("T")


def until(predicate: Callable[[], T], deadline: float, failure: str | Callable[[], str], every: float = 0.01) -> T:
    """Poll ``predicate`` every ``every`` seconds until it returns something truthy, and return that; after
    ``deadline`` seconds raise DeadlineExceeded(``failure``; a callable is asked only then, to say what was
    last seen). An exception ``predicate`` raises (a process that ended while waited for) ends the wait as
    it is."""
    end = time.monotonic() + deadline
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > end:
            raise DeadlineExceeded(failure() if callable(failure) else failure)
        time.sleep(every)
