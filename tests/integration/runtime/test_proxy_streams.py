"""The model proxy on its own: purpose attribution, and streamed calls relayed, metered and cut off.

The proxy runs against the provider mock over real sockets (and, for a stream that carries no usage, a
tiny upstream of the test's own), with its own authority and record of what is current.


The part of tests/unit/test_proxy.py that the unit tier cannot hold: these wait on streams in flight, a second or more each."""

from __future__ import annotations

import http.client
import json
import time

import pytest

from acceptance.harness.lab.provider import ProviderMock
from runtime.authority.capabilities import Current, TokenAuthority
from runtime.model.proxy import ModelProxy

KEY = "sk-proxy-test"
USER = "org1:alice"


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


def test_a_stream_is_relayed_as_it_comes_not_when_it_ends(stack):
    proxy, provider, _, capability = stack
    provider.script(USER, [{"reply": "held", "delay": 1.5}])
    started = time.monotonic()
    conn, response = _open(proxy, capability, STREAM)
    first = response.readline()
    first_at = time.monotonic() - started
    rest = _events(response)
    conn.close()
    assert first.startswith(b"data: ") and first_at < 1.0  # before the provider's delay ended
    assert time.monotonic() - started >= 1.5 and rest[-1] == "[DONE]"


def test_the_kill_switch_stops_a_stream_in_flight_and_the_call_is_still_metered(stack):
    proxy, provider, current, capability = stack
    provider.script(USER, [{"reply": "the answer after revocation", "delay": 1.0}])
    conn, response = _open(proxy, capability, STREAM)
    first = response.readline()
    assert first.startswith(b"data: ")
    current.revoke("i1")
    events = _events(response)
    conn.close()
    text = "".join(c["delta"].get("content") or "" for e in events if isinstance(e, dict) for c in e.get("choices", []))
    assert "the answer after revocation" not in text and "after" not in text
    assert events and events[-1]["error"]["reason"] == "revoked" and "[DONE]" not in events
    deadline = time.monotonic() + 10
    while not proxy.ledger() and time.monotonic() < deadline:
        time.sleep(0.02)
    [row] = proxy.ledger()  # the provider spent it: metered from its usage, though withheld
    assert (row["status"], row["usage"]) == (200, "provider") and row["output_tokens"] > 0
