"""Every JSON-RPC request an agent sends to its broker's /mcp gets a JSON-RPC answer for its id over HTTP
200, also when the product gives none: an MCP client that meets an HTTP error instead (hermes-agent's, the
``mcp`` package's streamable HTTP client) waits out its own timeout for an answer that never comes. The
journal records what is known of an effect whatever the agent is answered."""

from __future__ import annotations

import http.server
import json
import socket
import threading

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


def _answer(status: int, body: dict | None) -> dict:
    return {"status": status, "body": body}


def test_an_existence_oracle_in_the_products_status_is_seen_by_tl5(broker):
    """The product answering an existing record it hides with an HTTP 403 and a missing one with a JSON-RPC
    error (both reason not_found_or_not_visible) tells the agent the record exists: the broker's answer for the
    403 carries the status in its error's data, over HTTP 200 as the other. TL-5's refusal compares the two
    answers whole (answer_differences), not by HTTP status and reason alone, which match here."""
    from acceptance.cases.judges.product_client import answer_differences
    from acceptance.cases.test_broker import reason

    class Upstream(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            hidden = request["params"]["arguments"]["id"] == 3
            status, body = ((403, {"error": {"reason": "not_found_or_not_visible", "message": "hidden"}}) if hidden else
                            (200, {"jsonrpc": "2.0", "id": request["id"], "error": {
                                "code": -32000, "message": "no such record for this caller",
                                "data": {"reason": "not_found_or_not_visible"}}}))
            raw = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    before = broker.set_product_upstream(f"http://127.0.0.1:{server.server_address[1]}")
    try:
        hidden = _answer(*broker.forward_mcp(_rpc(1, "notes_get", {"id": 3})))
        missing = _answer(*broker.forward_mcp(_rpc(1, "notes_get", {"id": 10**9})))
    finally:
        broker.set_product_upstream(before)
        server.shutdown()
        server.server_close()
    assert (hidden["status"], reason(hidden)) == (missing["status"], reason(missing)) == (200, "not_found_or_not_visible")
    assert answer_differences(hidden, missing) == {"body.error.data.status": (403, None),
                                                   "body.error.message": ("not_found_or_not_visible",
                                                                          "no such record for this caller")}


def test_the_products_own_answers_for_hidden_and_missing_records_are_the_same(platform_controller):
    """The reference product: another principal's note and a missing one get the same answer, field by field."""
    from acceptance.cases.judges.product_client import answer_differences

    c = platform_controller
    owner = c.broker(c.wake(c.provision("org1", "ann").id).id)
    other = c.broker(c.wake(c.provision("org1", "bob").id).id)
    note = owner.forward_mcp(_rpc(1, "notes_create", {"body": "ann's"}))[1]["result"]["structuredContent"]["id"]
    hidden = _answer(*other.forward_mcp(_rpc(1, "notes_get", {"id": note})))
    missing = _answer(*other.forward_mcp(_rpc(1, "notes_get", {"id": 10**9})))
    assert "error" in hidden["body"] and answer_differences(hidden, missing) == {}
