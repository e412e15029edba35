"""The ``platform_log`` facet: the platform's own record of its decisions, naming each request id (how a
platform-side probe proves it ran); with its check-driver round trip.
"""

from __future__ import annotations

import secrets
from typing import Protocol, runtime_checkable

from acceptance.contract.checking import Checker, check


@runtime_checkable
class PlatformLog(Protocol):
    """The platform's own record of its decisions, naming each request id (how platform-side probes prove they ran)."""

    def platform_log(self) -> str:
        """The platform's own log so far (controller, brokers, proxy, product server)."""


def round_trip(c: Checker) -> str:
    """A request id given to a turn is in the platform's own record (or the provider's, with the model facet)."""
    t, ref = c.target, c.ref
    nonce = f"pp-{secrets.token_hex(8)}"
    t.turn(ref, "hello again", request_id=nonce)
    record = t.platform_log()
    if nonce not in record and "model" in c.claimed:
        record += "\n".join(map(str, t.provider_records()))
    check(nonce in record, f"a turn's request id {nonce} is not in the platform's record ({len(record)} "
                           "characters): platform-side probes could not prove they ran")
    return "platform_log names a turn's request id"
