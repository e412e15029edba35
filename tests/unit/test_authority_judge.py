"""The authority matrix's pure parts: which kinds it sweeps (an unknown one is a ProofError, never skipped),
what counts as the rightful holder's current artifact at a point, and a matrix missing a cell is incomplete."""

from __future__ import annotations

import pytest

from acceptance.cases.judges import authority, presented
from acceptance.contract import InstanceRef, Principal
from acceptance.errors import ProofError
from acceptance.harness.transitions import TRANSITIONS, Point

OWNER = Principal("O", "org1", "otto")
REF = InstanceRef(OWNER, "org1-otto-0")


def point(transition: str) -> Point:
    index = [name for name, _ in TRANSITIONS].index(transition)
    return Point(index, transition, dict(TRANSITIONS)[transition], REF)


def test_kinds_are_what_the_contract_exposes():
    kinds = authority.kinds_of({"grant": "g", "model": "m", "runctl": "r"}, ["snapshots", "credentials"])
    assert kinds == ["grant", "model", "runctl", "snapshot"]
    assert authority.kinds_of({"model": "m"}, ["credentials"]) == ["model"]


def test_a_kind_the_sweep_cannot_present_is_a_proof_error():
    with pytest.raises(ProofError, match="session"):
        authority.kinds_of({"model": "m", "session": "s"}, [])


def test_the_current_artifact_at_a_serving_point_is_rightful():
    held = authority.Held("model", "m1", 0, "model@0")
    assert authority.rightful(held, point("fresh"), {"model": "m1"}, [])


def test_not_serving_a_replaced_value_or_a_retiring_transition_is_not_rightful():
    held = authority.Held("model", "m1", 0, "model@0")
    assert not authority.rightful(held, point("freeze"), {"model": "m1"}, ["sleep", "wake", "freeze"])
    assert not authority.rightful(held, point("wake"), {"model": "m2"}, ["sleep", "wake"])
    # The value the platform still holds, after a rotate that retires it: not rightful (and a finding of its own).
    assert not authority.rightful(held, point("rotate"), {"model": "m1"}, ["rotate"])
    runctl = authority.Held("runctl", "k1", 3, "runctl@3")
    assert authority.rightful(runctl, point("rotate"), {"runctl": "k1"}, ["rotate"])  # rotate does not retire it
    assert not authority.rightful(runctl, point("recover"), {"runctl": "k1"}, ["crash", "recover"])


def test_a_matrix_missing_a_cell_or_a_point_is_incomplete():
    matrix = authority.Matrix(OWNER, ["model"])
    with pytest.raises(ProofError, match="no cell"):
        matrix.check("unit")
    matrix.points.append("after fresh")
    for holder in authority.HOLDERS[:-1]:
        matrix.cell("model", holder, 0, "attempted")
    with pytest.raises(ProofError, match="model/outside/0"):
        matrix.check("unit")
    matrix.cell("model", "outside", 0, "not attemptable: why")
    matrix.check("unit")


def test_the_places_presented_from_a_sandbox_are_among_the_sweeps():
    assert set(authority.SANDBOX_PLACES) <= set(presented.PLACES)
    requests = presented.plan([presented.Artifact(OWNER, "model", "m1")], "pp", authority.SANDBOX_PLACES)
    assert {r.place for r in requests} == set(authority.SANDBOX_PLACES)
    assert len(requests) == len(authority.SANDBOX_PLACES) * len(presented.ROUTES)
