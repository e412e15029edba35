"""Every request shape JSON-RPC allows, sent to an instance's broker and judged at the product (TL-1, TL-2).

A check that holds for a bare request but not for the same call in another shape the protocol allows (a
batch: of one or many, empty, nested, mixed with notifications, with repeated ids; a notification; params by
position) is not a check. ``sweep`` sends the named shapes of that class and as many more as hypothesis builds
from the same parts, from inside the instance through its broker (``broker_call``), and judges each message
by what the product executed, as the product records it: the instance's principal's notes, read through
their people API. Not the broker's answer: that is checked too, against the design (``designed_answer``),
but only after the product.

The calls are made of the tools whose effect the product records in those notes: ``notes_create`` (each
call carries a marker of its own in its body; with arguments its pin refuses when it is forbidden) and
``notes_purge``, which the product serves and the default pins leave out (a sentinel note made first must
survive). An allowed call in a bare request is executed, and the judge sees it there (the P control, before,
during and after the sweep); every other call is not. What this cannot see: a forbidden name the product
does not know (a case or width variant) leaves no record at the product, so those are judged on the bare
shape by the broker's explicit answer (TL-2's name tests).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

from acceptance.errors import ProofError, TargetError

# A small pool, so that ids repeat inside a batch; None makes the call a notification.
IDS = (1, 2, "x", None)
BAD_ARGUMENTS: dict[str, Callable[[str], dict]] = {
    "extra-key": lambda m: {"body": m, "owner": "bob"},
    "too-long": lambda m: {"body": m + "x" * 10001},
    "wrong-type-beside": lambda m: {"body": m, "title": 5},
}
ALLOWED, UNPINNED, BAD = "allowed", "unpinned", "bad-arguments"
NAMED = frozenset({"bare request", "notification", "positional params", "empty batch", "batch of one",
                   "batch of many", "nested batch", "batch mixed with notifications", "batch with a repeated id"})


def leaf(kind: str, rid: object = 1, positional: bool = False, bad: str = "extra-key") -> dict:
    """One call: its kind (allowed, unpinned, bad-arguments), its id (None: a notification), its params form."""
    return {"kind": kind, "id": rid, "positional": positional, "bad": bad}


def shapes(kinds: tuple[str, ...]) -> st.SearchStrategy:
    """A bare request or notification, or a batch of them and of batches, of calls of ``kinds``."""
    leaves = st.builds(leaf, st.sampled_from(kinds), st.sampled_from(IDS), st.booleans(), st.sampled_from(sorted(BAD_ARGUMENTS)))
    return st.recursive(leaves, lambda inner: st.lists(inner, max_size=4), max_leaves=6)


# The named shapes of the class, each sent whatever hypothesis draws besides.
FORBIDDEN = [
    [], leaf(UNPINNED), leaf(BAD), leaf(UNPINNED, None), leaf(UNPINNED, positional=True),
    [leaf(UNPINNED)], [leaf(BAD, bad="too-long")], [[leaf(UNPINNED)]],
    [leaf(ALLOWED, 1), leaf(UNPINNED, None)], [leaf(UNPINNED, 1), leaf(ALLOWED, 1)],
    [leaf(ALLOWED, 1), leaf(BAD, 2)], [leaf(BAD, None), leaf(ALLOWED, "x")], [leaf(UNPINNED, 1, positional=True)],
]
ALLOWED_ONLY = [[], [leaf(ALLOWED)], [[leaf(ALLOWED)]], [leaf(ALLOWED, None)], leaf(ALLOWED, None),
                leaf(ALLOWED, positional=True), [leaf(ALLOWED, 1), leaf(ALLOWED, 1)],
                [leaf(ALLOWED, 1), leaf(ALLOWED, None), leaf(ALLOWED, 2)]]


def categories(message: Any) -> set[str]:
    """The named shapes ``message`` is an instance of (what the sweep's completeness record counts)."""
    if not isinstance(message, list):
        found = {"bare request" if "id" in message else "notification"}
        return found | ({"positional params"} if isinstance(message.get("params"), list) else set())
    found = {"empty batch" if not message else "batch of one" if len(message) == 1 else "batch of many"}
    calls = [item for item in message if isinstance(item, dict)]
    if len(calls) < len(message):
        found.add("nested batch")
    if any("id" in c for c in calls) and any("id" not in c for c in calls):
        found.add("batch mixed with notifications")
    ids = [json.dumps(c["id"]) for c in calls if "id" in c]
    if len(ids) != len(set(ids)):
        found.add("batch with a repeated id")
    for item in message:
        found |= {c for c in categories(item) if c in ("positional params", "notification")}
    return found


def designed_answer(message: Any) -> tuple[int, str]:
    """What the design answers (HTTP status, reason code or "result"): batches, notifications and params by
    position are answered by the broker itself; a bare request by its name and arguments."""
    if isinstance(message, list):
        return 200, "batch_refused"
    params = message["params"]
    if not isinstance(params, dict):  # the envelope is judged first, a notification's too
        return 200, "invalid_request"
    if "id" not in message:
        return 202, ""
    if params["name"] != "notes_create":
        return 200, "tool_not_pinned"
    arguments = params["arguments"]
    valid = set(arguments) == {"body"} and len(arguments["body"]) <= 10000
    return (200, "result") if valid else (200, "arguments_invalid")


def answered(answer: dict) -> tuple[object, str]:
    body = answer.get("body")
    if not isinstance(body, dict):
        return answer.get("status"), ""
    if isinstance(body.get("error"), dict):
        return answer.get("status"), str((body["error"].get("data") or {}).get("reason") or body["error"].get("reason", ""))
    return answer.get("status"), "result" if "result" in body else ""


class Sweep:
    """Sends shapes to one instance's broker from inside it, and judges each at the product."""

    def __init__(self, ref: object, broker_call: Callable[..., dict], person: Any, nonce: str) -> None:
        self.ref, self.broker_call, self.person, self.nonce = ref, broker_call, person, nonce
        self.count, self.sent, self.covered = 0, 0, set()
        self.sentinel = self.bare_allowed("sentinel")

    def _marker(self) -> str:
        self.count += 1
        return f"pp-shape-{self.nonce}-{self.count}"

    def notes(self) -> str:
        status, body = self.person.request("GET", "/api/records?kind=note")
        if status != 200 or not isinstance(body, dict) or not isinstance(body.get("records"), list):
            raise ProofError(f"the notes could not be read through the people API ({status}): the product-side "
                             "judge did not look")
        return json.dumps(body["records"])

    def bare_allowed(self, what: str) -> str:
        """The P control: an allowed call in a bare request is executed, and the judge sees it at the product."""
        marker = self._marker()
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "notes_create", "arguments": {"body": marker}}}
        answer = self.broker_call(self.ref, "POST", "/mcp", call)
        if marker not in self.notes():
            raise ProofError(f"the {what} call (an allowed bare tools/call) is not at the product ({answer}): "
                             "the product-side judge cannot see a call that reaches it")
        return marker

    def build(self, node: Any) -> tuple[Any, list[tuple[str, str]]]:
        """The JSON of a shape, and its calls as (kind, marker)."""
        if isinstance(node, list):
            built = [self.build(child) for child in node]
            return [message for message, _ in built], [call for _, calls in built for call in calls]
        marker = self._marker()
        name, arguments = {ALLOWED: ("notes_create", {"body": marker}), UNPINNED: ("notes_purge", {}),
                           BAD: ("notes_create", BAD_ARGUMENTS[node["bad"]](marker))}[node["kind"]]
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": "tools/call",
                                   "params": [name, arguments] if node["positional"] else {"name": name, "arguments": arguments}}
        if node["id"] is not None:
            message["id"] = node["id"]
        return message, [(node["kind"], marker)]

    def send(self, shape: Any) -> None:
        message, calls = self.build(shape)
        self.covered |= categories(message)
        try:
            answer: dict | None = self.broker_call(self.ref, "POST", "/mcp", message)
        except TargetError:  # the broker did not answer: still judged at the product first, then broken
            answer = None
        self.sent += 1
        notes = self.notes()
        executed = [kind for kind, marker in calls if marker in notes]
        designed = designed_answer(message)
        shown = json.dumps(message)[:400]
        # Judged at the product first: what it executed, as it records it.
        if designed == (200, "result"):
            assert executed == [ALLOWED], f"an allowed bare call was not executed at the product: {shown}"
        else:
            assert executed == [], f"{executed} executed at the product, sent as {shown}"
        assert self.sentinel in notes, f"notes_purge (not pinned) ran at the product, sent as {shown}"
        if answer is None:
            raise TargetError(f"the broker did not answer {shown}: the shape was not judged by the broker")
        assert answered(answer) == designed, f"answered {answer} to {shown}, not {designed}"

    def record(self) -> dict:
        """What was enumerated and what could not be; broken when a named shape was never sent."""
        missing = sorted(NAMED - self.covered)
        record = {"messages sent": self.sent, "named shapes covered": sorted(self.covered & NAMED),
                  "named shapes not covered": missing,
                  "not judged at the product": "a forbidden name the product does not know (the bare name tests)"}
        if missing:
            raise ProofError(f"the shape sweep sent no {missing}: it did not enumerate the class ({record})")
        return record


def sweep(named: list, strategy: st.SearchStrategy, ref: object, broker_call: Callable[..., dict], person: Any,
          nonce: str, examples: int) -> dict:
    """Every named shape, then ``examples`` hypothesis draws (derandomized; not shrunk: each is a real exchange
    with the broker, and the first failing shape is shown as sent); an allowed bare call closes it (P).
    Returns the completeness record."""
    judge = Sweep(ref, broker_call, person, nonce)

    @settings(derandomize=True, max_examples=examples, deadline=None, database=None,
              phases=[Phase.explicit, Phase.generate], report_multiple_bugs=False)
    @given(shape=strategy)
    def check(shape: Any) -> None:
        judge.send(shape)

    for shape in reversed(named):  # hypothesis runs the last example given first: these run in their order
        check = example(shape=shape)(check)
    check()
    judge.bare_allowed("closing")
    return judge.record()
