"""Streamed model calls through the whole platform: the agent's broker passes a stream through as it comes,
and a turn of the reference agent (which streams its conversation) is metered exactly."""

from __future__ import annotations

import http.client
import json
import os
import time
import urllib.request
from contextlib import ExitStack

import pytest

from acceptance.harness.lab.provider import ProviderMock
from runtime.authority.broker import AGENT_PORT
from runtime.controller import Controller
from runtime.isolation.netns import socket_in
from runtime.platform import Platform, PlatformConfig

KEY = "stream-test-provider-key"  # synthetic


@pytest.fixture
def stack(root):
    """(controller, provider mock): the platform's stack, with its upstream in reach of the test."""
    run = f"stream-{os.getpid()}"
    with ExitStack() as stack:
        provider = ProviderMock(KEY).start()
        stack.callback(provider.stop)
        (root / "runs" / run).mkdir(parents=True, exist_ok=True)
        platform = Platform(root / "runs" / run, PlatformConfig(provider.url, KEY)).start()
        stack.callback(platform.stop)
        controller = Controller(root, run, platform=platform)
        stack.callback(controller.close)
        yield controller, provider


def test_the_broker_passes_a_stream_through_as_it_comes(stack):
    c, provider = stack
    record = c.wake(c.provision("org1", "alice").id)
    provider.script("org1:alice", [{"reply": "a streamed answer held by the provider", "delay": 1.5}])
    conn = http.client.HTTPConnection("127.0.0.1", AGENT_PORT, timeout=30)
    sock = socket_in(c.sandbox(record.id).host_pid)  # where the agent reaches its broker
    sock.connect(("127.0.0.1", AGENT_PORT))
    conn.sock = sock
    started = time.monotonic()
    conn.request("POST", "/v1/chat/completions", json.dumps({
        "model": "reference-main", "messages": [{"role": "user", "content": "hi"}], "stream": True,
        "metadata": {"purpose": "turn"}}).encode(), {"Content-Type": "application/json", "x-api-key": "placeholder"})
    response = conn.getresponse()
    assert response.status == 200 and response.getheader("Transfer-Encoding") == "chunked"
    first = response.readline()
    first_at = time.monotonic() - started
    text, usage, done = [], None, False
    while line := response.readline():
        if line.startswith(b"data: "):
            data = line[6:].strip()
            if data == b"[DONE]":
                done = True
                continue
            chunk = json.loads(data)
            usage = chunk.get("usage") or usage
            text += [c["delta"].get("content") or "" for c in chunk["choices"]]
    conn.close()
    assert first.startswith(b"data: ") and first_at < 1.0  # the provider still held the rest
    assert time.monotonic() - started >= 1.5
    assert done and "".join(text) == "a streamed answer held by the provider"
    [row] = c.platform.proxy.ledger()
    [call] = provider.records()
    assert call["stream"] and usage == {"prompt_tokens": call["usage"]["input"], "completion_tokens": call["usage"]["output"],
                                        "total_tokens": call["usage"]["input"] + call["usage"]["output"]}
    assert (row["input_tokens"], row["output_tokens"], row["usage"]) == (call["usage"]["input"], call["usage"]["output"],
                                                                         "provider")


def test_a_streamed_turn_with_a_tool_call_is_metered_exactly(stack):
    c, provider = stack
    record = c.wake(c.provision("org1", "alice").id)
    provider.script("org1:alice", [{"tool": "notes_list", "arguments": {}}, {"reply": "you have no notes, streamed"}])
    reply = c.turn(record.id, "list my notes")
    assert reply == "you have no notes, streamed"
    calls = provider.records()
    assert [(r["purpose"], r["stream"]) for r in calls] == [("turn", True), ("turn", True), ("title", False),
                                                              ("memory_review", False)]
    ledger = c.platform.proxy.ledger()
    assert [(r["purpose"], r["status"], r["input_tokens"], r["output_tokens"], r["usage"]) for r in ledger] == [
        (r["purpose"], 200, r["usage"]["input"], r["usage"]["output"], "provider") for r in calls]


def test_a_turn_streaming_when_the_kill_switch_is_thrown_gets_no_more_of_the_answer(stack):
    """Revoked while the provider holds the rest of a streamed answer: the agent is told why (the proxy's error
    event reaches it through the broker) and none of the held text reaches it; the call is metered."""
    c, provider = stack
    record = c.wake(c.provision("org1", "alice").id)
    held = "the rest of this answer must never arrive"
    provider.script("org1:alice", [{"reply": held, "delay": 1.5}])
    broker = c.broker(record.id)
    request = urllib.request.Request(broker.runctl_url + "/v1/runs", json.dumps({"input": "hello"}).encode(),
                                     {"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        run = json.loads(response.read())["run_id"]
    deadline = time.monotonic() + 10
    while not provider.records():
        if time.monotonic() > deadline:
            raise TimeoutError("the run's model call never reached the provider")
        time.sleep(0.01)
    c.revoke(record.id)
    deadline = time.monotonic() + 20
    while True:
        with urllib.request.urlopen(broker.runctl_url + f"/v1/runs/{run}/events", timeout=30) as response:
            events = json.loads(response.read())["events"]
        replies = [e["content"] for e in events if e["type"] == "message"]
        if replies:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"the run never ended: {events}")
        time.sleep(0.05)
    assert replies == ["model unavailable: revoked"]
    transcript = (c.state / "instances" / record.id / "volume" / "transcript.jsonl").read_text()
    assert held not in transcript and "the rest" not in transcript
    deadline = time.monotonic() + 10
    while not c.platform.proxy.ledger() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert [(r["purpose"], r["status"], r["usage"]) for r in c.platform.proxy.ledger()] == [("turn", 200, "provider")]
