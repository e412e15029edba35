"""The ``product`` facet: the product the agent works in, as its people and support operators use it, and
every route it serves; with its check-driver round trip.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from acceptance.contract.checking import OWNER, Checker, check
from acceptance.contract.core import Principal, ProductClient


@runtime_checkable
class Product(Protocol):
    """The product the agent works in, as its people and operators use it, and its routes."""

    def person(self, principal: Principal) -> ProductClient:
        """A client of the product's people API, signed in as ``principal`` (the human, not the agent)."""

    def operator(self, name: str) -> ProductClient:
        """A client of the product signed in as a support operator."""

    def product_routes(self) -> list[tuple[str, str, str]]:
        """Every route the product server really serves: (method, path template, which credential opens it)."""

    def record_reads(self) -> list[Mapping[str, object]]:
        """The product's data layer's own record of every record it handed out so far, in order: ``kind`` of
        the credential of the request that read it (agent, person, operator; platform outside any request),
        ``user`` (the operator's name for an operator), ``record`` (its id), ``org`` and ``owner``; whatever
        route served it, and whether or not anything was audited."""


def round_trip(c: Checker) -> str:
    """Every route is listed; a person and an operator each get a status from a plain GET route."""
    t = c.target
    routes = t.product_routes()
    check(routes and all(len(r) == 3 for r in routes), f"product_routes: {routes!r}"[:300])
    plain = [path for method, path, _ in routes if method == "GET" and "{" not in path]
    check(plain, "product_routes lists no GET route without a parameter to call")
    status, _ = t.person(OWNER).request("GET", plain[0])
    check(isinstance(status, int), f"person().request returned status {status!r}")
    op_status, _ = t.operator("checker").request("GET", plain[0])
    check(isinstance(op_status, int), f"operator().request returned status {op_status!r}")
    reads = t.record_reads()
    check(isinstance(reads, list) and all({"kind", "user", "record", "org", "owner"} <= set(r) for r in reads),
          f"record_reads: {reads[:3]!r}"[:300])
    return (f"product_routes ({len(routes)}), person and operator GET {plain[0]} ({status}, {op_status}), "
            f"record_reads ({len(reads)})")
