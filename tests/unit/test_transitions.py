"""The lifecycle walk the sweeps share: every transition in order, the ref each one returns carried on, and a
transition that fails recorded and raised (never skipped)."""

from __future__ import annotations

import pytest

from acceptance.contract import InstanceRef, Principal
from acceptance.errors import ProofError
from acceptance.harness.transitions import TRANSITIONS, Walk, walk


class Recorder:
    def __init__(self, fail: str = "") -> None:
        self.calls: list[str] = []
        self.fail = fail
        self.generation = 0

    def __getattr__(self, name: str):
        def call(*args, **_):
            self.calls.append(name)
            if name == self.fail:
                raise RuntimeError(f"{name} failed")
            if name in ("wake", "recreate", "restore", "recover"):
                self.generation += 1
                return InstanceRef(args[-1].principal, f"ref-{self.generation}")
            return "snap-1" if name == "snapshot" else None
        return call


REF = InstanceRef(Principal("W", "org3", "wendy"), "ref-0")


def test_every_transition_in_order_with_the_ref_it_returned():
    target, walked = Recorder(), Walk()
    points = list(walk(target, REF, walked))
    assert [p.transition for p in points] == [name for name, _ in TRANSITIONS]
    assert target.calls == ["sleep", "wake", "freeze", "wake", "recreate", "snapshot", "restore", "rotate",
                            "crash", "recover", "revoke"]
    assert [p.serving for p in points] == [s == "running" for _, s in TRANSITIONS]
    assert points[-2].ref.key == "ref-5" and points[-1].state == "revoked"
    walked.check("the walk")  # complete: no error


def test_a_transition_that_fails_is_recorded_raised_and_the_walk_is_incomplete():
    walked = Walk()
    with pytest.raises(RuntimeError, match="recreate failed"):
        list(walk(Recorder(fail="recreate"), REF, walked))
    assert walked.missed == {"recreate": "RuntimeError: recreate failed"}
    with pytest.raises(ProofError, match="not every transition"):
        walked.check("the walk")
