"""The ``capacity`` facet: the platform's admission arithmetic and the host limits it admits against; with its
check-driver round trip (the arithmetic must agree with the platform's own figure for its fleet).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Protocol, runtime_checkable

from acceptance.contract.checking import Checker, check

# The seed's field names of a capacity budget and of a fleet (``Capacity.capacity_need``).
BUDGET_FIELDS = ("shared_memory_mb", "memory_headroom_mb", "idle_instance_mb", "active_instance_mb", "broker_mb",
                 "volume_mb", "disk_headroom_mb")
FLEET_FIELDS = ("resident", "active", "stored_users", "snapshots_mb")


@runtime_checkable
class Capacity(Protocol):
    """The platform's admission arithmetic and the host limits it admits against."""

    def capacity_need(self, budget: Mapping[str, int], fleet: Mapping[str, int], *, request_id: str = ""
                      ) -> Mapping[str, int]:
        """The platform's admission arithmetic, pure: the ``memory_mb`` and ``disk_mb`` that ``fleet`` needs
        under ``budget`` (integer MB, the seed's field names).

        ``budget``: ``shared_memory_mb``, ``memory_headroom_mb``, ``idle_instance_mb``, ``active_instance_mb``,
        ``broker_mb``, ``volume_mb``, ``disk_headroom_mb``. ``fleet``: ``resident`` (instances in memory),
        ``active`` (of those, running a turn), ``stored_users`` (users whose volume is kept), ``snapshots_mb``.
        Bad input (a missing or unknown field, a negative or non-integer value, more active than resident)
        raises ``TargetError`` naming the field."""

    def capacity_admit(self, budget: Mapping[str, int], fleet: Mapping[str, int], host: Mapping[str, int], *,
                       request_id: str = "") -> tuple[bool, str]:
        """Whether ``fleet`` fits ``host`` (``memory_mb``, ``disk_mb``) under ``budget``, as the platform would
        decide it; the reason names each resource that does not fit (``memory``, ``disk``)."""

    def fleet_need(self) -> Mapping[str, int]:
        """What the platform's current fleet needs under its own budget, and what it admits against:
        ``memory_mb``, ``disk_mb``, ``host_memory_mb``, ``host_disk_mb``, the fleet's figures (``resident``,
        ``active``, ``stored_users``, ``snapshots_mb``) and the budget's fields."""

    def host_limits(self, memory_mb: int | None = None, disk_mb: int | None = None
                    ) -> AbstractContextManager[None]:
        """While inside, the platform admits against these host limits (``None`` keeps the current one);
        restored on exit. A wake or provision the platform does not admit raises ``CapacityRefusedError``
        with its reason and changes nothing."""


def round_trip(c: Checker) -> str:
    """The arithmetic agrees with the platform's own figure for its fleet, refuses a 1 MB host, and
    ``host_limits`` enters and leaves."""
    t = c.target
    fleet_need = t.fleet_need()
    for key in ("memory_mb", "disk_mb", "host_memory_mb", "host_disk_mb"):
        check(isinstance(fleet_need.get(key), int), f"fleet_need has no integer {key}")
    budget = {k: fleet_need[k] for k in BUDGET_FIELDS}
    fleet = {k: fleet_need[k] for k in FLEET_FIELDS}
    need = t.capacity_need(budget, fleet)
    check((need["memory_mb"], need["disk_mb"]) == (fleet_need["memory_mb"], fleet_need["disk_mb"]),
          f"capacity_need of the current fleet {dict(need)} disagrees with fleet_need {dict(fleet_need)}")
    ok, why = t.capacity_admit(budget, fleet, {"memory_mb": 1, "disk_mb": 1})
    check(not ok and "memory" in why, f"capacity_admit on a 1 MB host: ({ok}, {why!r})")
    with t.host_limits(memory_mb=fleet_need["host_memory_mb"]):
        pass
    return "fleet_need, capacity_need (agrees with fleet_need), capacity_admit (1 MB host refused), host_limits"
