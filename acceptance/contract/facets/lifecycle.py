"""The ``lifecycle`` facet: sleep, freeze, wake, recreate and crash an instance, and whether a principal has
one running; with its check-driver round trip.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from acceptance.contract.checking import OWNER, Checker, check
from acceptance.contract.core import InstanceRef, Principal


@runtime_checkable
class Lifecycle(Protocol):
    """Sleep (stopped or frozen), wake, replace and kill a sandbox; whether a principal has one running."""

    def wake(self, ref: InstanceRef, *, request_id: str = "") -> InstanceRef:
        """Bring the instance back to ready from whichever sleep it is in (stopped or frozen)."""

    def sleep(self, ref: InstanceRef) -> None:
        """Stop the instance's sandbox; its volume stays."""

    def freeze(self, ref: InstanceRef) -> None:
        """Sleep without stopping: the sandbox's processes stay, held frozen by the host (the cgroup freezer),
        their memory still charged; ``wake`` thaws them. While frozen nothing of the instance may act or be
        acted for: its broker refuses every request, its capabilities buy nothing."""

    def recreate(self, ref: InstanceRef) -> InstanceRef:
        """Replace the sandbox, keep the volume; the returned ref has the next generation."""

    def crash(self, ref: InstanceRef) -> None: ...

    def running(self, principal: Principal) -> bool:
        """Whether any instance of ``principal``'s pair has a running sandbox."""


def round_trip(c: Checker) -> str:
    """Sleep stops (``running`` says so), wake restarts, freeze keeps the same sandbox, recreate gives the
    next generation with the volume kept."""
    t, ref = c.target, c.ref
    t.sleep(ref)
    check(not t.running(OWNER), "running() is still true after sleep")
    ref = c.ref = t.wake(ref)
    check(t.running(OWNER), "running() is false after wake")
    pid = t.identity(ref).host_pid
    t.freeze(ref)
    ref = c.ref = t.wake(ref)
    check(t.identity(ref).host_pid == pid, "wake after freeze started a new sandbox: freeze did not keep it")
    again = t.recreate(ref)
    check(again.generation > ref.generation, f"recreate kept generation {ref.generation}")
    c.ref = again
    check(c.token + "memory" in t.read_back(again, "memory"), "recreate lost the volume (memory token gone)")
    return "sleep, running, wake, freeze and thaw (same sandbox), recreate (next generation, volume kept)"
