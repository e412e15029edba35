"""WD-1: nothing of A's in anything B, C or the operator's people's API can observe, after every transition of A.

The sweep (``judges/world.py``) reads each observer's whole world (filesystem, processes, sockets, every route
x method x record id of the product and run-control APIs, listings, every model request as the provider
recorded it) after each point of A's lifecycle walk (``harness/transitions.py``: fresh, sleep, wake, freeze,
thaw, recreate, restore, rotate, crash, recover, revoke), and compares it with what A owns at that point.

The instances are dedicated (org3 for A and B, org4 for C), not the session's: the walk ends with A revoked,
which leaves no A for the cases after it, and B and C make a turn at each point, whose records are theirs.

Class this case is the fix for (issue 26): *a canary of A's reaches something an intruder can observe only after
a transition* (a restore's staging folder left where B reads, an old generation's files parked in a shared
folder, a proxy that warms B's requests with A's history after A wakes, a recovery that copies A's journal to a
shared place). A fresh-instance scan (FS-1, PR-1, NT-3, OP-*) cannot see any of them.

Ways it could still miss: A's data in a form that is not canary-shaped; a world channel the contract does not
expose (the agent door's tools are judged by TL-*, the operator's own routes by OP-1/OP-2).
"""

from __future__ import annotations

import time

import pytest

from acceptance.cases.judges import world
from acceptance.cases.judges.product_client import drive
from acceptance.contract import LOCATIONS, Principal
from acceptance.harness.evidence import attach
from acceptance.harness.transitions import Walk, walk
from canaries import Mint, detect

# A turn for A and for each observer at every point of the walk: with an agent whose prompts are large (hermes),
# the platform's default allowance runs out mid-walk and the observer's turn never reaches the provider
# (spend_exhausted, seen on hermes). The caps themselves are judged on users of their own (MD-3).
WORLD_SPEND_USD = 100.0
LOCATION_CODES = {"memory": "mem", "transcript": "tr", "task": "task", "volume": "vol"}


def _owner(target, agent_profile, dedicated) -> tuple[object, dict[str, str], list[str]]:
    """A dedicated A with its canaries in every location, a note, a held approval card and a run of its own:
    (its ref, {where: canary}, its run ids)."""
    mint = Mint(detect.run_in_use())  # the judge's scans look for the session's run
    tokens = {where: mint.mint("a", code).token for where, code in
              {**LOCATION_CODES, "note": "note", "card": "card", "run": "run", "turn": "turn"}.items()}
    a = dedicated("WA", "wanda", org="org3")
    target.set_spend_cap(a.principal, WORLD_SPEND_USD)
    principal = a.principal
    for location in LOCATIONS:
        target.plant(a, location, tokens[location])
    status, issue = target.person(principal).request("POST", "/api/issues", {"title": "wd", "body": "team issue"})
    assert status == 200, f"A could not open a team issue: {status} {issue}"
    drive(target, agent_profile, principal, a, [("notes_create", {"body": tokens["note"]}),
                                                ("issue_comment", {"issue_id": issue["id"], "body": tokens["card"]})])
    target.script_model(principal, [{"reply": "ran"}])
    status, run = target.runctl(a, "POST", "/v1/runs", {"input": f"keep {tokens['run']}"})
    assert status == 202, f"A could not start a run: {status} {run}"
    return a, tokens, [run["run_id"]]


def _observer_turn(target, agent_profile):
    """The observer's turn at a point: its agent reads each of the owner's record ids with the product's read
    tools, through its own broker, each pair of refusals followed by a listing (an agent may stop calling a
    tool server after a few failures in a row), then replies. Returns how many tool calls it was given."""
    def turn(observer, owner) -> int:
        calls = [("notes_list", {}), ("issues_list", {})]
        for record in owner.records:
            calls += [("notes_get", {"id": record}), ("issue_get", {"id": record}), ("notes_list", {})]
        drive(target, agent_profile, observer.principal, observer.ref, calls, reply="observed")
        return len(calls)
    return turn


def _scanner(target, sandbox_host, scan_visible, probe_log):
    def scan(ref):
        tokens = scan_visible(sandbox_host(ref))
        files = next(e["files"] for e in reversed(probe_log.evidence) if e["kind"] == "scan")
        return tokens, files
    return scan


@pytest.mark.case("WD-1", "refusal", pair="A->B,C,OP")
def test_wd1_nothing_of_a_in_any_observers_world_after_each_transition(agent_profile, dedicated, target, sandbox_host,
                                                                      scan_visible, probe_log):
    """At every point of A's walk, after A's own turn there (while it serves), B (same org), C (another org) and
    the operator's people's-API client observe their whole world: none of A's canaries, processes, sockets,
    socket files or private records is in any channel, the answers their agents' tools got for A's record ids
    among them. Every channel must have enumerated something (ProofError)."""
    started = time.monotonic()
    a, tokens, runs = _owner(target, agent_profile, dedicated)
    b, c = dedicated("WB", "wes", org="org3"), dedicated("WC", "cyd", org="org4")
    for ref in (b, c):
        target.set_spend_cap(ref.principal, WORLD_SPEND_USD)
    observers = [world.Observer("B", b.principal, b, target.person(b.principal)),
                 world.Observer("C", c.principal, c, target.person(c.principal)),
                 world.Observer("operator", None, None, target.operator("wd-observer"))]
    scan, turn = _scanner(target, sandbox_host, scan_visible, probe_log), _observer_turn(target, agent_profile)
    record, walked, private = world.WorldRecord(), Walk(), frozenset()
    for point in walk(target, a, walked):
        if point.serving:  # A's activity at this point: its canary in its own model history
            target.script_model(a.principal, [{"reply": "kept"}])
            target.turn(point.ref, f"remember {tokens['turn']}")
        owner = world.owner_facts(target, point.ref, tokens.values(), runs, private)
        private = owner.private
        for observer in observers:
            record.add(str(point), observer.name, world.observe(target, observer, owner, scan, turn), owner)
    attach("WD-1 world sweep", {"walk": walked.record, "counts": record.counts(), "views": record.views,
                                "seconds": round(time.monotonic() - started, 1)})
    probe_log.note("world sweep", points=len(walked.points), views=len(record.views), counts=record.counts(),
                   seconds=round(time.monotonic() - started, 1))
    walked.check("WD-1")
    assert record.sightings() == []
    record.check("WD-1")


@pytest.mark.case("WD-1", "P", pair="A->A")
def test_wd1_owner_sees_its_own_world(agent_profile, dedicated, target, sandbox_host, scan_visible, probe_log):
    """A observing its own world the same way finds its own things in every channel: its canaries in its files,
    its model requests, its records' answers and listings, its own tools' results for its record ids; its
    processes and sockets as its own."""
    a, tokens, runs = _owner(target, agent_profile, dedicated)
    target.script_model(a.principal, [{"reply": "kept"}])
    target.turn(a, f"remember {tokens['turn']}")
    owner = world.owner_facts(target, a, tokens.values(), runs)
    me = world.Observer("A", a.principal, a, target.person(a.principal))
    channels = world.observe(target, me, owner, _scanner(target, sandbox_host, scan_visible, probe_log),
                             _observer_turn(target, agent_profile))
    record = world.WorldRecord()
    record.add("fresh", "A (owner)", channels, owner)
    attach("WD-1 P: the owner's own world", {"views": record.views})
    record.check("WD-1 P")
    assert {name for name, c in channels.items() if not c.found} == set()
    assert {tokens[location] for location in LOCATIONS} <= {f for f in channels["fs"].found}


@pytest.mark.case("WD-1", "X", pair="B->A")
def test_wd1_broken_shared_volume_is_seen(agent_profile, dedicated, target, sandbox_host, scan_visible, probe_log):
    """With A's volume mounted into an intruder's sandbox, the same sweep of the intruder's world finds A's
    canaries there."""
    a, tokens, runs = _owner(target, agent_profile, dedicated)
    owner = world.owner_facts(target, a, tokens.values(), runs)
    with target.broken_shared_volume(owner=a, intruder=Principal("WX", "org3", "xena")) as leaky:
        intruder = world.Observer("X", leaky.principal, leaky, target.person(leaky.principal))
        channels = world.observe(target, intruder, owner, _scanner(target, sandbox_host, scan_visible, probe_log),
                                 _observer_turn(target, agent_profile), only=("fs", "processes", "sockets"))
    record = world.WorldRecord()
    record.add("fresh", "X (shared volume)", channels, owner)
    attach("WD-1 X: a shared volume", {"views": record.views})
    assert {tokens[location] for location in LOCATIONS} <= set(channels["fs"].found)
