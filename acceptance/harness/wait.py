"""Waiting for a condition with a deadline, the harness's way: a wait that runs out is the harness
failing to observe (``HarnessTimeout``, so the test is *broken*), never a finding about the property."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from acceptance.errors import HarnessTimeout

T = TypeVar("T")


def until(predicate: Callable[[], T], what: str, deadline: float = 20.0, every: float = 0.05) -> T:
    """Poll ``predicate`` until it returns something truthy, and return that; raise HarnessTimeout naming
    ``what`` after ``deadline`` seconds."""
    end = time.monotonic() + deadline
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= end:
            raise HarnessTimeout(f"{what} did not happen within {deadline}s")
        time.sleep(every)
