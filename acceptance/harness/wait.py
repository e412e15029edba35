"""Waiting for a condition with a deadline, the harness's way: a wait that runs out is the harness
failing to observe (``HarnessTimeout``, so the test is *broken*), never a finding about the property.

Two ways to end, one loop: ``until`` raises when the deadline passes; ``settle`` returns the last observation
either way (the caller judges it: a kernel that reaps a sandbox's processes a moment late, a ledger that
catches up with the provider). A hand-written ``monotonic() +`` loop elsewhere in the harness is refused by
``tests/unit/test_single_helpers.py`` unless its deadline bounds something else (a read, a resend).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from acceptance.errors import HarnessTimeout

T = TypeVar("T")


def _poll(observe: Callable[[], T], done: Callable[[T], object], deadline: float, every: float) -> tuple[T, bool]:
    """(the last observation, whether ``done`` held for it) after at most ``deadline`` seconds."""
    end = time.monotonic() + deadline
    while True:
        seen = observe()
        if done(seen):
            return seen, True
        if time.monotonic() >= end:
            return seen, False
        time.sleep(every)


def until(predicate: Callable[[], T], what: str | Callable[[], str], deadline: float = 20.0,
          every: float = 0.05) -> T:
    """Poll ``predicate`` until it returns something truthy, and return that; raise HarnessTimeout naming
    ``what`` after ``deadline`` seconds (``what`` may be a callable, asked only then, to say what was seen).
    An exception ``predicate`` raises (a process that died while waited for) ends the wait as it is."""
    value, ok = _poll(predicate, bool, deadline, every)
    if not ok:
        raise HarnessTimeout(f"{what() if callable(what) else what} did not happen within {deadline}s")
    return value


def settle(observe: Callable[[], T], done: Callable[[T], bool], deadline: float = 3.0, step: float = 0.02) -> T:
    """``observe()`` until ``done`` holds or the deadline passes; the last observation either way (the
    kernel reaps a sandbox's processes a moment after its launcher exits)."""
    return _poll(observe, done, deadline, step)[0]
