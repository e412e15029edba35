"""The deliberately broken arrangements (what an X control breaks on purpose): one facet each, one method
each, a context manager whose exit tears the arrangement down; the ``Lab`` a driver may use for
``broken_open_egress``; and the one check-driver round trip they all share (enter, probe what it yields,
leave, and every sandbox it started is gone).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Protocol, runtime_checkable

from acceptance.contract.checking import OTHER, OWNER, Checker, check, until_gone
from acceptance.contract.core import InstanceRef, Principal
from acceptance.contract.facets.capacity import BUDGET_FIELDS


@runtime_checkable
class BrokenSharedVolume(Protocol):
    def broken_shared_volume(self, owner: InstanceRef, intruder: Principal) -> AbstractContextManager[InstanceRef]:
        """The intruder's sandbox gets the owner's volume as its /data (under the owner's uid)."""


@runtime_checkable
class BrokenSharedTmp(Protocol):
    def broken_shared_tmp(self, owner: Principal, intruder: Principal
                          ) -> AbstractContextManager[tuple[InstanceRef, InstanceRef]]:
        """Two sandboxes whose /tmp is the same host folder."""


@runtime_checkable
class BrokenSecretInEnv(Protocol):
    def broken_secret_in_env(self, principal: Principal, extra: Mapping[str, str] | None = None
                             ) -> AbstractContextManager[InstanceRef]:
        """A sandbox launched with the platform's secrets (and ``extra``) in its environment."""


@runtime_checkable
class BrokenSharedPidNs(Protocol):
    def broken_shared_pid_ns(self, intruder: Principal) -> AbstractContextManager[InstanceRef]:
        """The intruder's sandbox shares the host's pid namespace and /proc."""


@runtime_checkable
class BrokenNestedUserns(Protocol):
    def broken_nested_userns(self, intruder: Principal) -> AbstractContextManager[InstanceRef]:
        """The intruder's sandbox lets its processes create a user namespace (and, in it, any other)."""


@runtime_checkable
class BrokenWritableRoot(Protocol):
    def broken_writable_root(self, intruder: Principal) -> AbstractContextManager[InstanceRef]:
        """The intruder's sandbox has a writable root filesystem (its agent can create files outside the places it
        was given to write)."""


@runtime_checkable
class BrokenNoSeccomp(Protocol):
    def broken_no_seccomp(self, intruder: Principal) -> AbstractContextManager[InstanceRef]:
        """The intruder's sandbox runs without a seccomp filter (every system call its uid may make reaches the
        kernel)."""


@runtime_checkable
class BrokenHostDevice(Protocol):
    def broken_host_device(self, intruder: Principal) -> AbstractContextManager[InstanceRef]:
        """The intruder's sandbox is given a host device node beyond the harmless ones (the kernel log,
        /dev/kmsg)."""


@runtime_checkable
class BrokenSharedPropagation(Protocol):
    def broken_shared_propagation(self, intruder: Principal) -> AbstractContextManager[InstanceRef]:
        """The intruder's sandbox has a mount with shared propagation (its volume at /data)."""


@runtime_checkable
class BrokenHostUtsCgroupNs(Protocol):
    def broken_host_uts_cgroup_ns(self, intruder: Principal) -> AbstractContextManager[InstanceRef]:
        """The intruder's sandbox shares the host's UTS and cgroup namespaces."""


@runtime_checkable
class BrokenNoCpuLimit(Protocol):
    def broken_no_cpu_limit(self, intruder: Principal) -> AbstractContextManager[InstanceRef]:
        """The intruder's sandbox has no CPU limit (its cgroup has no CPU quota)."""


@runtime_checkable
class BrokenSameUid(Protocol):
    def broken_same_uid(self, owner: InstanceRef, intruder: Principal) -> AbstractContextManager[InstanceRef]:
        """The intruder's sandbox runs under the owner's host uid (its own volume)."""


@runtime_checkable
class BrokenHostAccountUid(Protocol):
    def broken_host_account_uid(self, intruder: Principal, account: str = "nobody"
                                ) -> AbstractContextManager[InstanceRef]:
        """The intruder's sandbox runs under an existing host account's uid."""


@runtime_checkable
class BrokenUnauditedOperatorRoute(Protocol):
    def broken_unaudited_operator_route(self) -> AbstractContextManager[str]:
        """A support route that reads records without writing the audit; yields its path template (``{id}``)."""


@runtime_checkable
class BrokenDebugLogging(Protocol):
    def broken_debug_logging(self) -> AbstractContextManager[None]:
        """The platform logs at debug level while it lasts."""


class Lab(Protocol):
    """What a driver may use of the lab (the run's fake world: a sink in a network namespace of its own that
    answers DNS and records every packet reaching it), which the harness hands to ``broken_open_egress``."""

    def connect(self, pid: int, *, default_route: bool = True) -> str:
        """Link the network namespace of host process ``pid`` to the lab with a veth (IPv4 and IPv6), and by
        default give it default routes through the link; the IPv4 address of that side. The lab undoes it
        when it closes; the driver's arrangement only removes its sandbox."""


@runtime_checkable
class BrokenOpenEgress(Protocol):
    def broken_open_egress(self, principal: Principal, lab: Lab, catalog_refresh: float = 0.0
                           ) -> AbstractContextManager[InstanceRef]:
        """A sandbox linked to the lab with a default route and the lab's resolver."""


@runtime_checkable
class BrokenUnencryptedSnapshot(Protocol):
    def broken_unencrypted_snapshot(self) -> AbstractContextManager[None]:
        """``snapshot``/``restore`` store snapshots compressed but not encrypted while it lasts."""


@runtime_checkable
class BrokenUnmeteredModelCall(Protocol):
    def broken_unmetered_model_call(self, principal: Principal, purpose: str = "title") -> AbstractContextManager[None]:
        """One model call for ``principal`` reaches the provider past the platform's meter."""


@runtime_checkable
class BrokenCapacityWithoutBrokers(Protocol):
    def broken_capacity_without_brokers(self) -> AbstractContextManager[None]:
        """The capacity arithmetic budgets no broker per resident instance while it lasts."""


@runtime_checkable
class BrokenLossyProductLink(Protocol):
    def broken_lossy_product_link(self, ref: InstanceRef) -> AbstractContextManager[None]:
        """Requests from ``ref``'s broker reach the product, answers are lost."""


@runtime_checkable
class BrokenUnreachableProduct(Protocol):
    def broken_unreachable_product(self, ref: InstanceRef) -> AbstractContextManager[None]:
        """The product refuses ``ref``'s broker's connections."""


@runtime_checkable
class BrokenLaxModelCapability(Protocol):
    def broken_lax_model_capability(self) -> AbstractContextManager[None]:
        """The model proxy honours any model capability that verifies, whatever its lease or generation."""


# The posture case's arrangements (PS-1): each a sandbox of the intruder's with one guard of the runtime's posture
# removed.
POSTURE_ARRANGEMENTS = ("broken_writable_root", "broken_no_seccomp", "broken_host_device", "broken_shared_propagation",
                        "broken_host_uts_cgroup_ns", "broken_no_cpu_limit")


def _calls(usage: Mapping) -> dict:
    return {k: v["calls"] for k, v in usage.items()}


def round_trip(c: Checker, facet: str, lab: Callable[[], Lab]) -> str:
    """Enter the arrangement ``facet`` names, probe what it yields (each sandbox it started answers ``exec``;
    with the model or capacity facet, what it breaks is seen broken), leave it: every sandbox it started is
    gone and the checker's own instance still works. ``lab`` starts the lab network on first use."""
    t, ref = c.target, c.ref
    args: dict[str, object] = {
        "broken_shared_volume": {"owner": ref, "intruder": OTHER},
        "broken_shared_tmp": {"owner": OWNER, "intruder": OTHER},
        "broken_secret_in_env": {"principal": OTHER},
        "broken_shared_pid_ns": {"intruder": OTHER},
        "broken_nested_userns": {"intruder": OTHER},
        **{f: {"intruder": OTHER} for f in POSTURE_ARRANGEMENTS},
        "broken_same_uid": {"owner": ref, "intruder": OTHER},
        "broken_host_account_uid": {"intruder": OTHER},
        "broken_open_egress": {"principal": OTHER},
        "broken_unmetered_model_call": {"principal": OWNER},
        "broken_lossy_product_link": {"ref": ref},
        "broken_unreachable_product": {"ref": ref},
    }.get(facet, {})
    if facet == "broken_open_egress":
        args["lab"] = lab()
    arrangement = getattr(t, facet)(**args)
    check(isinstance(arrangement, AbstractContextManager), f"{facet}(...) is not a context manager")
    pids: list[int] = []
    claimed = c.claimed
    if facet == "broken_unmetered_model_call" and "model" in claimed:
        calls, metered = len(t.provider_records()), _calls(t.ledger_usage())
    if facet == "broken_capacity_without_brokers" and "capacity" in claimed:
        fleet_need = t.fleet_need()
        budget = {k: fleet_need[k] for k in BUDGET_FIELDS}
        fleet = {"resident": 2, "active": 0, "stored_users": 2, "snapshots_mb": 0}
        outside = t.capacity_need(budget, fleet)["memory_mb"]
    with arrangement as given:
        refs = [r for r in (given if isinstance(given, tuple) else (given,)) if isinstance(r, InstanceRef)]
        if facet == "broken_unaudited_operator_route":
            check(isinstance(given, str) and given.startswith("/"), f"it yielded {given!r}, not a route path")
        if facet == "broken_unmetered_model_call" and "model" in claimed:
            check(len(t.provider_records()) > calls and _calls(t.ledger_usage()) == metered,
                  "no call reached the provider past the meter (the provider's record did not grow, or the "
                  "meter counted it)")
        if facet == "broken_capacity_without_brokers" and "capacity" in claimed:
            inside = t.capacity_need(budget, fleet)["memory_mb"]
            check(inside < outside, f"two resident instances need {inside} MB inside and {outside} MB "
                                    "outside: the arithmetic still budgets their brokers")
        for r in refs:
            out = t.exec(r, ["true"], timeout=30)
            check(out.rc == 0, f"exec in the arrangement's sandbox {r.key}: rc {out.rc}")
            pids.append(t.identity(r).host_pid)
    for pid in pids:
        until_gone(pid, f"leaving {facet}")
    out = t.exec(c.ref, ["true"], timeout=30)
    check(out.rc == 0, f"after leaving {facet}, exec in the checker's own instance: rc {out.rc}")
    seen = {"broken_unmetered_model_call": ("model", "a call reached the provider unmetered"),
            "broken_capacity_without_brokers": ("capacity", "the arithmetic dropped the brokers")}.get(facet)
    return (f"entered and left; {len(pids)} sandbox{'es' if len(pids) != 1 else ''} it started gone"
            if pids else f"entered and left (yielded {type(given).__name__})"
            + (f"; inside, {seen[1]}" if seen and seen[0] in claimed else ""))
