"""The platform records the request id of every request it decides, and sends it on with the calls it
makes for that request: what a platform-side probe's proof is taken from (issue 12, finding 11)."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request

from runtime.authority import requestid


def _log(controller) -> str:
    for handler in logging.getLogger("pairproof").handlers:
        handler.flush()
    return controller.platform.log_path.read_text()


def _post(url: str, body: dict, headers: dict[str, str]) -> int:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_a_refused_request_is_logged_with_its_id_and_decision(platform_controller):
    status = _post(platform_controller.platform.proxy.url + "/v1/chat/completions", {"messages": []},
                   {"Authorization": "Bearer not-a-capability", requestid.HEADER: "pp-refused-1"})
    assert status == 403
    [line] = [line for line in _log(platform_controller).splitlines() if "answered" in line and "pp-refused-1" in line]
    assert "model proxy answered POST 403 malformed" in line


def test_a_malformed_id_is_not_written_to_the_log(platform_controller):
    """The id lands in the log: only well-formed ones are taken, never arbitrary text."""
    _post(platform_controller.platform.proxy.url + "/v1/chat/completions", {"messages": []},
          {"Authorization": "Bearer x", requestid.HEADER: "pp bad id\twith spaces"})
    log = _log(platform_controller)
    assert "bad id" not in log and "answered POST 403" not in log


def test_a_turns_id_reaches_the_providers_record(platform_controller):
    """A turn under a request id: every model call it makes (turn, title, memory review) reaches the
    provider carrying it, through the agent, the broker and the proxy."""
    record = platform_controller.provision("org1", "ida")
    platform_controller.wake(record.id)
    provider_url = platform_controller.platform.proxy.provider_url
    with requestid.bound("pp-turn-7"):
        platform_controller.turn(record.id, "hello")
    with urllib.request.urlopen(provider_url + "/_control/records", timeout=30) as response:
        records = json.loads(response.read())["records"]
    assert {r["purpose"] for r in records if r["request_id"] == "pp-turn-7"} == {"turn", "title", "memory_review"}


def test_a_controller_operation_is_logged_with_its_id(platform_controller):
    with requestid.bound("pp-provision-1"):
        platform_controller.provision("org1", "ivy")
    assert "[pp-provision-1] provision org1 ivy done" in _log(platform_controller)
