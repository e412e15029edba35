"""The ``platform_log`` facet: the platform's own record of its decisions, naming each request id (how a
platform-side probe proves it ran); with its check-driver round trip.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from acceptance.contract.checking import Checker, check


@runtime_checkable
class PlatformLog(Protocol):
    """The platform's own record of its decisions, naming each request id (how platform-side probes prove they ran)."""

    def platform_log(self) -> str:
        """The platform's own log so far (controller, brokers, proxy, product server)."""

    def engine_logs(self) -> Mapping[str, bytes]:
        """What the sandbox engine kept of each sandbox's own stdout and stderr over the run (a container
        engine's log of each container, those already removed included), by a name that starts with the
        instance's key and a space; each whole (past a bound, ``TargetError``). Empty when the engine keeps
        none (the suite still checks from the host where each agent's stdout and stderr go)."""


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
    logs = t.engine_logs()
    check(all(isinstance(k, str) and isinstance(v, bytes) for k, v in logs.items()),
          "engine_logs must map each sandbox's name to the bytes its engine kept")
    mine = [k for k in logs if k.startswith(f"{ref.key} ")]
    check(not logs or mine, f"engine_logs names no sandbox of instance {ref.key} (names: {sorted(logs)[:5]})")
    return (f"platform_log names a turn's request id; engine_logs: {len(logs)} sandboxes' output"
            if logs else "platform_log names a turn's request id; the engine keeps no sandbox output")
