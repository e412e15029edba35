"""NT-4, TL-1..TL-5: the broker is each instance's only way out, and it forwards only what it must."""

from __future__ import annotations

import json

import pytest

from acceptance.cases.judges import netprobes, shapes
from acceptance.cases.judges.product_client import answer_differences, drive, reason_of, with_request_id
from acceptance.errors import ProofError
from acceptance.harness.evidence import attach
from acceptance.harness.wait import until
from canaries.known import find_known

pytestmark = pytest.mark.usefixtures("planted")


def rpc(method: str, params: dict | None = None, rid: int = 1) -> dict:
    request = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        request["params"] = params
    return request


def reason(answer: dict) -> str:
    body = answer.get("body") or {}
    if "error" in body:
        err = body["error"]
        return (err.get("data") or {}).get("reason") or err.get("reason", "")
    return ""


def tool_result(answer: dict) -> dict:
    return answer["body"]["result"]["structuredContent"]


# -- NT-4: not an open relay --------------------------------------------------------------------------

RELAY_ATTEMPTS = {
    "absolute-uri": (b"GET http://198.51.100.7/ HTTP/1.1\r\nHost: 198.51.100.7\r\nConnection: close\r\n\r\n",
                     "absolute_uri_refused"),
    "connect": (b"CONNECT 198.51.100.7:443 HTTP/1.1\r\nHost: 198.51.100.7:443\r\nConnection: close\r\n\r\n",
                "connect_refused"),
    "url-parameter": (b"GET /fetch?url=http://198.51.100.7/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                      "route_not_allowed"),
    "other-path": (b"POST /v1/proxy HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
                   "route_not_allowed"),
}


@pytest.mark.case("NT-4", "refusal", pair="A->outside")
@pytest.mark.parametrize("attempt", sorted(RELAY_ATTEMPTS))
def test_nt4_broker_is_not_an_open_relay(attempt, instances, broker_call, target):
    """Asking the broker to fetch a URL, tunnel, or serve any other path is refused with a reason, and
    the refusal is logged (the address is a documentation range: nothing is ever sent to it)."""
    payload, expected = RELAY_ATTEMPTS[attempt]
    answer = broker_call(instances["A"], raw=payload)
    assert answer["status"] in (400, 404, 405)
    assert ((answer.get("body") or {}).get("error") or {}).get("reason") == expected
    assert expected in {r for _, r in target.broker_refusals(instances["A"])}


@pytest.mark.case("NT-4", "P", pair="A->product")
def test_nt4_permitted_route_works(instances, broker_call):
    answer = broker_call(instances["A"], "POST", "/mcp", rpc("tools/list"))
    assert answer["status"] == 200 and "tools" in answer["body"]["result"]


# -- TL-1: methods -------------------------------------------------------------------------------------

REFUSED_METHODS = {
    "resources/read": (rpc("resources/read", {"uri": "file:///data/memory.md"}), "resources_not_offered"),
    "prompts/get": (rpc("prompts/get", {"name": "x"}), "prompts_not_offered"),
    "batch": ([rpc("tools/list"), rpc("tools/list", rid=2)], "batch_refused"),
    "case-variant": (rpc("Tools/List"), "method_not_allowed"),
    "sampling": (rpc("sampling/createMessage", {"messages": []}), "method_not_allowed"),
    "unknown": (rpc("admin/shell", {"cmd": "id"}), "method_not_allowed"),
}


@pytest.mark.case("TL-1", "refusal", pair="A->product")
@pytest.mark.parametrize("attempt", sorted(REFUSED_METHODS))
def test_tl1_only_allowlisted_methods(attempt, instances, broker_call):
    """Methods outside the allowlist get an explicit JSON-RPC error with the reason; resources, prompts
    and batches are answered by the broker itself, never forwarded."""
    request, expected = REFUSED_METHODS[attempt]
    answer = broker_call(instances["A"], "POST", "/mcp", request)
    assert answer["status"] == 200
    assert reason(answer) == expected


@pytest.mark.case("TL-1", "refusal", pair="A->product")
def test_tl1_resource_and_prompt_listings_are_empty_and_notifications_dropped(instances, broker_call):
    assert broker_call(instances["A"], "POST", "/mcp", rpc("resources/list"))["body"]["result"] == {"resources": []}
    assert broker_call(instances["A"], "POST", "/mcp", rpc("prompts/list"))["body"]["result"] == {"prompts": []}
    dropped = broker_call(instances["A"], "POST", "/mcp", {"jsonrpc": "2.0", "method": "notifications/cancelled"})
    assert dropped["status"] == 202 and dropped["body"] is None


@pytest.mark.case("TL-1", "P", pair="A->product")
def test_tl1_allowed_method_works(instances, broker_call):
    answer = broker_call(instances["A"], "POST", "/mcp", rpc("ping"))
    assert answer["status"] == 200 and answer["body"]["result"] == {}


# -- TL-2: exact names, checked arguments ---------------------------------------------------------------

NAME_TRICKS = ["Notes_create", "NOTES_CREATE", "notes_create ", " notes_create", "notes_create\u200d",
               "notes_creat", "notes_create_v2", "n\u043etes_create", "ｎｏｔｅｓ＿ｃｒｅａｔｅ"]
# None: no arguments member at all (MCP allows it): judged against the pin as {}, never left unchecked.
ARGUMENT_TRICKS = [{"body": 5}, {"body": "x", "owner": "bob"}, {}, {"body": ["x"]}, {"body": "x" * 10001}, None]


@pytest.mark.case("TL-2", "refusal", pair="A->product")
@pytest.mark.parametrize("name", NAME_TRICKS, ids=[n.encode("unicode_escape").decode() for n in NAME_TRICKS])
def test_tl2_tool_names_are_exact(name, instances, broker_call):
    answer = broker_call(instances["A"], "POST", "/mcp", rpc("tools/call", {"name": name, "arguments": {"body": "x"}}))
    assert reason(answer) == "tool_not_pinned"


@pytest.mark.case("TL-2", "refusal", pair="A->product")
@pytest.mark.parametrize("arguments", ARGUMENT_TRICKS, ids=["int", "extra-key", "missing", "list", "too-long", "absent"])
def test_tl2_arguments_are_schema_checked(arguments, instances, broker_call):
    params = {"name": "notes_create"} if arguments is None else {"name": "notes_create", "arguments": arguments}
    answer = broker_call(instances["A"], "POST", "/mcp", rpc("tools/call", params))
    assert reason(answer) == "arguments_invalid"


@pytest.mark.case("TL-2", "P", pair="A->product")
def test_tl2_valid_call_works(instances, broker_call):
    answer = broker_call(instances["A"], "POST", "/mcp", rpc("tools/call", {"name": "notes_create", "arguments": {"body": "ok"}}))
    assert answer["status"] == 200 and tool_result(answer)["id"] >= 1


# -- TL-1/TL-2: every request shape the protocol allows, judged at the product --------------------------

@pytest.mark.case("TL-1", "refusal", pair="A->product")
def test_tl1_every_shape_but_a_bare_request_is_answered_by_the_broker(instances, broker_call, target, principals,
                                                                      pairproof_run):
    """Batches (empty, of one, nested, mixed with notifications, with repeated ids), notifications and params by
    position, holding only allowed calls (named, and 20 more hypothesis builds), are answered by the broker
    (batch_refused, silence, invalid_request) and none of their calls is executed at the product, as A's
    notes show; an allowed bare call before, among and after them is (P)."""
    record = shapes.sweep(shapes.ALLOWED_ONLY, shapes.shapes((shapes.ALLOWED,)), instances["A"], broker_call,
                          target.person(principals["A"]), f"{pairproof_run.nonce}-tl1", 20)
    attach("TL-1 request shapes", record)


@pytest.mark.case("TL-2", "refusal", pair="A->product")
def test_tl2_no_shape_carries_an_unpinned_tool_or_bad_arguments_to_the_product(instances, broker_call, target,
                                                                               principals, pairproof_run):
    """notes_purge (not pinned) or notes_create with arguments its pin refuses, in every shape JSON-RPC allows
    and mixed with allowed calls (named, and 25 more hypothesis builds): none is executed at the product (A's
    notes hold none of their markers, a sentinel note survives), and the broker answers each as designed."""
    record = shapes.sweep(shapes.FORBIDDEN, shapes.shapes((shapes.ALLOWED, shapes.UNPINNED, shapes.BAD)),
                          instances["A"], broker_call, target.person(principals["A"]), f"{pairproof_run.nonce}-tl2", 25)
    attach("TL-2 request shapes", record)


# -- TL-3: discovery is not authority -----------------------------------------------------------------

# tools/list as MCP allows it: bare, with empty params, asking for a later page (the product has one page and
# answers every cursor with it, so a broker that filters only the first page offers everything).
LIST_SHAPES = (None, {}, {"cursor": "2"}, {"cursor": "", "_meta": {}})


@pytest.mark.case("TL-3", "refusal", pair="A->product")
def test_tl3_newly_advertised_tool_is_not_callable(instances, broker_call, target, dedicated):
    """The product advertises notes_purge; until pinned it is neither offered to the agent nor callable,
    neither before nor after another instance (D) had it pinned: a pin is bound to its instance.

    Ways it could fail that the probe looks for: discovery taken as authority; a pin added to a filter the
    instances share (so one instance's pin opens the tool to all); a pin keyed by something wider than the
    instance (its org)."""
    def refused(ref, when: str) -> None:
        for params in LIST_SHAPES:  # a later page is discovery too, filtered like the first
            listed = broker_call(ref, "POST", "/mcp", rpc("tools/list", params))["body"]["result"]["tools"]
            assert "notes_purge" not in {t["name"] for t in listed}, f"{ref.key} is offered notes_purge {when} ({params})"
        answer = broker_call(ref, "POST", "/mcp", rpc("tools/call", {"name": "notes_purge", "arguments": {}}))
        assert reason(answer) == "tool_not_pinned", f"{ref.key} may call notes_purge {when}"

    refused(instances["A"], "before any pin")
    dora = dedicated("D", "dora")
    target.pin_tool(dora, "notes_purge")
    listed = broker_call(dora, "POST", "/mcp", rpc("tools/list"))["body"]["result"]["tools"]
    if "notes_purge" not in {t["name"] for t in listed}:
        raise ProofError(f"pinning notes_purge for {dora.key} did not offer it to {dora.key}: the pin was not made")
    for name in ("A", "B", "C"):
        refused(instances[name], f"after {dora.key} had it pinned")


@pytest.mark.case("TL-3", "P", pair="D->product")
def test_tl3_pinned_tool_is_callable(target, broker_call, dedicated):
    dora = dedicated("D", "dora")
    target.pin_tool(dora, "notes_purge")
    listed = broker_call(dora, "POST", "/mcp", rpc("tools/list"))["body"]["result"]["tools"]
    assert "notes_purge" in {t["name"] for t in listed}
    answer = broker_call(dora, "POST", "/mcp", rpc("tools/call", {"name": "notes_purge", "arguments": {}}))
    assert answer["status"] == 200 and "deleted" in tool_result(answer)


# -- TL-4: the run-control route set --------------------------------------------------------------------

FORBIDDEN_ROUTES = [("GET", "/v1/jobs"), ("GET", "/v1/sessions"), ("POST", "/v1/platform/events"),
                    ("GET", "/v1/runs/../jobs"), ("GET", "/v1/runs/x/../../sessions"), ("GET", "/V1/runs/x"),
                    ("GET", "/v1/runs?all=1"), ("DELETE", "/v1/runs/x"), ("GET", "/v1/runs/x/events/../../../jobs")]


@pytest.mark.case("TL-4", "refusal", pair="platform->A")
@pytest.mark.parametrize("method,path", FORBIDDEN_ROUTES)
def test_tl4_only_the_run_control_routes(method, path, instances, target, probe_log):
    """Routes outside start/read/events/stop are refused by A's broker itself (its log line for this
    request's id is the proof that this request reached it), whatever the agent behind it would have answered."""
    nonce = probe_log.platform_probe(instances["A"], f"{method} {path}")
    status, body = target.runctl(instances["A"], method, path, {} if method == "POST" else None, request_id=nonce)
    assert (status, (body.get("error") or {}).get("reason")) == (403, "route_not_allowed")
    logged = [route for route, why in target.broker_refusals(instances["A"]) if route == f"{method} {path}"]
    assert logged, f"A's broker has no record of refusing {method} {path}"
    probe_log.confirm(nonce, target.platform_log())


def _runctl_keys(target, instances) -> dict[str, str]:
    """Each instance's run-control key, as the platform holds it to present on the platform side. None for an
    instance means nothing to look for: broken, never a vacuous pass."""
    keys = {name: target.capabilities(ref).get("runctl") for name, ref in instances.items()}
    if not all(keys.values()):
        raise ProofError(f"the target handed out no run-control key for {sorted(n for n, k in keys.items() if not k)}: "
                         "TL-4 cannot look for them")
    return keys


@pytest.mark.case("TL-4", "refusal", pair="B->A")
def test_tl4_no_other_instances_run_control_key_in_a_sandbox(instances, target, visible_bytes):
    """The run-control key is the platform side's alone to present: B's sandbox (its files, /proc environ
    and cmdline) holds neither A's nor C's key, in any encoding; the same keys all differ (one per instance,
    not a platform-wide key that B's own agent would hold too)."""
    keys = _runctl_keys(target, instances)
    assert len(set(keys.values())) == len(keys), "instances share a run-control key"
    others = {key for name, key in keys.items() if name != "B"}
    found = {secret for secret, _ in find_known(visible_bytes(instances["B"], others), others)}
    attach("TL-4 run-control keys in B's sandbox", {"looked for": sorted(n for n in keys if n != "B"),
                                                    "found": len(found)})
    assert not found


RUNCTL_PROBE = "/v1/runs/run_doesnotexist"


def _refused(answer: dict) -> bool:
    """No answer, or one refusing the caller (401, 403)."""
    return not str(answer.get("status", "")).isdigit() or answer["status"] in ("401", "403")


@pytest.mark.case("TL-4", "refusal", pair="B->A")
def test_tl4_from_bs_sandbox_no_agent_api_admits_another_key_or_none(instances, target, sandbox_host):
    """From inside B's sandbox, on every stream socket it can see, the same run-control request (a read of a
    run that does not exist) with no key, A's key, C's key and B's own. B's agent's API is where B's own key
    gets the answer the platform's path gets (``runctl``); there a request with no key or another instance's
    key is refused. And no socket B sees gives A's or C's key that answer (A's agent API is not reachable
    from B, with A's key or without). Not finding B's own agent's API is broken: nothing was asked."""
    keys = _runctl_keys(target, instances)
    platform = target.runctl(instances["B"], "GET", RUNCTL_PROBE)
    knocks = netprobes.runctl_knocks(sandbox_host(instances["B"]), keys)
    attach("TL-4 run-control knocks from B's sandbox", {"platform path answer": platform, "knocks": knocks})
    answers = {where: a for where, a in knocks.items() if isinstance(a, dict)}

    def as_platform(answer: dict) -> bool:
        return (answer.get("status"), answer.get("body")) == (str(platform[0]), platform[1])

    api = sorted(where for where, a in answers.items() if as_platform(a["B"]))
    if _refused({"status": str(platform[0])}) or not api:
        raise ProofError(f"B's own run-control request was refused through the platform's path ({platform}) or no "
                         f"socket in B's sandbox answers B's key as that path does: B's agent's API was not found, "
                         f"so nothing could refuse another key ({knocks})")
    assert not [w for w in api if not all(_refused(answers[w][label]) for label in ("no key", "A", "C"))]
    assert not [w for w, a in answers.items() if as_platform(a["A"]) or as_platform(a["C"])]


@pytest.mark.case("TL-4", "P", pair="A->A")
def test_tl4_own_run_control_key_is_in_its_own_sandbox(instances, target, visible_bytes):
    """The same search of A's sandbox finds A's own key (its agent checks it): the search sees a key where
    one is."""
    key = _runctl_keys(target, instances)["A"]
    assert {secret for secret, _ in find_known(visible_bytes(instances["A"]), {key})} == {key}


@pytest.mark.case("TL-4", "P", pair="platform->A")
def test_tl4_permitted_routes_work(instances, principals, target):
    # The run is held in flight by a slow model answer so that stopping it is stopping a live run (an agent may
    # answer a stop of a finished run as not found); it is stopped once its model call is made (so the scripted
    # answer is used up, not left for a later turn); its events are read after, to the end of the run.
    target.script_model(principals["A"], [{"reply": "run reply", "delay": 3}])
    user = f"{principals['A'].org}:{principals['A'].user}"
    status, started = target.runctl(instances["A"], "POST", "/v1/runs", {"input": "hello"})
    assert status == 202
    run = started["run_id"]
    until(lambda: [r for r in target.provider_records() if r["user"] == user and r["step"] == {"reply": "run reply",
                                                                                            "delay": 3.0}],
          "the run's model call")
    assert target.runctl(instances["A"], "GET", f"/v1/runs/{run}")[0] == 200
    assert target.runctl(instances["A"], "POST", f"/v1/runs/{run}/stop", {})[0] == 200
    assert target.runctl(instances["A"], "GET", f"/v1/runs/{run}/events")[0] == 200
    # An unknown run is forwarded too: the agent answers not found (in words of its own), the broker refuses nothing.
    status, body = target.runctl(instances["A"], "GET", "/v1/runs/run_doesnotexist")
    assert status == 404 and (body.get("error") or {}).get("reason") not in ("route_not_allowed", "agent_unreachable")


# -- TL-5: the server authorizes, whatever the broker forwards ------------------------------------------

@pytest.fixture
def a_note(instances, broker_call, planted) -> tuple[int, str]:
    token = planted.tokens["A"]["memory"]
    call = rpc("tools/call", {"name": "notes_create", "arguments": {"body": token}})
    return tool_result(broker_call(instances["A"], "POST", "/mcp", call))["id"], token


def _listed_notes(broker_call, ref) -> list[dict]:
    """The notes ``ref``'s agent lists through its broker. A listing that errors is not an empty listing: the
    probe did not look (a harness failure, broken)."""
    answer = broker_call(ref, "POST", "/mcp", rpc("tools/call", {"name": "notes_list", "arguments": {}}))
    try:
        return list(tool_result(answer)["notes"])
    except (KeyError, TypeError) as exc:
        raise ProofError(f"the notes listing of {ref.key} did not answer a listing: {answer}") from exc


@pytest.mark.parametrize("intruder", [pytest.param(n, marks=pytest.mark.case("TL-5", "refusal", pair=f"{n}->A"), id=n)
                                      for n in ("B", "C")])
def test_tl5_server_refuses_another_principals_record(intruder, a_note, instances, broker_call, pairproof_run):
    """The broker forwards the intruder's well-formed call for A's note id (it checks shape, not ownership); the
    server, judging by the intruder's grant, answers exactly as for a note that does not exist and carries
    nothing of A's; the intruder's own listing works, holds the intruder's own new note, and none of A's.

    Ways it could fail that the probe looks for: authorization by organization only (B is A's colleague, C
    is not); a record id trusted because the broker forwarded it; an answer that differs for an existing
    record (its existence leaks); a listing filtered by nothing."""
    note_id, token = a_note
    mine = f"the intruder's own note {pairproof_run.nonce} {intruder}"
    created = broker_call(instances[intruder], "POST", "/mcp",
                          rpc("tools/call", {"name": "notes_create", "arguments": {"body": mine}}))
    answer = broker_call(instances[intruder], "POST", "/mcp",
                         rpc("tools/call", {"name": "notes_get", "arguments": {"id": note_id}}))
    missing = broker_call(instances[intruder], "POST", "/mcp",
                          rpc("tools/call", {"name": "notes_get", "arguments": {"id": 10**9}}))
    listed = _listed_notes(broker_call, instances[intruder])
    attach(f"TL-5 {intruder}->A", {"A's note id": note_id, "answer": answer, "answer for a missing id": missing,
                                   "notes listed": len(listed), "own note created": created})
    if not [n for n in listed if n["body"] == mine]:
        raise ProofError(f"{intruder}'s own listing did not show the note it just made: the listing did not look")
    assert token not in json.dumps(answer) and "result" not in (answer.get("body") or {})
    assert (answer["status"], reason(answer)) == (missing["status"], reason(missing))
    assert answer_differences(answer, missing) == {}, "the answer for A's note differs from a missing note's"
    assert [n for n in listed if token in json.dumps(n) or n["id"] == note_id] == []


@pytest.mark.case("TL-5", "P", pair="A->A")
def test_tl5_owner_reads_its_record(a_note, instances, broker_call):
    note_id, token = a_note
    call = rpc("tools/call", {"name": "notes_get", "arguments": {"id": note_id}})
    assert tool_result(broker_call(instances["A"], "POST", "/mcp", call)) == {"id": note_id, "body": token}


# -- TL-5, people's side ----------------------------------------------------------------------------

@pytest.mark.parametrize("intruder", [pytest.param(n, marks=pytest.mark.case("TL-5", "refusal", pair=f"{n}->A"), id=n)
                                      for n in ("B", "C")])
def test_tl5_people_api_refuses_another_principals_record(agent_profile, intruder, principals, instances, target, probe_log):
    """A's private note, asked for by id through the people's API as B or C, gets exactly the answer a record
    that does not exist gets, and carries nothing of A's; a malformed id gets a 4xx too; A still reads it."""
    a = target.person(principals["A"])
    note = a.request("POST", "/api/issues", {"title": "x", "body": "x"})[1]["id"]  # a record that exists
    drive(target, agent_profile, principals["A"], instances["A"], [("notes_create", {"body": "private"})])
    notes = a.request("GET", "/api/records?kind=note")[1]["records"]
    mine = notes[-1]["id"]
    who = target.person(principals[intruder])
    nonce = probe_log.platform_probe(instances["A"], f"GET /api/records/{mine} as {intruder}")
    answer = who.request("GET", f"/api/records/{mine}", headers=with_request_id(nonce))
    missing = who.request("GET", "/api/records/999999")
    malformed = who.request("GET", "/api/records/abc")
    attach(f"TL-5 people's API {intruder}->A", {"answer": answer, "missing": missing, "malformed": malformed})
    assert answer[0] == 404 and "private" not in str(answer[1])
    assert (answer[0], reason_of(answer[1])) == (missing[0], reason_of(missing[1]))
    assert 400 <= malformed[0] < 500 and 400 <= who.request("POST", "/api/issues", {"title": 5})[0] < 500
    assert a.request("GET", f"/api/records/{mine}")[0] == 200 and note
    probe_log.confirm(nonce, target.platform_log())
