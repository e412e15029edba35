"""What every check-driver round trip shares: the checker's state, the principals it uses, and the host-side
helpers that judge a round trip against what the host sees.

A round trip is a function of one ``Checker`` that either returns one line saying what it did or raises
``CheckFailed`` (any other exception is the driver's, and is reported the same way, with its error). The
runner (``conformance.py``) calls them; each facet module under ``facets/`` holds its own, beside its Protocol.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from acceptance.contract.core import InstanceRef, Principal

OWNER = Principal("K", "org3", "kit")
OTHER = Principal("L", "org3", "lou")
GONE_DEADLINE = 10.0


class CheckFailed(Exception):
    """A round trip did not give what the contract says."""


@dataclass
class Checker:
    """The state the round trips share: the driver under check, the instance they work on (a round trip that
    replaces it, as ``recreate`` does, sets the new ref here), the token planted in every location and the
    facets the driver claims (so a round trip may cross-check through another facet it has)."""

    target: object
    token: str
    claimed: list[str] = field(default_factory=list)
    ref: InstanceRef | None = None


def check(condition: object, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text(errors="replace").rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def until_gone(pid: int, what: str) -> None:
    end = time.monotonic() + GONE_DEADLINE
    while alive(pid):
        if time.monotonic() > end:
            raise CheckFailed(f"{what}: its sandbox process {pid} still runs {GONE_DEADLINE:.0f} s later")
        time.sleep(0.02)
