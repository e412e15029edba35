"""Every lifecycle transition an instance can go through, in one fixed walk, for the sweeps (issue 26).

A sweep that judges a property "after every transition" walks ``walk(target, ref)``: it yields a ``Point``
after each transition (and one for the fresh instance before any), with the instance's ref *at that point*
(recreate, restore and recover give a new generation) and its state, so the sweep knows what the rightful
holder should still be able to do there (nothing works while the instance sleeps or is frozen; after the
revocation, nothing its capabilities buy works again). The walk's record (``Walk.record``) names every
point reached and the transitions that could not be taken, and why: a sweep keeps it with its evidence,
and a walk that reached fewer points than ``TRANSITIONS`` lists is incomplete (``Walk.check``).

The order is fixed so a failure names a reproducible point: fresh, sleep, wake, freeze, thaw, recreate,
restore (of a snapshot taken at that point), rotate, crash, recover, revoke (last: nothing comes back
from it). It needs the ``lifecycle``, ``snapshots``, ``credentials`` and ``recovery`` facets; a case that
walks it declares them, so a target without one is "not covered", never silently walked in part.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from acceptance.contract import InstanceRef
from acceptance.errors import ProofError

# (name, state after it): "running" (the rightful holder's authority works), "asleep", "frozen", "crashed" (the
# instance is not serving: nothing works for anyone), "revoked" (its capabilities buy nothing, for good).
TRANSITIONS: tuple[tuple[str, str], ...] = (
    ("fresh", "running"),
    ("sleep", "asleep"),
    ("wake", "running"),
    ("freeze", "frozen"),
    ("thaw", "running"),
    ("recreate", "running"),
    ("restore", "running"),
    ("rotate", "running"),
    ("crash", "crashed"),
    ("recover", "running"),
    ("revoke", "revoked"),
)
FACETS = ("lifecycle", "snapshots", "credentials", "recovery")


@dataclass(frozen=True)
class Point:
    """The instance just after ``transition``: ``ref`` is its current generation, ``state`` as above."""

    index: int
    transition: str
    state: str
    ref: InstanceRef

    @property
    def serving(self) -> bool:
        return self.state == "running"

    def __str__(self) -> str:
        return f"after {self.transition} (point {self.index}, {self.state}, {self.ref.key})"


@dataclass
class Walk:
    """What the walk reached: ``points`` in order, ``missed`` = {transition: why it could not be taken}."""

    points: list[Point] = field(default_factory=list)
    missed: dict[str, str] = field(default_factory=dict)

    @property
    def record(self) -> dict[str, Any]:
        return {"transitions": [name for name, _ in TRANSITIONS], "reached": [str(p) for p in self.points],
                "missed": dict(self.missed)}

    def check(self, what: str) -> None:
        """A walk that reached fewer points than there are transitions did not judge every transition."""
        reached = [p.transition for p in self.points]
        if reached != [name for name, _ in TRANSITIONS]:
            raise ProofError(f"{what}: the lifecycle walk reached {reached}, not every transition "
                             f"{[name for name, _ in TRANSITIONS]}; missed: {self.missed}")


def _steps(target: Any) -> dict[str, Callable[[InstanceRef], InstanceRef]]:
    def same_ref(method: Callable[[InstanceRef], None]) -> Callable[[InstanceRef], InstanceRef]:
        """A transition that keeps the instance's generation: the ref after it is the ref before."""
        def step(ref: InstanceRef) -> InstanceRef:
            method(ref)
            return ref
        return step

    def restore(ref: InstanceRef) -> InstanceRef:
        return target.restore(target.snapshot(ref), ref)

    return {"sleep": same_ref(target.sleep), "wake": target.wake, "freeze": same_ref(target.freeze),
            "thaw": target.wake, "recreate": target.recreate, "restore": restore,
            "rotate": same_ref(target.rotate), "crash": same_ref(target.crash), "recover": target.recover,
            "revoke": same_ref(target.revoke)}


def walk(target: Any, ref: InstanceRef, walked: Walk | None = None) -> Iterator[Point]:
    """Take ``ref`` through every transition in order, yielding the point after each (the first, "fresh",
    before any). Pass a ``Walk`` to keep the record; a transition that raises ends the walk (the error
    propagates: a platform that cannot take its own transition is not judged by skipping it), and is
    recorded as missed first."""
    walked = walked if walked is not None else Walk()
    steps = _steps(target)
    for index, (name, state) in enumerate(TRANSITIONS):
        if name != "fresh":
            try:
                ref = steps[name](ref)
            except Exception as exc:
                walked.missed[name] = f"{type(exc).__name__}: {exc}"
                raise
        point = Point(index, name, state, ref)
        walked.points.append(point)
        yield point
