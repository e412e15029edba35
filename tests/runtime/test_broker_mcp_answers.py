"""Every JSON-RPC request an agent sends to its broker's /mcp gets a JSON-RPC answer for its id over HTTP
200, also when the product gives none: an MCP client that meets an HTTP error instead (hermes-agent's, the
``mcp`` package's streamable HTTP client) waits out its own timeout for an answer that never comes. The
journal records what is known of an effect whatever the agent is answered."""

from __future__ import annotations

import json
import socket

import pytest


def _rpc(rid: int, name: str, arguments: dict) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                       "params": {"name": name, "arguments": arguments}}).encode()


@pytest.fixture
def broker(platform_controller):
    c = platform_controller
    record = c.wake(c.provision("org1", "mia").id)
    return c.broker(record.id)


@pytest.fixture
def closed_port():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))  # bound, never listening: a connection is refused at once
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()


def test_an_answered_call_passes_through(broker):
    status, answer = broker.forward_mcp(_rpc(1, "notes_list", {}))
    assert status == 200 and answer["id"] == 1 and "result" in answer


@pytest.mark.parametrize("tool, arguments, reason", [
    ("notes_list", {}, "upstream_unreachable"),  # no effect: not journaled
    ("notes_create", {"body": "never sent"}, "not_dispatched"),  # an effect: journaled, and not sent
])
def test_an_unreachable_product_is_a_json_rpc_error_for_the_request(broker, closed_port, tool, arguments, reason):
    before = broker.set_product_upstream(closed_port)
    try:
        status, answer = broker.forward_mcp(_rpc(7, tool, arguments))
    finally:
        broker.set_product_upstream(before)
    assert status == 200
    assert answer["jsonrpc"] == "2.0" and answer["id"] == 7 and "result" not in answer
    assert answer["error"]["message"] == reason and answer["error"]["data"] == {"status": 502, "reason": reason}
    if tool == "notes_create":
        [op] = [o for o in broker.journal.ops() if o["request"]["params"]["arguments"] == arguments]
        assert op["state"] == "not_dispatched"


def test_a_refused_grant_is_a_json_rpc_error_naming_the_products_status(broker):
    broker.rotate(grant="not-a-grant")
    status, answer = broker.forward_mcp(_rpc(9, "notes_list", {}))
    assert status == 200 and answer["id"] == 9
    assert answer["error"]["data"]["status"] in (401, 403) and answer["error"]["message"]
