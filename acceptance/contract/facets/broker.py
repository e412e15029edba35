"""The ``broker`` facet: the agent's egress through its per-instance broker (its endpoint, its refusals, run
control); with its check-driver round trip.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from acceptance.contract.checking import Checker, check
from acceptance.contract.core import InstanceRef


@runtime_checkable
class Broker(Protocol):
    """The agent's egress through its per-instance broker: where it listens, what it refused, run control."""

    def broker_endpoint(self, ref: InstanceRef) -> str:
        """The broker's base URL as the agent inside ``ref`` sees it (e.g. http://127.0.0.1:8765)."""

    def broker_refusals(self, ref: InstanceRef) -> list[tuple[str, str]]:
        """(route, reason) of everything the instance's broker refused, as its log records them."""

    def broker_forwarded(self, ref: InstanceRef) -> list[Mapping[str, object]]:
        """Everything the instance's current broker forwarded for its agent since it started, in order: ``at``
        (epoch seconds), ``route`` (a model route, or /mcp with its JSON-RPC ``method`` and, for tools/call, the
        ``tool``)."""

    def runctl(self, ref: InstanceRef, method: str, path: str, body: Mapping[str, object] | None = None, *,
               request_id: str = "") -> tuple[int, dict]:
        """Call the agent's run-control API through the platform side of the instance's broker."""


def round_trip(c: Checker) -> str:
    """The endpoint is a URL, the refusals a list, run control answers (a 404 for a run that does not exist)."""
    t, ref = c.target, c.ref
    endpoint = t.broker_endpoint(ref)
    check(isinstance(endpoint, str) and "://" in endpoint, f"broker_endpoint: {endpoint!r} is not a URL")
    refusals = t.broker_refusals(ref)
    check(isinstance(refusals, list), f"broker_refusals returned {type(refusals).__name__}")
    forwarded = t.broker_forwarded(ref)
    check(isinstance(forwarded, list) and all(isinstance(r, Mapping) and isinstance(r.get("at"), (int, float))
                                              and isinstance(r.get("route"), str) for r in forwarded),
          f"broker_forwarded returned {forwarded!r:.200}: a list of records with 'at' and 'route'")
    status, body = t.runctl(ref, "GET", "/v1/runs/run_doesnotexist")
    check(isinstance(status, int) and isinstance(body, dict), f"runctl returned ({status!r}, {body!r})")
    return (f"broker_endpoint {endpoint}, broker_refusals ({len(refusals)}), broker_forwarded ({len(forwarded)}), "
            f"runctl (status {status})")
