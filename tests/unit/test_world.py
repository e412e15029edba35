"""WD-1's sweep record: what counts as a sighting of the owner's, and when a sweep did not look."""

from __future__ import annotations

import os
import socket

import pytest
from support.tokens import TEST_RUN

from acceptance.cases.judges import world
from acceptance.contract import Principal
from acceptance.errors import ProofError
from canaries import Mint

OWNER = Principal("A", "org1", "alice")
TOKEN = Mint(TEST_RUN).mint("a", "mem").token  # the run the scans look for (tests/conftest.py)


def facts(private=(7,)) -> world.OwnerFacts:
    return world.OwnerFacts(OWNER, frozenset({TOKEN}), frozenset(), frozenset(), frozenset(), (7, 8), ("run_1",),
                            private=frozenset(private))


def test_a_record_of_the_owners_is_a_sighting_only_if_it_is_private():
    """The owner's team record is the team's to see; its private record, or its canary anywhere, is not."""
    team = {"records": [{"id": 8, "org": "org1", "owner": "alice", "body": "x"}]}
    private = {"records": [{"id": 7, "org": "org1", "owner": "alice", "body": "x"}]}
    assert world._seen(team, facts()) == []
    assert world._seen(private, facts()) == ["private record 7"]
    assert world._seen({"note": f"kept {TOKEN.upper()}"}, facts()) == [TOKEN]


def test_a_channel_that_enumerated_nothing_did_not_look():
    record = world.WorldRecord()
    record.add("after wake", "B", {"fs": world.Channel("fs", "files", 3),
                                   "model": world.Channel("model", "provider records", 0)}, facts())
    with pytest.raises(ProofError, match="after wake: B/model"):
        record.check("WD-1")


def test_a_channel_not_applicable_to_the_observer_is_not_required():
    record = world.WorldRecord()
    record.add("fresh", "operator", {"fs": world.Channel("fs", "-", required=False),
                                     "routes": world.Channel("routes", "requests", 9)}, facts())
    record.check("WD-1")
    assert record.counts() == {"operator/fs": {"fresh": 0}, "operator/routes": {"fresh": 9}}


def test_sightings_name_point_observer_and_channel():
    record = world.WorldRecord()
    record.add("after restore", "B", {"fs": world.Channel("fs", "files", 3, found=[TOKEN])}, facts())
    assert record.sightings() == [f"after restore: B/fs: {TOKEN}"]


def test_a_route_template_is_filled_with_the_record_id():
    assert world.concrete(r"/api/records/(\d+)/children", "42") == "/api/records/42/children"


def test_the_sockets_of_a_network_namespace_are_listed_by_inode():
    """A socket this process holds is in its own namespace's table, under the inode its descriptor names."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        inode = os.fstat(s.fileno()).st_ino
        assert inode in world.netns_sockets(os.getpid())
        assert inode in world._held_sockets([os.getpid()])


RESULT = '{"id": 7, "org": "org1", "owner": "alice", "body": "x"}'


def test_tool_results_are_read_from_the_requests_an_agent_made():
    """The result of each tool call, as the agent passed it on to its model (OpenAI's tool messages, Anthropic's
    tool_result blocks), once each."""
    records = [{"body": {"messages": [{"role": "user", "content": "hi"},
                                      {"role": "tool", "tool_call_id": "1", "content": RESULT}]}},
               {"body": {"messages": [{"role": "tool", "tool_call_id": "1", "content": RESULT},
                                      {"role": "user", "content": [{"type": "tool_result", "content": "no"}]}]}},
               {"seq": 3}]
    results = world.tool_results(records)
    assert len(results) == 2 and results[1] == '"no"'
    assert world._seen(world._parsed(results[0]), facts()) == ["private record 7"]
