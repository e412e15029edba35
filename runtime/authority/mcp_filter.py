"""The broker's judgement on what an agent sends to the product's MCP tool server: bytes in, a decision out.

Each instance reaches the tool server only through its own broker, and this module is the part of the
broker that decides; it does no I/O, holds no connection or credential, and never raises, so a bug here
refuses a message instead of crashing the broker (which owns sockets, grants and logging). A forwarded
request is rebuilt from what was parsed, never passed on as the agent's bytes. Discovery is not authority:
the operator pins each tool by its exact name with the JSON schema of its arguments, a ``tools/call`` is
judged against that pin alone, and ``filter_tools_list`` shows the agent only pinned tools, with their
pinned schemas, whatever upstream advertises. Anything the table below does not allow is refused with an
explicit JSON-RPC answer whose ``error.data.reason`` is a machine-readable reason code. An error answer
carries the request's id when the request had a valid one, else ``null``.

==============================================================  =======================  ======  ================
What the agent sent                                             reason                   code    answer
==============================================================  =======================  ======  ================
more than MAX_BODY bytes, or nested deeper than MAX_DEPTH       too_large                -32600  error, id null
not UTF-8, not JSON, NaN/Infinity, a float that overflows, an   parse_error              -32700  error, id null
  integer of more than MAX_INT_DIGITS digits
an object with the same key twice, at any depth                 duplicate_key            -32600  error, id null
a JSON array (a batch), of any size, even empty                 batch_refused            -32600  error, id null
not an object; jsonrpc not "2.0"; method not a string; params   invalid_request          -32600  error
  not an object; a bad id; a top-level key other than jsonrpc,
  id, method, params; notifications/initialized with an id
notifications/initialized, without an id                        ok                       --      forwarded
any other notification (no id)                                  notification_dropped     --      none at all
resources/list, resources/templates/list                        resources_not_offered    --      empty result
any other resources/... method                                  resources_not_offered    -32601  error
prompts/list                                                    prompts_not_offered      --      empty result
any other prompts/... method                                    prompts_not_offered      -32601  error
a method not exactly one of ALLOWED_METHODS                     method_not_allowed       -32601  error
tools/call params malformed or with a key other than name,      invalid_params           -32602  error
  arguments, _meta
tools/call of a name that is not exactly a pinned name          tool_not_pinned          -32602  error
tools/call arguments that fail the pinned schema                arguments_invalid        -32602  error
initialize, ping, tools/list, a valid tools/call                ok                       --      forwarded
anything that makes the filter itself fail                      internal_filter_error    -32603  error, id null
==============================================================  =======================  ======  ================
"""

from __future__ import annotations

import copy
import json
import math
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, best_match
from referencing import Registry

ALLOWED_METHODS: frozenset[str] = frozenset({"initialize", "ping", "tools/list", "tools/call", "notifications/initialized"})
MAX_BODY = 1 << 20
# Real tool arguments are a few levels deep; a deeper message is a probe for recursion limits in whatever
# parses it after us (jsonschema, the broker's json.dumps, the tool server), so it stops here.
MAX_DEPTH = 64
# Turning decimal text into an int takes time quadratic in its length; Python's own cap is a process-wide
# setting the host may lift, so the filter keeps its own. A double keeps 17 significant digits; 100 is ample.
MAX_INT_DIGITS = 100
MAX_ID_CHARS = 256
# Ids must survive a JavaScript number (an IEEE double) unchanged, or two requests could share one.
MAX_INT_ID = 2**53
DIALECT = "https://json-schema.org/draft/2020-12/schema"

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

REASONS: frozenset[str] = frozenset({
    "ok", "too_large", "parse_error", "duplicate_key", "batch_refused", "invalid_request", "notification_dropped",
    "resources_not_offered", "prompts_not_offered", "method_not_allowed", "invalid_params", "tool_not_pinned",
    "arguments_invalid", "internal_filter_error",
})

_ENVELOPE_KEYS = frozenset({"jsonrpc", "id", "method", "params"})
_CALL_KEYS = frozenset({"name", "arguments", "_meta"})
_EMPTY_LISTS = {"resources/list": ("resources", "resources_not_offered"),
                "resources/templates/list": ("resourceTemplates", "resources_not_offered"),
                "prompts/list": ("prompts", "prompts_not_offered")}
_MAX_PATH_CHARS = 200


@dataclass(frozen=True)
class Decision:
    """The verdict on one message: forward ``request`` upstream, or answer the agent with ``response``.

    ``response`` is None only for a dropped notification, which JSON-RPC answers with silence.
    """

    forward: bool
    reason: str
    request: dict[str, Any] | None
    response: dict[str, Any] | None

    def __post_init__(self) -> None:
        # A decision that both forwards and answers, or forwards nothing, would leave the broker to guess.
        if self.forward and (self.request is None or self.response is not None or self.reason != "ok"):
            raise ValueError("a forwarding Decision carries a request, no response, and reason 'ok'")
        if not self.forward and (self.request is not None or self.reason == "ok"):
            raise ValueError("a refusing Decision carries no request and a reason other than 'ok'")


class McpFilter:
    """Decides, message by message, what one instance's agent may send to the MCP tool server.

    ``pinned`` maps each callable tool's exact name to the JSON schema (2020-12) of its arguments. It is
    copied and checked here, so a bad pin fails when the broker starts, not on the agent's first call.
    """

    def __init__(self, pinned: Mapping[str, Mapping]) -> None:
        self._schemas: dict[str, dict[str, Any]] = {}
        self._validators: dict[str, Draft202012Validator] = {}
        for name, schema in pinned.items():
            frozen = _checked_pin(name, schema)
            self._schemas[name] = frozen
            # An empty registry: a $ref is resolved inside the pinned schema or not at all. The default
            # registry would fetch unknown URIs over the network, and the pin would change under us.
            self._validators[name] = Draft202012Validator(frozen, registry=Registry())

    def decide(self, raw: bytes) -> Decision:
        """Judge one message from the agent; never raises."""
        try:
            return self._decide(raw)
        except Exception:  # the broker must get an answer for every message, even when this module has a bug
            return _refuse(None, "internal_filter_error", INTERNAL_ERROR, "the broker's filter failed on this message")

    def filter_tools_list(self, result: Mapping) -> dict[str, Any]:
        """Cut upstream's tools/list result down to the pinned tools it advertises, with the pinned schemas.

        A tool upstream newly advertises is not shown until it is pinned; a pinned tool upstream no longer
        advertises is not shown either. Only name, title, description and the pinned inputSchema are kept:
        upstream's schema and hints are discovery, not authority. Never raises; a malformed result lists nothing.
        """
        try:
            return self._filter_tools_list(result)
        except Exception:
            return {"tools": []}

    # -- decide, in the order of the table ------------------------------------------------------------

    def _decide(self, raw: bytes) -> Decision:
        if len(raw) > MAX_BODY:
            return _refuse(None, "too_large", INVALID_REQUEST, f"message is larger than {MAX_BODY} bytes")
        try:
            message = _parse(raw)
        except _DuplicateKey:
            return _refuse(None, "duplicate_key", INVALID_REQUEST,
                           "an object has the same key twice; parsers disagree on which value wins")
        except RecursionError:
            return _refuse(None, "too_large", INVALID_REQUEST, f"message is nested deeper than {MAX_DEPTH} levels")
        except ValueError:  # also UnicodeDecodeError and JSONDecodeError, both ValueErrors
            return _refuse(None, "parse_error", PARSE_ERROR, "message is not UTF-8 encoded JSON with finite numbers")
        if isinstance(message, list):
            # Each call is judged alone: in a batch, one refusal would have to be answered inside a reply
            # that also carries upstream's answers, and a broker that splits batches is a second parser.
            return _refuse(None, "batch_refused", INVALID_REQUEST, "batches are refused; send one request per message")
        if _nested_deeper_than(message, MAX_DEPTH):
            return _refuse(None, "too_large", INVALID_REQUEST, f"message is nested deeper than {MAX_DEPTH} levels")
        if not isinstance(message, dict):
            return _refuse(None, "invalid_request", INVALID_REQUEST, "a request must be a JSON object")

        reply_id = message["id"] if "id" in message and _valid_id(message["id"]) else None
        problem = _envelope_problem(message)
        if problem is not None:
            return _refuse(reply_id, "invalid_request", INVALID_REQUEST, problem)
        method: str = message["method"]

        if "id" not in message:
            if method == "notifications/initialized":
                return _forward(message)
            return Decision(forward=False, reason="notification_dropped", request=None, response=None)
        if method == "notifications/initialized":
            return _refuse(reply_id, "invalid_request", INVALID_REQUEST,
                           "notifications/initialized is a notification; send it without an id")

        if method in _EMPTY_LISTS:
            key, reason = _EMPTY_LISTS[method]
            return _answer(reply_id, reason, {key: []})
        if method.startswith("resources/"):
            return _refuse(reply_id, "resources_not_offered", METHOD_NOT_FOUND, "this broker offers no resources")
        if method.startswith("prompts/"):
            return _refuse(reply_id, "prompts_not_offered", METHOD_NOT_FOUND, "this broker offers no prompts")
        # Set membership is exact code-point equality: no case folding, normalisation, trimming or prefixes.
        if method not in ALLOWED_METHODS:
            return _refuse(reply_id, "method_not_allowed", METHOD_NOT_FOUND,
                           "method is not allowed; allowed: " + ", ".join(sorted(ALLOWED_METHODS)))
        if method == "tools/call":
            return self._decide_call(reply_id, message)
        return _forward(message)

    def _decide_call(self, reply_id: str | int, message: dict[str, Any]) -> Decision:
        params = message.get("params")
        if not isinstance(params, dict):
            return _refuse(reply_id, "invalid_params", INVALID_PARAMS, "tools/call needs params with a tool name")
        if params.keys() - _CALL_KEYS:
            return _refuse(reply_id, "invalid_params", INVALID_PARAMS, "tools/call params take only name, arguments and _meta")
        name = params.get("name")
        arguments = params.get("arguments", {})
        if not isinstance(name, str):
            return _refuse(reply_id, "invalid_params", INVALID_PARAMS, "tools/call name must be a string")
        if not isinstance(arguments, dict):
            return _refuse(reply_id, "invalid_params", INVALID_PARAMS, "tools/call arguments must be an object")
        if not isinstance(params.get("_meta", {}), dict):
            return _refuse(reply_id, "invalid_params", INVALID_PARAMS, "tools/call _meta must be an object")
        # A dict lookup compares code points exactly, so look-alike, case-changed, padded or zero-width
        # variants of a pinned name are different names, and are refused.
        validator = self._validators.get(name)
        if validator is None:
            return _refuse(reply_id, "tool_not_pinned", INVALID_PARAMS, "tool is not pinned for this instance")
        error = best_match(validator.iter_errors(arguments))
        if error is not None:
            # The path and the schema keyword come from the pin; the offending value is the agent's and may
            # be a secret it was tricked into sending, so it is never echoed.
            return _refuse(reply_id, "arguments_invalid", INVALID_PARAMS,
                           f"arguments do not match the pinned schema at {_json_path(error.absolute_path)} "
                           f"(keyword {error.validator!s})")
        # _meta is dropped: no pin describes it, so passing it on would open a channel nothing checks.
        return _forward({**message, "params": {"name": name, "arguments": arguments}})

    def _filter_tools_list(self, result: Mapping) -> dict[str, Any]:
        tools = result.get("tools") if isinstance(result, Mapping) else None
        shown: list[dict[str, Any]] = []
        seen: set[str] = set()
        for tool in tools if isinstance(tools, list) else []:
            name = tool.get("name") if isinstance(tool, Mapping) else None
            if not isinstance(name, str) or name not in self._schemas or name in seen:
                continue
            seen.add(name)
            entry: dict[str, Any] = {"name": name}
            entry.update({key: tool[key] for key in ("title", "description") if isinstance(tool.get(key), str)})
            entry["inputSchema"] = copy.deepcopy(self._schemas[name])
            shown.append(entry)
        filtered: dict[str, Any] = {"tools": shown}
        if isinstance(result.get("nextCursor"), str):  # pinned tools may be on the next page
            filtered["nextCursor"] = result["nextCursor"]
        return filtered


# -- parsing ------------------------------------------------------------------------------------------


class _DuplicateKey(ValueError):
    """An object repeats a key; raised from inside json.loads to stop parsing."""


def _parse(raw: bytes) -> Any:
    # Decoded here because json.loads(bytes) would also accept UTF-16 and UTF-32, which the tool server may not.
    return json.loads(raw.decode("utf-8"), object_pairs_hook=_unique_keys, parse_constant=_no_constant,
                      parse_float=_finite_float, parse_int=_bounded_int)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise _DuplicateKey()
    return obj


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    # 1e400 parses to inf, which the broker would re-serialize as the non-JSON token Infinity.
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("number overflows a double")
    return value


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"integer longer than {MAX_INT_DIGITS} digits")
    return int(text)


def _nested_deeper_than(value: Any, limit: int) -> bool:
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


# -- the envelope -------------------------------------------------------------------------------------


def _valid_id(value: Any) -> bool:
    if isinstance(value, bool):  # True is an int to Python, never an id to JSON-RPC
        return False
    if isinstance(value, int):
        return abs(value) < MAX_INT_ID
    if isinstance(value, str):
        return len(value) <= MAX_ID_CHARS
    return False


def _envelope_problem(message: dict[str, Any]) -> str | None:
    # Messages name no key, value or method the agent sent: the broker logs refusals, and the agent's text
    # does not belong in a log line.
    if message.keys() - _ENVELOPE_KEYS:
        return "unknown top-level key; a request has only jsonrpc, id, method and params"
    if message.get("jsonrpc") != "2.0":
        return 'jsonrpc must be "2.0"'
    if not isinstance(message.get("method"), str):
        return "method must be a string"
    if "params" in message and not isinstance(message["params"], dict):
        return "params must be an object; positional params are refused"
    if "id" in message and not _valid_id(message["id"]):
        return f"id must be a string of at most {MAX_ID_CHARS} characters or an integer of magnitude below 2**53"
    return None


def _json_path(path: Any) -> str:
    # Keys are written as JSON strings (ASCII-escaped), so a key holding quotes, newlines or lone
    # surrogates cannot forge or break the message; long paths are cut.
    text = "$" + "".join(f"[{part}]" if isinstance(part, int) else f"[{json.dumps(part)}]" for part in path)
    return text if len(text) <= _MAX_PATH_CHARS else text[:_MAX_PATH_CHARS] + "..."


# -- building decisions -------------------------------------------------------------------------------


def _forward(message: dict[str, Any]) -> Decision:
    request: dict[str, Any] = {"jsonrpc": "2.0"}
    if "id" in message:
        request["id"] = message["id"]
    request["method"] = message["method"]
    if "params" in message:
        request["params"] = message["params"]
    return Decision(forward=True, reason="ok", request=request, response=None)


def _answer(reply_id: str | int, reason: str, result: dict[str, Any]) -> Decision:
    return Decision(forward=False, reason=reason, request=None, response={"jsonrpc": "2.0", "id": reply_id, "result": result})


def _refuse(reply_id: str | int | None, reason: str, code: int, message: str) -> Decision:
    error = {"code": code, "message": message, "data": {"reason": reason}}
    return Decision(forward=False, reason=reason, request=None, response={"jsonrpc": "2.0", "id": reply_id, "error": error})


# -- pins ---------------------------------------------------------------------------------------------


def _checked_pin(name: Any, schema: Any) -> dict[str, Any]:
    """Return a private JSON copy of one pin's schema, or raise ValueError naming the tool and the fix."""
    where = f"pinned tool {name!r}"
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}: a tool name must be a non-empty string")
    # Invisible, whitespace and control characters make two names look alike to the operator who reads
    # the pin list; a name with one is refused so that what is pinned is what is seen.
    if any(unicodedata.category(char)[0] in "CZ" for char in name):
        raise ValueError(f"{where}: the name holds whitespace, control or invisible characters; pin the visible name")
    if not isinstance(schema, Mapping):
        raise ValueError(f"{where}: the schema must be a JSON object, got {type(schema).__name__}")
    try:
        # A JSON round trip is a deep copy the caller can no longer mutate, and proves the pin is JSON.
        frozen = json.loads(json.dumps(schema, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: the schema is not plain JSON ({exc})") from None
    if frozen.get("type") != "object":
        raise ValueError(f'{where}: the schema must have "type": "object"; MCP tool arguments are always an object')
    if frozen.get("$schema", DIALECT) != DIALECT:
        raise ValueError(f"{where}: the schema declares $schema {frozen['$schema']!r}; pins are checked as {DIALECT}")
    remote = _non_local_ref(frozen)
    if remote is not None:
        raise ValueError(f"{where}: $ref {remote!r} points outside the schema; inline it under $defs and use '#/$defs/...'")
    try:
        Draft202012Validator.check_schema(frozen)
    except SchemaError as exc:
        raise ValueError(f"{where}: not a valid JSON Schema 2020-12 ({exc.message})") from None
    return frozen


def _non_local_ref(schema: Any) -> str | None:
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("$ref", "$dynamicRef") and isinstance(value, str) and not value.startswith("#"):
                    return value
                stack.append(value)
        elif isinstance(node, list):
            stack.extend(node)
    return None
