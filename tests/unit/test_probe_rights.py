"""Issue 27 item 7: a probe's proof names its rights (gid, groups, effective capabilities, no_new_privs,
seccomp), and a probe with fewer rights than the agent (its pid 1, as the host sees it) is refused."""

from __future__ import annotations

import pytest

from acceptance.errors import ProofError
from acceptance.harness import probes

NS = {n: f"{n}:[40265318{i}]" for i, n in enumerate(probes.PROOF_NAMESPACES)}
AGENT = {"gid": "1500", "groups": "1500", "cap": "0000000000000000", "nnp": "1", "seccomp": "2"}


def line(nonce: str = "n0nce", uid: int = 1500, **rights: str) -> str:
    fields = {**{"gid": "1500", "groups": "", "cap": "0000000000000000", "nnp": "1", "seccomp": "0"}, **rights}
    return " ".join([probes.PROOF_TAG, nonce, *NS.values(), f"uid={uid}", *(f"{k}={fields[k]}" for k in probes.RIGHTS)])


def test_a_probe_with_the_agents_rights_or_more_is_accepted():
    """Docker's probe by descriptor: the agent's gid, its gid as its only supplementary group (the same set of
    held groups), no filter where the agent has Docker's: not fewer rights."""
    proof = line()
    assert probes.verify_proof(proof, "n0nce", NS, 1500, AGENT) == proof
    assert probes.verify_proof(line(groups="1500,4"), "n0nce", NS, 1500, AGENT)


@pytest.mark.parametrize("rights,words", [
    ({"groups": ""}, "groups [999]"),  # the agent holds 999 (a --group-add), the probe does not
    ({"gid": "1501"}, "gid 1501"),
    ({"nnp": "1"}, "no_new_privs"),
    ({"seccomp": "2"}, "seccomp mode 2"),
    ({"cap": "0000000000000000"}, "capabilities 0x80000"),
])
def test_a_probe_with_fewer_rights_than_the_agent_is_refused(rights, words):
    agent = {**AGENT, "groups": "1500,999", "nnp": "0", "seccomp": "0", "cap": "0000000000080000"}
    probe = {"gid": "1500", "groups": "1500,999", "cap": "0000000000080000", "nnp": "0", "seccomp": "0", **rights}
    with pytest.raises(ProofError, match="fewer rights than the agent") as caught:
        probes.verify_proof(line(**probe), "n0nce", NS, 1500, agent)
    assert words in str(caught.value)


def test_a_proof_line_without_its_rights_is_refused():
    """The old line (namespaces and uid only) no longer proves anything: the rights are part of the proof."""
    old = " ".join([probes.PROOF_TAG, "n0nce", *NS.values(), "uid=1500"])
    with pytest.raises(ProofError):
        probes.verify_proof(old, "n0nce", NS, 1500, AGENT)
    with pytest.raises(ProofError, match="rights cannot be compared"):
        probes.verify_proof(line(cap=""), "n0nce", NS, 1500, AGENT)


def test_a_difference_that_settles_is_not_fewer_rights_and_one_that_lasts_is(monkeypatch):
    """bubblewrap's pid 1 shows no seccomp filter for a moment after its launcher reports it, then installs the
    one it was given: the probe is judged again against the agent's status read afresh, and only a difference
    that lasts is refused (here the "agent" is this process, read from /proc/self's pid)."""
    import os

    monkeypatch.setattr(probes, "RIGHTS_SETTLE", 0.2)
    now = probes.rights_on_host(os.getpid())
    stale = {**now, "groups": ",".join(filter(None, [now["groups"], "4242"]))}
    probes.judge_rights_settled(now, os.getpid(), stale)  # the fresh read has no 4242: settled
    fewer = {**now, "gid": str(int(now["gid"]) + 1)}
    with pytest.raises(ProofError, match="fewer rights"):
        probes.judge_rights_settled(fewer, os.getpid(), now)
