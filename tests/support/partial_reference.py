"""Drivers that wrap the reference target to be less than it.

``without_snapshots``: every method of the core (the optional ``exec_binary`` too: without it the scans would
run under the sandbox's own Python, within the agent's reach, and PB-1 would rightly fail) and of every facet
but ``snapshots`` (``snapshot``, ``snapshots``, ``restore``, ``snapshot_bytes``).

The class really lacks those methods (it is built from the contract's registry, not by raising from them),
so ``isinstance(t, contract.Snapshots)`` is false, as it would be for a platform that keeps no snapshots.
A qualification of it must report exactly the cases whose catalogue entry needs ``snapshots`` as not
covered, naming the facet, and pass every other one (tests/integration/drivers/test_partial_target.py).

``rotate_does_nothing``: the same, snapshots included, but ``rotate`` changes nothing: a facet the driver
claims that does not work, which ``pairproof check-driver`` must report as failing. So are
``rotate_in_name_only`` (its ``capabilities`` change after ``rotate``, the platform's do not) and
``restore_restores_nothing`` (``restore`` hands back the instance as it is).

    pairproof qualify --target support.partial_reference:without_snapshots     (with tests/ on PYTHONPATH)
"""

from __future__ import annotations

from acceptance.contract import CORE, FACETS, OPTIONAL_CORE
from acceptance.targets.reference import create as create_reference
from acceptance.targets.reference import preflight  # noqa: F401 (the CLI asks the driver's module for it)

LEFT_OUT = "snapshots"


class WithoutSnapshots:
    name = "reference-without-snapshots"

    def __init__(self, options) -> None:
        self._inner = create_reference(options)


def _delegate(method: str):
    def call(self, *args, **kwargs):
        return getattr(self._inner, method)(*args, **kwargs)

    call.__name__ = call.__qualname__ = method
    return call


for _method in (*CORE, *OPTIONAL_CORE, *(m for facet in FACETS.values() if facet.name != LEFT_OUT for m in facet.methods)):
    if _method != "name":
        setattr(WithoutSnapshots, _method, _delegate(_method))


def without_snapshots(options) -> WithoutSnapshots:
    return WithoutSnapshots(options)


class RotateDoesNothing(WithoutSnapshots):
    name = "reference-rotate-does-nothing"

    def rotate(self, ref) -> None:
        pass


for _method in FACETS[LEFT_OUT].methods:
    setattr(RotateDoesNothing, _method, _delegate(_method))


def rotate_does_nothing(options) -> RotateDoesNothing:
    return RotateDoesNothing(options)


class RotateInNameOnly(RotateDoesNothing):
    """``rotate`` changes what ``capabilities`` reports, not what the platform honours."""

    name = "reference-rotate-in-name-only"
    _rotations = 0

    def rotate(self, ref) -> None:
        self._rotations += 1

    def capabilities(self, ref):
        held = dict(self._inner.capabilities(ref))
        return {k: v + "r" * self._rotations for k, v in held.items()}


def rotate_in_name_only(options) -> RotateInNameOnly:
    return RotateInNameOnly(options)


class RestoreRestoresNothing(RotateDoesNothing):
    name = "reference-restore-restores-nothing"

    def rotate(self, ref) -> None:
        self._inner.rotate(ref)

    def restore(self, snapshot_id, into, **_):
        return into


def restore_restores_nothing(options) -> RestoreRestoresNothing:
    return RestoreRestoresNothing(options)
