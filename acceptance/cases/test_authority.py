"""AU-1: the authority matrix. Every authority artifact the platform issues for an instance (every kind
``capabilities`` names, and its snapshot ids) works only for its rightful holder at the current point, after
every lifecycle transition, and is refused for everyone else: another user of the same organization and of
another one (from inside their sandboxes), the operator (through its product client), the outside (a direct
call from the host), and the owner itself once a transition retired it (``judges.authority`` says how each is
presented and judged, and what it cannot present).

The owner, its intruders and the instances snapshot ids are restored into are ``dedicated``: the walk takes
the owner through sleep, freeze, recreate, restore, rotate, crash, recover and revoke, which the session's A,
B and C must not go through.
"""

from __future__ import annotations

import time

import pytest

from acceptance.cases.judges import authority
from acceptance.harness.evidence import attach
from acceptance.harness.transitions import FACETS as WALK_FACETS
from acceptance.harness.transitions import Walk, walk

CASE_FACETS = (*WALK_FACETS, "broker", "model", "product")
SPEND = 100.0  # the intruders' own model calls (every request from their sandbox buys one for them)


def _arrange(target, dedicated, sandbox_host) -> authority.Sweep:
    """The owner (org1), B (org1) and C (org2) running, and an asleep instance of another user of each of
    their organizations for the snapshot ids to be restored into."""
    owner = dedicated("O", "otto", org="org1")
    intruders = {"B": dedicated("I", "ines", org="org1"), "C": dedicated("J", "jon", org="org2")}
    sleepers = {"B": dedicated("K", "kai", org="org1"), "C": dedicated("L", "lou", org="org2")}
    for ref in sleepers.values():
        target.sleep(ref)
    for ref in intruders.values():
        target.set_spend_cap(ref.principal, SPEND)
    target.set_spend_cap(owner.principal, SPEND)
    return authority.Sweep(target, owner, intruders, sandbox_host, CASE_FACETS, sleepers)


@pytest.mark.case("AU-1", "refusal", pair="B,C,operator,outside,A(retired)->A")
def test_au1_every_authority_artifact_works_only_for_its_holder_at_its_point(target, dedicated, sandbox_host,
                                                                            visible_bytes):
    """After each transition of the walk (fresh, sleep, wake, freeze, thaw, recreate, restore, rotate, crash,
    recover, revoke) every artifact the owner held at any point so far is presented by every holder: it works
    only where it is the owner's current one at a serving point (those cells must work, or the sweep is
    broken), and is refused everywhere else; a transition that retires a kind must change it. After the walk,
    none of them is readable in what B's or C's sandbox can see, nor in the owner's but its current run-control
    key (found there: the search sees).

    Ways it could fail that the probe looks for: a proxy or product that honours a capability of a past lease
    or generation (after a rotate, a sleep, a thaw, a recreate, a restore, a recover) or of a frozen, crashed
    or revoked instance; a run-control key that outlives its sandbox; a broker that honours what its agent
    presents; an operator client that opens the agent door; a snapshot id restored for another user."""
    sweep = _arrange(target, dedicated, sandbox_host)
    walked = Walk()
    started = time.monotonic()
    for point in walk(target, sweep.owner, walked):
        sweep.at(point)
    walked.check("AU-1")
    swept = time.monotonic()
    kept = sweep.kept(visible_bytes)
    matrix = sweep.finish("AU-1")
    attach("AU-1 authority matrix", {**matrix.record(), "walk": walked.record, "where they are kept": kept,
                                     "seconds": {"walk and matrix": round(swept - started, 1),
                                                 "where kept": round(time.monotonic() - swept, 1)}})
    assert matrix.findings == []


@pytest.mark.case("AU-1", "P", pair="A->A")
def test_au1_current_artifacts_work_for_their_holder(target, dedicated, sandbox_host):
    """At the fresh point, the owner's current grant, model capability and run-control key work on the
    platform side, judged as the matrix judges them (the same cells the refusal requires to work at every
    serving point), and nothing the intruders present buys anything for the owner."""
    sweep = _arrange(target, dedicated, sandbox_host)
    point = next(walk(target, sweep.owner, Walk()))
    sweep.at(point)
    matrix = sweep.matrix
    attach("AU-1 P: the fresh point", matrix.record())
    assert sorted(w.split("@")[0] for w in matrix.worked) == sorted(k for k in matrix.kinds if k != "snapshot")
    assert matrix.findings == []


@pytest.mark.case("AU-1", "X", pair="A(retired)->A")
def test_au1_broken_lax_proxy_is_detected(target, dedicated, sandbox_host):
    """With a proxy that honours any model capability of the right organization that verifies (a past lease's, a
    past generation's), the same matrix, over the first points of the walk (fresh, sleep, wake), finds the
    owner's retired model capability working."""
    sweep = _arrange(target, dedicated, sandbox_host)
    with target.broken_lax_model_capability():
        for point in walk(target, sweep.owner, Walk()):
            sweep.at(point)
            if point.transition == "wake":
                break
    sweep.matrix.check("AU-1 X")
    attach("AU-1 X: a lax proxy", sweep.matrix.record())
    assert [f for f in sweep.matrix.findings if f.startswith("model@")]
