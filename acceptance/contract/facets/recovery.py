"""The ``recovery`` facet: the effect journal and the fenced successor after a crash; with its check-driver
round trip.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from acceptance.contract.checking import Checker, check, until_gone
from acceptance.contract.core import InstanceRef


@runtime_checkable
class Recovery(Protocol):
    """Effects and recovery after a crash: the effect journal and the fenced successor."""

    def recover(self, ref: InstanceRef, *, request_id: str = "") -> InstanceRef:
        """After ``crash``: fence the stale lease, reconcile the old run's effects, admit a successor."""

    def journal(self, ref: InstanceRef) -> list[dict]:
        """The instance's effect journal: operation id, tool, state, attempts."""


def round_trip(c: Checker) -> str:
    """The journal is a list; with lifecycle, a crash then ``recover`` admits a working successor of the next
    generation."""
    t, ref = c.target, c.ref
    check(isinstance(t.journal(ref), list), "journal is not a list")
    if "lifecycle" not in c.claimed:
        return "journal; recover not exercised (it follows a crash, which is the lifecycle facet)"
    pid = t.identity(ref).host_pid
    t.crash(ref)
    until_gone(pid, "crash")
    after = c.ref = t.recover(ref)
    check(after.generation > ref.generation, "recover did not admit a successor of the next generation")
    out = t.exec(after, ["true"], timeout=30)
    check(out.rc == 0, f"exec in the recovered instance: rc {out.rc}")
    return "journal, crash, recover (next generation, exec works)"
