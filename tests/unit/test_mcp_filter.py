"""The broker's MCP filter forwards only what is explicitly allowed and answers everything else with a reason."""

from __future__ import annotations

import ast
import json
import sys
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st

from runtime.authority import mcp_filter
from runtime.authority.mcp_filter import ALLOWED_METHODS, MAX_BODY, MAX_DEPTH, REASONS, Decision, McpFilter

PINNED: dict[str, dict[str, Any]] = {
    "notes_create": {
        "type": "object",
        "properties": {"title": {"type": "string", "maxLength": 200}, "body": {"type": "string"}},
        "required": ["title"],
        "additionalProperties": False,
    },
    "notes_search": {
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1, "maximum": 50}},
        "required": ["query"],
        "additionalProperties": False,
    },
    # a local $ref, to show that refs inside the pin resolve without a network
    "export_pdf": {
        "type": "object",
        "$defs": {"page": {"type": "integer", "minimum": 1}},
        "properties": {"pages": {"type": "array", "items": {"$ref": "#/$defs/page"}, "maxItems": 20},
                       "format": {"enum": ["a4", "letter"]}},
        "required": ["pages"],
        "additionalProperties": False,
    },
}
VALID_ARGUMENTS = {"notes_create": {"title": "groceries"}, "notes_search": {"query": "milk", "limit": 5},
                   "export_pdf": {"pages": [1, 2], "format": "a4"}}


@pytest.fixture(scope="module")
def flt() -> McpFilter:
    return McpFilter(PINNED)


def encode(message: Any) -> bytes:
    return json.dumps(message).encode()


def request(method: str, params: Any = None, id: Any = 1, **extra: Any) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
    if params is not None:
        message["params"] = params
    return encode({**message, **extra})


def call(name: str, arguments: Any = None, id: Any = 1, **params: Any) -> bytes:
    body: dict[str, Any] = {"name": name, **params}
    if arguments is not None:
        body["arguments"] = arguments
    return request("tools/call", body, id=id)


def assert_refused(decision: Decision, reason: str, code: int, id: Any = None) -> None:
    assert (False, None, reason) == (decision.forward, decision.request, decision.reason)
    expected_error = {"code": code, "message": decision.response["error"]["message"], "data": {"reason": reason}}
    assert {"jsonrpc": "2.0", "id": id, "error": expected_error} == decision.response
    assert isinstance(decision.response["error"]["message"], str) and decision.response["error"]["message"]


def assert_forwarded(decision: Decision, expected_request: dict[str, Any]) -> None:
    assert (True, "ok", None) == (decision.forward, decision.reason, decision.response)
    assert expected_request == decision.request


# -- 1. size ------------------------------------------------------------------------------------------


def test_a_body_over_max_body_is_too_large_and_one_at_max_body_is_judged(flt):
    ping = request("ping")
    at_limit = ping + b" " * (MAX_BODY - len(ping))
    assert_forwarded(flt.decide(at_limit), {"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert_refused(flt.decide(at_limit + b" "), "too_large", -32600)


def test_nesting_deeper_than_max_depth_is_too_large_and_at_max_depth_is_judged(flt):
    def nested(levels: int) -> Any:  # an arguments value that brings the whole message to `levels`
        value: Any = "leaf"
        for _ in range(levels - 3):  # envelope, params and arguments are three of the levels
            value = {"k": value}
        return value

    assert_refused(flt.decide(call("notes_create", {"title": nested(MAX_DEPTH)})), "arguments_invalid", -32602, id=1)
    assert_refused(flt.decide(call("notes_create", {"title": nested(MAX_DEPTH + 1)})), "too_large", -32600)
    assert_refused(flt.decide(b"{" + b'"a":{' * 200_000), "too_large", -32600)  # beyond the parser's own recursion


# -- 2. parsing ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("raw", [
    b"", b"   ", b"{", b'{"jsonrpc": "2.0",}', b"\xff\xfe", b'{"jsonrpc": "2.0", "id": 1, "method": "p\xe9"}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": NaN}}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": Infinity}}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": -Infinity}}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": 1e400}}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": 1' + b"0" * 100 + b"}}",  # MAX_INT_DIGITS + 1
    b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": -1' + b"0" * 900_000 + b"}}",
    "\ufeff" .encode() + request("ping"),  # a UTF-8 byte order mark
    '{"jsonrpc": "2.0", "id": 1, "method": "ping"}'.encode("utf-16"),  # json.loads(bytes) would accept this
    '{"jsonrpc": "2.0", "id": 1, "method": "ping"}'.encode("utf-32"),
], ids=lambda raw: repr(raw[:24]))
def test_what_is_not_utf8_json_with_finite_numbers_is_a_parse_error(flt, raw):
    assert_refused(flt.decide(raw), "parse_error", -32700)


@pytest.mark.parametrize("raw", [
    b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "method": "tools/call"}',
    b'{"jsonrpc": "2.0", "id": 1, "id": 2, "method": "ping"}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "notes_search", "name": "notes_purge"}}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", '
    b'"params": {"name": "notes_search", "arguments": {"query": "a", "query": "b"}}}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"a": [{"b": 1, "\\u0062": 2}]}}',  # same key, escaped
], ids=["method", "id", "name", "argument", "escaped-deep"])
def test_an_object_with_a_repeated_key_at_any_depth_is_refused(flt, raw):
    assert_refused(flt.decide(raw), "duplicate_key", -32600)


def test_control_an_integer_of_max_int_digits_is_judged(flt):
    raw = b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": -' + b"9" * mcp_filter.MAX_INT_DIGITS + b"}}"
    assert_forwarded(flt.decide(raw), {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": -int("9" * 100)}})


def test_control_the_same_messages_without_repeats_are_forwarded(flt):
    raw = b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"a": [{"b": 1, "c": 2}]}}'
    assert_forwarded(flt.decide(raw), {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"a": [{"b": 1, "c": 2}]}})


# -- 3. batches ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("batch", [
    [], [{"jsonrpc": "2.0", "id": 1, "method": "ping"}], [[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]], [[]],
    [{"jsonrpc": "2.0", "id": i, "method": "tools/list"} for i in range(50)],
], ids=["empty", "one", "nested", "nested-empty", "fifty"])
def test_a_batch_of_any_size_is_refused_because_each_call_is_judged_alone(flt, batch):
    assert_refused(flt.decide(encode(batch)), "batch_refused", -32600)


# -- 4. the envelope ----------------------------------------------------------------------------------


@pytest.mark.parametrize("message", [
    "ping", 1, None, True, 1.5,
    {"id": 1, "method": "ping"},
    {"jsonrpc": "1.0", "id": 1, "method": "ping"},
    {"jsonrpc": 2.0, "id": 1, "method": "ping"},
    {"jsonrpc": "2.0 ", "id": 1, "method": "ping"},
    {"jsonrpc": "2.0", "id": 1},
    {"jsonrpc": "2.0", "id": 1, "method": ["ping"]},
    {"jsonrpc": "2.0", "id": 1, "method": None},
    {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": ["positional"]},
    {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": None},
    {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": "x"},
    {"jsonrpc": "2.0", "id": 1, "method": "ping", "result": {}},
    {"jsonrpc": "2.0", "id": 1, "method": "ping", "Method": "tools/call"},
    {"jsonrpc": "2.0", "id": 1, "method": "ping", "auth": "Bearer x"},
], ids=repr)
def test_a_malformed_envelope_is_an_invalid_request_answered_with_its_id(flt, message):
    reply_id = message.get("id") if isinstance(message, dict) else None
    assert_refused(flt.decide(encode(message)), "invalid_request", -32600, id=reply_id)


@pytest.mark.parametrize("bad_id", [None, True, False, 1.0, 1.5, [1], {"a": 1}, 2**53, -(2**53), 2**64, "x" * 257],
                         ids=repr)
def test_a_bad_id_is_an_invalid_request_answered_with_a_null_id(flt, bad_id):
    assert_refused(flt.decide(request("ping", id=bad_id)), "invalid_request", -32600, id=None)


@pytest.mark.parametrize("good_id", [0, -1, 2**53 - 1, -(2**53 - 1), "", "x" * 256, "é-🙂"], ids=repr)
def test_control_a_good_id_is_forwarded_as_it_came(flt, good_id):
    assert_forwarded(flt.decide(request("ping", id=good_id)), {"jsonrpc": "2.0", "id": good_id, "method": "ping"})


# -- 5. notifications ---------------------------------------------------------------------------------


def test_notifications_initialized_is_forwarded_without_an_id(flt):
    raw = encode({"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert_forwarded(flt.decide(raw), {"jsonrpc": "2.0", "method": "notifications/initialized"})


@pytest.mark.parametrize("method", ["notifications/cancelled", "notifications/progress", "notifications/roots/list_changed",
                                    "tools/call", "ping", "resources/read", "notifications/Initialized"])
def test_any_other_notification_is_dropped_without_an_answer(flt, method):
    raw = encode({"jsonrpc": "2.0", "method": method, "params": {"name": "notes_create", "arguments": {"title": "t"}}})
    assert Decision(forward=False, reason="notification_dropped", request=None, response=None) == flt.decide(raw)


def test_notifications_initialized_sent_with_an_id_is_an_invalid_request(flt):
    assert_refused(flt.decide(request("notifications/initialized", id=3)), "invalid_request", -32600, id=3)


# -- 6. resources and prompts -------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "result", "reason"), [
    ("resources/list", {"resources": []}, "resources_not_offered"),
    ("resources/templates/list", {"resourceTemplates": []}, "resources_not_offered"),
    ("prompts/list", {"prompts": []}, "prompts_not_offered"),
])
def test_resource_and_prompt_listings_are_answered_empty_and_never_forwarded(flt, method, result, reason):
    decision = flt.decide(request(method, {"cursor": "c"}, id="r1"))
    assert Decision(forward=False, reason=reason, request=None,
                    response={"jsonrpc": "2.0", "id": "r1", "result": result}) == decision


@pytest.mark.parametrize(("method", "reason"), [
    ("resources/read", "resources_not_offered"), ("resources/subscribe", "resources_not_offered"),
    ("resources/unsubscribe", "resources_not_offered"), ("resources/anything", "resources_not_offered"),
    ("prompts/get", "prompts_not_offered"), ("prompts/anything", "prompts_not_offered"),
])
def test_every_other_resource_and_prompt_method_is_refused(flt, method, reason):
    assert_refused(flt.decide(request(method, {"uri": "file:///etc/passwd"}, id=9)), reason, -32601, id=9)


# -- 7. methods ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", [
    "Ping", "PING", "ping ", " ping", "ping\n", "ping\u200b", "ｐｉｎｇ", "tools/Call", "tools/call/", "tools/call/x",
    "tools/", "tools", "tools/list2", "Tools/list", "initialize\x00", "", "sampling/createMessage", "completion/complete",
    "logging/setLevel", "roots/list", "elicitation/create", "Resources/read", "resources", "prompts",
], ids=repr)
def test_a_method_not_exactly_allowed_is_refused(flt, method):
    assert_refused(flt.decide(request(method, id=4)), "method_not_allowed", -32601, id=4)


@pytest.mark.parametrize(("method", "params"), [
    ("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "agent", "version": "1"}}),
    ("ping", None),
    ("tools/list", {"cursor": "page-2"}),
    ("tools/list", None),
])
def test_control_allowed_methods_are_forwarded_rebuilt(flt, method, params):
    expected = {"jsonrpc": "2.0", "id": 5, "method": method}
    if params is not None:
        expected["params"] = params
    decision = flt.decide(request(method, params, id=5))
    assert_forwarded(decision, expected)
    assert list(expected) == list(decision.request)


def test_allowed_methods_are_exactly_the_five():
    assert frozenset({"initialize", "ping", "tools/list", "tools/call", "notifications/initialized"}) == ALLOWED_METHODS


# -- 8. tools/call ------------------------------------------------------------------------------------


def test_a_valid_call_is_forwarded_with_only_name_and_arguments(flt):
    raw = call("notes_create", {"title": "groceries", "body": "milk"}, id="c1", _meta={"progressToken": "p"})
    assert_forwarded(flt.decide(raw), {"jsonrpc": "2.0", "id": "c1", "method": "tools/call",
                                       "params": {"name": "notes_create", "arguments": {"title": "groceries", "body": "milk"}}})


def test_absent_arguments_are_forwarded_as_an_empty_object_and_judged_as_one(flt):
    permissive = McpFilter({"list_all": {"type": "object", "properties": {}, "additionalProperties": False}})
    assert_forwarded(permissive.decide(call("list_all")), {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                                          "params": {"name": "list_all", "arguments": {}}})
    assert_refused(flt.decide(call("notes_create")), "arguments_invalid", -32602, id=1)  # title is required


def test_a_valid_call_with_an_extra_top_level_key_is_refused(flt):
    raw = request("tools/call", {"name": "notes_create", "arguments": {"title": "t"}}, id=2, grant="stolen")
    assert_refused(flt.decide(raw), "invalid_request", -32600, id=2)


@pytest.mark.parametrize("params", [
    None, {}, {"arguments": {"title": "t"}}, {"name": 1}, {"name": ["notes_create"]}, {"name": None},
    {"name": "notes_create", "arguments": [["title", "t"]]}, {"name": "notes_create", "arguments": "title=t"},
    {"name": "notes_create", "arguments": None}, {"name": "notes_create", "arguments": {"title": "t"}, "_meta": "x"},
    {"name": "notes_create", "arguments": {"title": "t"}, "tool": "notes_purge"},
    {"name": "notes_create", "arguments": {"title": "t"}, "cursor": "c"},
    {"name": "notes_create", "arguments": {"title": "t"}, "Arguments": {}},
], ids=repr)
def test_malformed_call_params_are_invalid_params(flt, params):
    assert_refused(flt.decide(request("tools/call", params, id=6)), "invalid_params", -32602, id=6)


@pytest.mark.parametrize("name", ["notes_purge", "", "notes", "notes_create_all", "Notes_Create", "notes_create ",
                                  "ｎｏｔｅｓ_ｃｒｅａｔｅ", "n\u043etes_create", "notes_create\u200d"], ids=repr)
def test_a_name_that_is_not_exactly_pinned_is_refused(flt, name):
    assert_refused(flt.decide(call(name, {"title": "t"}, id=7)), "tool_not_pinned", -32602, id=7)


@pytest.mark.parametrize(("name", "arguments", "path", "keyword"), [
    ("notes_create", {}, "$", "required"),
    ("notes_create", {"title": 12345678}, '$["title"]', "type"),
    ("notes_create", {"title": "SECRET-sk-live-" + "x" * 300}, '$["title"]', "maxLength"),
    ("notes_create", {"title": "t", "exfil": "SECRET-sk-live-1"}, "$", "additionalProperties"),
    ("notes_search", {"query": "q", "limit": 51}, '$["limit"]', "maximum"),
    ("export_pdf", {"pages": [1, 0]}, '$["pages"][1]', "minimum"),
    ("export_pdf", {"pages": [1], "format": "SECRET-legal"}, '$["format"]', "enum"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_arguments_failing_the_pin_are_refused_naming_the_path_not_the_value(flt, name, arguments, path, keyword):
    decision = flt.decide(call(name, arguments, id=8))
    assert_refused(decision, "arguments_invalid", -32602, id=8)
    message = decision.response["error"]["message"]
    assert (True, True) == (f"at {path} " in message, f"keyword {keyword}" in message)
    assert "SECRET" not in message and "12345678" not in message and "exfil" not in message


def test_a_path_through_a_hostile_key_is_escaped_and_cut():
    flt = McpFilter({"t": {"type": "object", "additionalProperties": {"type": "integer"}}})
    decision = flt.decide(call("t", {'"\n\ud800' + "k" * 500: "v"}))
    message = decision.response["error"]["message"]
    assert message.isascii() and "\n" not in message and len(message) < 300


@pytest.mark.parametrize("name", sorted(PINNED))
def test_control_every_pinned_tool_forwards_valid_arguments(flt, name):
    decision = flt.decide(call(name, VALID_ARGUMENTS[name]))
    assert_forwarded(decision, {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                "params": {"name": name, "arguments": VALID_ARGUMENTS[name]}})


# -- confusables --------------------------------------------------------------------------------------

CYRILLIC = {"a": "\u0430", "e": "\u0435", "o": "\u043e", "c": "\u0441", "p": "\u0440", "x": "\u0445"}
INVISIBLE = ["\u200d", "\u200b", "\u200c", "\u2060", "\ufeff", "\u00ad"]
PADDING = [" ", "\t", "\n", "\u00a0", "\u3000"]


def confusables(name: str) -> set[str]:
    """Names a person could read as `name`, or a normalising parser could turn into it."""
    variants = {name.upper(), name.title(), name.capitalize()}
    for i, char in enumerate(name):
        swap = lambda new: name[:i] + new + name[i + 1:]  # noqa: B023 - used at once, inside this iteration
        variants.add(swap(char.upper()))
        if char.isascii() and (char.isalpha() or char == "_"):
            variants.add(swap(chr(ord(char) + 0xFEE0)))  # fullwidth form
        if char in CYRILLIC:
            variants.add(swap(CYRILLIC[char]))
        if "a" <= char <= "z":
            variants.add(swap(chr(0x1D41A + ord(char) - ord("a"))))  # mathematical bold, NFKC-equal
    for i in range(len(name) + 1):
        variants |= {name[:i] + mark + name[i:] for mark in INVISIBLE}
    variants |= {pad + name for pad in PADDING} | {name + pad for pad in PADDING}
    variants.add("".join(chr(ord(c) + 0xFEE0) for c in name))
    variants.discard(name)
    return variants


@pytest.mark.parametrize("name", sorted(PINNED))
def test_every_confusable_variant_of_a_pinned_name_is_refused(flt, name):
    variants = confusables(name)
    nfkc_equal = {v for v in variants if unicodedata.normalize("NFKC", v) == name}
    assert len(nfkc_equal) >= len(name)  # the generator does reach NFKC-equivalent forms
    assert any(c in "".join(variants) for c in CYRILLIC.values())
    reasons = {v: flt.decide(call(v, VALID_ARGUMENTS[name])).reason for v in variants}
    assert {} == {v: r for v, r in reasons.items() if r != "tool_not_pinned"}


# -- 10. internal errors ------------------------------------------------------------------------------


def test_a_failure_inside_the_filter_is_answered_not_raised(flt, monkeypatch):
    def broken(raw: bytes) -> Any:
        raise KeyError("a bug")

    monkeypatch.setattr(mcp_filter, "_parse", broken)
    assert_refused(flt.decide(request("ping")), "internal_filter_error", -32603)


def test_a_caller_that_passes_text_instead_of_bytes_gets_an_answer(flt):
    assert_refused(flt.decide('{"jsonrpc": "2.0", "id": 1, "method": "ping"}'), "internal_filter_error", -32603)


@pytest.mark.parametrize("fields", [
    {"forward": True, "reason": "ok", "request": None, "response": None},
    {"forward": True, "reason": "ok", "request": {"method": "ping"}, "response": {"id": 1}},
    {"forward": True, "reason": "tool_not_pinned", "request": {"method": "ping"}, "response": None},
    {"forward": False, "reason": "tool_not_pinned", "request": {"method": "ping"}, "response": None},
    {"forward": False, "reason": "ok", "request": None, "response": None},
], ids=["no-request", "forward-and-answer", "forward-with-a-refusal-reason", "refuse-with-a-request", "refuse-with-ok"])
def test_a_decision_that_is_both_or_neither_cannot_be_made(fields):
    with pytest.raises(ValueError):
        Decision(**fields)


# -- construction -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "schema", "says"), [
    ("bad_type", {"type": "object", "properties": {"x": {"type": "strnig"}}}, "not a valid JSON Schema"),
    ("bad_min", {"type": "object", "properties": {"x": {"minimum": "one"}}}, "not a valid JSON Schema"),
    ("bad_regex", {"type": "object", "properties": {"x": {"pattern": "("}}}, "not a valid JSON Schema"),
    ("not_object", {"type": "string"}, '"type": "object"'),
    ("untyped", {"properties": {}}, '"type": "object"'),
    ("list_schema", [{"type": "object"}], "must be a JSON object"),
    ("remote_ref", {"type": "object", "properties": {"x": {"$ref": "https://example.com/s.json"}}}, "points outside"),
    ("relative_ref", {"type": "object", "properties": {"x": {"$ref": "other.json#/a"}}}, "points outside"),
    ("old_dialect", {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}, "$schema"),
    ("not_json", {"type": "object", "default": {1, 2}}, "not plain JSON"),
    ("nan", {"type": "object", "properties": {"x": {"maximum": float("nan")}}}, "not plain JSON"),
    ("padded ", {"type": "object"}, "whitespace"),
    ("zero\u200dwidth", {"type": "object"}, "invisible"),
    ("", {"type": "object"}, "non-empty"),
    (7, {"type": "object"}, "non-empty string"),
], ids=repr)
def test_a_bad_pin_fails_at_construction_naming_the_tool(name, schema, says):
    with pytest.raises(ValueError) as caught:
        McpFilter({"notes_create": PINNED["notes_create"], name: schema})
    assert repr(name) in str(caught.value) and says in str(caught.value)


def test_control_a_pin_with_the_2020_12_dialect_and_local_refs_is_accepted():
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
              "$defs": {"n": {"type": "integer"}}, "properties": {"n": {"$ref": "#/$defs/n"}}}
    flt = McpFilter({"count": schema})
    assert "ok" == flt.decide(call("count", {"n": 3})).reason
    assert "arguments_invalid" == flt.decide(call("count", {"n": "3"})).reason


def test_a_pin_changed_by_the_caller_after_construction_changes_nothing():
    pinned = json.loads(json.dumps(PINNED))
    flt = McpFilter(pinned)
    pinned["notes_create"]["additionalProperties"] = True
    pinned["notes_purge"] = {"type": "object"}
    assert "arguments_invalid" == flt.decide(call("notes_create", {"title": "t", "extra": 1})).reason
    assert "tool_not_pinned" == flt.decide(call("notes_purge", {})).reason


# -- tools/list ---------------------------------------------------------------------------------------


UPSTREAM_LISTING = {
    "tools": [
        {"name": "notes_create", "title": "Create a note", "description": "Creates a note.",
         "inputSchema": {"type": "object", "additionalProperties": True}, "annotations": {"readOnlyHint": True},
         "_meta": {"x": 1}},
        {"name": "notes_purge", "description": "Deletes every note.", "inputSchema": {"type": "object"}},
        {"name": "Notes_Search", "description": "a look-alike", "inputSchema": {"type": "object"}},
        {"name": "notes_search", "description": "Searches notes.", "inputSchema": {"type": "object"}},
        {"name": "notes_create", "description": "advertised twice", "inputSchema": {"type": "object"}},
        "not a tool", {"description": "no name"}, {"name": ["notes_search"]},
    ],
    "nextCursor": "page-2",
}


def test_tools_list_shows_only_pinned_advertised_tools_with_pinned_schemas(flt):
    assert {"tools": [
        {"name": "notes_create", "title": "Create a note", "description": "Creates a note.",
         "inputSchema": PINNED["notes_create"]},
        {"name": "notes_search", "description": "Searches notes.", "inputSchema": PINNED["notes_search"]},
    ], "nextCursor": "page-2"} == flt.filter_tools_list(UPSTREAM_LISTING)


def test_tools_list_drops_a_newly_advertised_tool_and_one_no_longer_advertised(flt):
    names = [tool["name"] for tool in flt.filter_tools_list(UPSTREAM_LISTING)["tools"]]
    assert "notes_purge" not in names  # new upstream, not pinned
    assert "export_pdf" not in names  # pinned, no longer advertised
    assert ["notes_create", "notes_search"] == names  # control: the filter does show what it should


def test_a_listed_schema_is_a_copy_the_caller_cannot_use_to_change_the_pin(flt):
    listed = flt.filter_tools_list(UPSTREAM_LISTING)["tools"][0]["inputSchema"]
    listed["additionalProperties"] = True
    assert "arguments_invalid" == flt.decide(call("notes_create", {"title": "t", "extra": 1})).reason


@pytest.mark.parametrize("result", [{}, {"tools": None}, {"tools": {"notes_create": {}}}, [], None, "tools"], ids=repr)
def test_a_malformed_listing_shows_no_tools(flt, result):
    assert {"tools": []} == flt.filter_tools_list(result)


# -- the module's own shape ---------------------------------------------------------------------------


def test_the_module_docstring_table_names_every_reason():
    assert [] == [reason for reason in sorted(REASONS) if f" {reason} " not in mcp_filter.__doc__]


def test_the_module_does_no_io_and_uses_only_the_stdlib_and_jsonschema():
    tree = ast.parse(Path(mcp_filter.__file__).read_text())
    modules = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    modules |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    io_modules = {"os", "io", "socket", "subprocess", "pathlib", "urllib", "http", "logging", "shutil", "tempfile"}
    assert set() == modules & io_modules
    assert set() == modules - set(sys.stdlib_module_names) - {"jsonschema", "referencing"}


# A grammar of requests: mostly well-formed envelopes, with methods, names and arguments drawn from what
# is allowed, what is not, and perturbations of both.
LOOKALIKES = list(CYRILLIC.values()) + INVISIBLE + PADDING + ["\uff3f", "\u0131", "\u017f", "\u212a"]


@st.composite
def perturbed(draw: st.DrawFn, word: str) -> str:
    """`word` with one change a reader, or a lenient comparison, might not notice."""
    i = draw(st.integers(0, len(word) - 1))
    kind = draw(st.sampled_from(["upper", "append", "fullwidth", "insert", "replace"]))  # the first is drawn most
    if kind == "append":
        return word + draw(st.sampled_from(LOOKALIKES + ["/", "s", "_all"]) | st.characters())
    if kind == "insert":
        return word[:i] + draw(st.sampled_from(LOOKALIKES) | st.characters()) + word[i:]
    new = {"replace": draw(st.sampled_from(LOOKALIKES) | st.characters()), "upper": word[i].upper(),
           "fullwidth": chr(ord(word[i]) + 0xFEE0) if "!" <= word[i] <= "~" else word[i]}[kind]
    return word[:i] + new + word[i + 1:]
names = st.sampled_from(sorted(PINNED)) | st.sampled_from(sorted(PINNED)).flatmap(perturbed) | st.text(max_size=16)
plain_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**20), 10**20) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=10,
)
argument_keys = st.sampled_from(["title", "body", "query", "limit", "pages", "format"]) | st.text(max_size=6)
argument_values = (plain_json | st.integers(-5, 60) | st.sampled_from(["a4", "letter"])
                   | st.lists(st.integers(-2, 5), max_size=25))
arguments = (st.sampled_from(list(VALID_ARGUMENTS.values())) | st.dictionaries(argument_keys, argument_values, max_size=4)
             | plain_json)
