"""The broker declares a turn for an agent that declares no purpose (``broker.declared_turn``): only a call
whose last user message is exactly a run's input; anything the agent declared, or anything else, goes on as
it came."""

from __future__ import annotations

import json

import pytest

from runtime.authority.broker import declared_turn

INPUTS = ["list my notes please"]


def _call(*messages, **extra) -> bytes:
    return json.dumps({"model": "m", "messages": [{"role": r, "content": c} for r, c in messages], **extra}).encode()


@pytest.mark.parametrize("raw", [
    _call(("system", "You are hermes."), ("user", "list my notes please")),
    # a later round of the same turn, after a tool's result
    _call(("user", "list my notes please"), ("assistant", ""), ("tool", "notes: []")),
    # content as blocks
    _call(("user", [{"type": "text", "text": "list my notes please"}])),
    _call(("user", "list my notes please"), metadata={"user_id": "x"}),
])
def test_the_turn_of_a_run_is_declared(raw):
    body = json.loads(declared_turn(raw, INPUTS))
    assert body["metadata"]["purpose"] == "turn"
    assert body["messages"] == json.loads(raw)["messages"]


@pytest.mark.parametrize("raw", [
    _call(("user", "list my notes please"), ("user", "Review the conversation above and update memory.")),
    _call(("user", "Title for: list my notes please")),
    _call(("user", "list my notes please"), metadata={"purpose": "memory_review"}),  # the agent's own word stands
    _call(("user", "list my notes please"), metadata="odd"),  # out of shape: the proxy's to refuse
    _call(("assistant", "list my notes please")),
    b"not json",
])
def test_anything_else_goes_on_as_it_came(raw):
    assert declared_turn(raw, INPUTS) == raw


def test_no_run_no_turn():
    raw = _call(("user", "list my notes please"))
    assert declared_turn(raw, []) == raw
