"""A platform-side probe proves it ran only by what the platform recorded of it (issue 12, finding 11).

The old ``ProbeLog.witness(subject, what, evidence)`` made a proof from any text the test handed it, so a
refusal "proved" it ran whether or not its request ever reached the platform. These tests pin the
replacement: a fresh id per probe, and proof only from a platform record that names that id.
"""

from __future__ import annotations

import pytest

from acceptance.contract import InstanceRef, Principal
from acceptance.errors import ProofError
from acceptance.harness.probes import ProbeLog

ALICE = InstanceRef(Principal("A", "org1", "alice"), "org1-alice-0", 1)
PLATFORM_LOG = """\
2026-12-01 00:01:09,832 pairproof.broker WARNING [pp-0000000000000001] broker org1-alice-0 refused GET /v1/jobs: route_not_allowed
2026-12-01 00:01:09,833 pairproof.proxy WARNING [-] refused model call: generation_stale
"""


def test_the_hollow_witness_is_gone():
    """Nothing on a ProbeLog turns the test's own words into a proof any more."""
    assert not hasattr(ProbeLog(nonce="n"), "witness")


def test_a_probe_whose_id_the_platform_never_recorded_has_no_proof():
    """The platform's log holds a refusal of *some* model call (as the old witness looked for), but not one
    naming this probe's id: that is no proof that this probe reached the platform."""
    log = ProbeLog(nonce="n")
    nonce = log.platform_probe(ALICE, "model call with a replayed capability")
    with pytest.raises(ProofError, match="no record of the probe"):
        log.confirm(nonce, PLATFORM_LOG)
    assert [r.proof for r in log.records if r.proof] == []


def test_a_probe_never_confirmed_leaves_no_proof():
    log = ProbeLog(nonce="n")
    log.platform_probe(ALICE, "GET /v1/jobs")
    assert [r.proof for r in log.records if r.proof] == []


def test_the_platforms_line_naming_the_id_is_the_proof():
    log = ProbeLog(nonce="n")
    nonce = log.platform_probe(ALICE, "GET /v1/jobs")
    record = PLATFORM_LOG + f"2026-12-01 00:01:10,000 pairproof.requests INFO [{nonce}] broker answered GET 403\n"
    line = log.confirm(nonce, record)
    assert line.endswith("broker answered GET 403") and nonce in line
    assert [r.proof for r in log.records] == [f"platform org1-alice-0: {line}"]


def test_ids_are_fresh_and_confirmed_once():
    log = ProbeLog(nonce="n")
    first, second = log.platform_probe(ALICE, "one"), log.platform_probe(Principal("M", "org3", "mona"), "two")
    assert first != second and first.startswith("pp-") and len(first) == 19
    log.confirm(first, f"[{first}] answered")
    with pytest.raises(ProofError, match="not an unconfirmed platform probe"):
        log.confirm(first, f"[{first}] answered")


def test_an_id_the_test_made_up_proves_nothing():
    """Only ids given out by platform_probe count: a test cannot name an id it wrote into the record itself."""
    log = ProbeLog(nonce="n")
    with pytest.raises(ProofError, match="not an unconfirmed platform probe"):
        log.confirm("pp-made-up", "[pp-made-up] answered")


def test_the_bare_id_is_not_a_record():
    """A 'record' that is only the id (the test echoing it back) is not something the platform wrote."""
    log = ProbeLog(nonce="n")
    nonce = log.platform_probe(ALICE, "echo")
    with pytest.raises(ProofError):
        log.confirm(nonce, nonce)


def test_text_the_test_wrote_is_not_the_platforms_record():
    """Review of issue 12: ``confirm`` took whatever text the test handed in; a case could hand in words of
    its own that name the id. With the target's records at hand, the id must be in them too."""
    log = ProbeLog(nonce="n", platform_record=lambda: "INFO [pp-other] answered 403")
    nonce = log.platform_probe(Principal("A", "org1", "alice"), "a request")
    with pytest.raises(ProofError, match="not the platform's"):
        log.confirm(nonce, f"INFO [{nonce}] answered 403")
    assert log.records == []
    recorded = ProbeLog(nonce="n")
    nonce = recorded.platform_probe(Principal("A", "org1", "alice"), "a request")
    recorded.platform_record = lambda: f"INFO [{nonce}] answered 403"
    assert recorded.confirm(nonce, f"INFO [{nonce}] answered 403")
