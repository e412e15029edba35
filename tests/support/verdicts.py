"""A small, real verdict (made by the pairing rules themselves) for report tests."""

from __future__ import annotations

from acceptance.catalogue import load
from acceptance.harness.pairing import Declared, Outcome, judge


def sample_verdict() -> dict:
    outcomes = [Outcome(Declared("t::r", "FS-1", "refusal", "B->A"), proofs=1),
                Outcome(Declared("t::p", "FS-1", "P")), Outcome(Declared("t::x", "FS-1", "X")),
                Outcome(Declared("t::r2", "RS-1", "refusal", "A"), outcome="failed", proofs=1),
                Outcome(Declared("t::p2", "RS-1", "P"))]
    v = judge(outcomes, load())
    v.update(run="0badc0de", target="reference", pytest_exit=1)
    return v


