"""The model proxy on its own: purpose attribution, and streamed calls relayed, metered and cut off.

The proxy runs against the provider mock over real sockets (and, for a stream that carries no usage, a
tiny upstream of the test's own), with its own authority and record of what is current.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from acceptance.harness.lab.provider import ProviderMock
from runtime.authority.capabilities import Current, TokenAuthority
from runtime.model.proxy import UNATTRIBUTED, ModelProxy, attribute

KEY = "sk-proxy-test"
USER = "org1:alice"


# -- purpose: declared, recognised by shape, or unattributed -------------------------------------------

def _body(*messages: tuple[str, str], tools: list[str] = (), **extra) -> dict:
    body = {"model": "m", "messages": [{"role": r, "content": c} for r, c in messages], **extra}
    if tools:
        body["tools"] = [{"type": "function", "function": {"name": t, "parameters": {}}} for t in tools]
    return body


@pytest.mark.parametrize("purpose", ["turn", "title", "memory_review"])
def test_a_declared_known_purpose_is_used_whatever_the_shape(purpose):
    assert attribute(_body(("user", "Title for: hello"), metadata={"purpose": purpose})) == purpose
    assert attribute(_body(("user", "anything"), tools=["shell"], metadata={"purpose": purpose})) == purpose


@pytest.mark.parametrize("body", [
    _body(("user", "Title for: what notes do I have?")),
    _body(("system", "Generate a short, descriptive title for this conversation."), ("user", "hi there")),
    _body(("user", "Please suggest a concise title for the chat below:\n...")),
    _body(("user", "what would be a good title for this conversation")),
    # Anthropic style: the instruction in the top-level system, content as blocks
    {"model": "m", "system": "Write a title of at most six words.",
     "messages": [{"role": "user", "content": [{"type": "text", "text": "we talked about gardening"}]}]},
])
def test_a_title_request_is_recognised_when_none_is_declared(body):
    assert attribute(body) == "title"


@pytest.mark.parametrize("body", [
    _body(("user", "Review memory after this turn.")),
    _body(("system", "Consolidate the user's memories: merge duplicates."), ("user", "- likes tea\n- likes tea")),
    _body(("user", "Update the memory file with what matters from this session."), tools=["memory_write"]),
    _body(("user", "memory review, please")),
])
def test_a_memory_review_is_recognised_when_none_is_declared(body):
    assert attribute(body) == "memory_review"


@pytest.mark.parametrize("body", [
    _body(("system", "You are the user's personal agent."), ("user", "list my notes"), tools=["notes_list"]),
    _body(("user", "hello")),
    _body(("user", "Title for: a chat"), tools=["shell"]),  # offers tools: not a title request
    _body(("user", "Review memory after this turn."), tools=["shell", "memory_write"]),  # not only memory tools
    _body(("user", "Generate a title, then review memory.")),  # both: ambiguous
    _body(("user", "Title for: x"), metadata={"purpose": "bookkeeping"}),  # an unknown declaration is no declaration...
    _body(("user", "hi"), metadata={"purpose": "other"}),
    {"model": "m"},
])
def test_anything_else_is_unattributed_never_the_turn(body):
    expected = "title" if body.get("metadata", {}).get("purpose") == "bookkeeping" else UNATTRIBUTED  # ...shape decides
    assert attribute(body) == expected


# -- the proxy over sockets ----------------------------------------------------------------------------

@pytest.fixture
def stack(tmp_path):
    models, current = TokenAuthority("model"), Current()
    with ProviderMock(KEY) as provider:
        proxy = ModelProxy(provider_url=provider.url, provider_key=KEY, authority=models, current=current,
                           ledger_path=tmp_path / "ledger.sqlite").start()
        current.admit("i1", 1, "lease", time.time() + 600)
        capability = models.issue("i1", "org1", "alice", 1, "lease", ttl=600)
        try:
            yield proxy, provider, current, capability
        finally:
            proxy.stop()


def _open(proxy: ModelProxy, capability: str, body: dict) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    host, port = proxy.url.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request("POST", "/v1/chat/completions", json.dumps(body).encode(),
                 {"Content-Type": "application/json", "Authorization": f"Bearer {capability}"})
    return conn, conn.getresponse()


def _events(response: http.client.HTTPResponse) -> list:
    out = []
    while line := response.readline():
        if line.startswith(b"data: "):
            data = line[6:].strip()
            out.append("[DONE]" if data == b"[DONE]" else json.loads(data))
    return out


STREAM = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True, "metadata": {"purpose": "turn"}}


def test_a_stream_is_relayed_and_metered_from_its_usage_chunk_exactly(stack):
    proxy, provider, _, capability = stack
    provider.script(USER, [{"tool": "notes_list", "arguments": {"tag": "long enough to fragment"}}])
    conn, response = _open(proxy, capability, STREAM)  # the caller did not ask for usage: the proxy did
    events = _events(response)
    conn.close()
    assert response.status == 200 and response.getheader("Content-Type") == "text/event-stream"
    assert events[-1] == "[DONE]" and events[-2]["usage"]["completion_tokens"] > 0
    arguments = "".join(tc["function"].get("arguments", "") for e in events[:-1] for c in e["choices"]
                        for tc in c["delta"].get("tool_calls") or [])
    assert json.loads(arguments) == {"tag": "long enough to fragment"}
    [record] = provider.records()
    [row] = proxy.ledger()
    assert record["stream"] is True and record["purpose"] == "turn"
    assert (row["purpose"], row["status"], row["usage"]) == ("turn", 200, "provider")
    assert (row["input_tokens"], row["output_tokens"]) == (record["usage"]["input"], record["usage"]["output"])


def test_a_revoked_instance_streams_nothing_and_the_provider_is_not_called(stack):
    proxy, provider, current, capability = stack
    current.revoke("i1")
    conn, response = _open(proxy, capability, STREAM)
    body = json.loads(response.read())
    conn.close()
    assert (response.status, body["error"]["reason"]) == (403, "revoked") and provider.records() == []


def test_the_spend_cap_holds_for_streams(stack):
    proxy, provider, _, capability = stack
    proxy.set_cap("org1", "alice", 1e-9)
    conn, response = _open(proxy, capability, STREAM)  # admitted: nothing spent yet
    _events(response)
    conn.close()
    conn, response = _open(proxy, capability, STREAM)
    body = json.loads(response.read())
    conn.close()
    assert (response.status, body["error"]["reason"]) == (429, "spend_exhausted")
    assert len(provider.records()) == 1


def test_an_undeclared_call_is_metered_and_forwarded_under_its_attributed_purpose(stack):
    proxy, provider, _, capability = stack
    for content in ("Title for: hello", "what is the weather"):
        conn, response = _open(proxy, capability, {"model": "m", "messages": [{"role": "user", "content": content}]})
        response.read()
        conn.close()
    assert [r["purpose"] for r in proxy.ledger()] == ["title", UNATTRIBUTED]
    assert [r["purpose"] for r in provider.records()] == ["title", UNATTRIBUTED]


class _NoUsageUpstream(BaseHTTPRequestHandler):
    """A provider that streams without a usage chunk, whatever it is asked, and optionally cuts off."""

    cut = False

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for piece in ("twelve chars", " and more"):
            chunk = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": piece}}]}
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        if not self.cut:
            self.wfile.write(b"data: [DONE]\n\n")


@pytest.mark.parametrize("cut", [False, True])
def test_a_stream_without_usage_is_metered_estimated_never_dropped(tmp_path, cut):
    handler = type("Upstream", (_NoUsageUpstream,), {"cut": cut})
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    models, current = TokenAuthority("model"), Current()
    proxy = ModelProxy(provider_url=f"http://127.0.0.1:{upstream.server_address[1]}", provider_key=KEY,
                       authority=models, current=current, ledger_path=tmp_path / "ledger.sqlite").start()
    try:
        current.admit("i1", 1, "lease", time.time() + 600)
        conn, response = _open(proxy, models.issue("i1", "org1", "alice", 1, "lease", ttl=600), STREAM)
        events = _events(response)
        conn.close()
        assert [e["choices"][0]["delta"]["content"] for e in events if isinstance(e, dict)] == ["twelve chars", " and more"]
        [row] = proxy.ledger()
        # "twelve chars and more" is 21 characters: 6 tokens at four a token; the prompt, its messages' JSON
        assert (row["status"], row["usage"], row["output_tokens"]) == (200, "estimated", 6)
        assert row["input_tokens"] > 0 and row["cost"] > 0
        assert proxy.counts() == {("org1", "alice", "turn"): 1}
    finally:
        proxy.stop()
        upstream.shutdown()
        upstream.server_close()


def test_an_anthropic_stream_is_metered_from_its_start_and_delta_usage(stack):
    proxy, provider, _, capability = stack
    provider.script(USER, [{"reply": "an answer in the messages style"}])
    host, port = proxy.url.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request("POST", "/v1/messages", json.dumps({
        "model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}], "stream": True,
        "metadata": {"purpose": "turn"}}).encode(), {"Content-Type": "application/json", "Authorization": f"Bearer {capability}"})
    response = conn.getresponse()
    events = _events(response)
    conn.close()
    assert response.status == 200 and [e["type"] for e in events][-1] == "message_stop"
    assert "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta") == "an answer in the messages style"
    [record] = provider.records()
    [row] = proxy.ledger()
    assert (record["style"], record["stream"]) == ("anthropic", True)
    assert (row["style"], row["usage"], row["input_tokens"], row["output_tokens"]) == (
        "anthropic", "provider", record["usage"]["input"], record["usage"]["output"])
