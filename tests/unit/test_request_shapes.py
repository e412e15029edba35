"""The request-shape sweep (acceptance/cases/judges/shapes.py) that TL-1 and TL-2 run: its model of the
design is the broker's filter's, it passes a broker that judges every shape, and it fails each broken
arrangement of the class (a shape that skips the checks a bare request gets), judged at a fake product."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings

from acceptance.cases.judges import shapes
from acceptance.errors import ProofError, TargetError
from runtime.authority.mcp_filter import McpFilter
from runtime.product.server import TOOLS

FILTER = McpFilter({t["name"]: t["inputSchema"] for t in TOOLS if t["name"] != "notes_purge"})
EVERY_KIND = (shapes.ALLOWED, shapes.UNPINNED, shapes.BAD)


class Product:
    """The two tools the sweep uses, recording their effect in notes as the real product does."""

    def __init__(self) -> None:
        self.notes: list[dict[str, Any]] = []

    def execute(self, request: dict[str, Any]) -> None:
        params = request.get("params")
        name = params.get("name") if isinstance(params, dict) else None  # by position: the real one fails too
        if name == "notes_create":
            self.notes.append({"id": len(self.notes) + 1, "body": params.get("arguments", {}).get("body")})
        elif name == "notes_purge":
            self.notes.clear()

    def request(self, method: str, path: str) -> tuple[int, dict]:
        return 200, {"records": list(self.notes)}


# What a broker forwards to the product for one message the agent sent.

def judged(message: Any) -> list[dict]:
    """The broker as designed: every message judged whole by the filter."""
    decision = FILTER.decide(json.dumps(message).encode())
    return [decision.request] if decision.forward and decision.request else []


def batch_of_one_unwrapped(message: Any) -> list[dict]:
    if isinstance(message, list) and len(message) == 1 and isinstance(message[0], dict):
        return [message[0]]
    return judged(message)


def batch_notifications_forwarded(message: Any) -> list[dict]:
    if isinstance(message, list) and message:
        notification = [isinstance(m, dict) and "id" not in m for m in message]
        return [m for m, n in zip(message, notification) if n] + [r for m, n in zip(message, notification) if not n
                                                                  for r in judged(m)]
    return judged(message)


def batch_judged_once_per_id(message: Any) -> list[dict]:
    if isinstance(message, list) and message and all(isinstance(m, dict) for m in message):
        verdicts = {json.dumps(m.get("id")): FILTER.decide(json.dumps(m).encode()).forward for m in message}
        return [m for m in message if verdicts[json.dumps(m.get("id"))]]
    return judged(message)


def positional_mapped(message: Any) -> list[dict]:
    if isinstance(message, dict) and isinstance(message.get("params"), list) and "id" in message:
        name, *rest = message["params"]
        return [{**message, "params": {"name": name, "arguments": rest[0] if rest else {}}}]
    return judged(message)


def as_designed(message: Any) -> dict:
    """The answer the design gives ``message``, whatever was forwarded: a broken broker that answers as it
    should is found at the product alone."""
    status, reason = shapes.designed_answer(message)
    if status == 202:
        return {"status": 202, "body": None}
    if reason == "result":
        return {"status": 200, "body": {"jsonrpc": "2.0", "id": 1, "result": {}}}
    return {"status": 200, "body": {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "data": {"reason": reason}}}}


def broker(product: Product, arrangement: Callable[[Any], list[dict]]) -> Callable[..., dict]:
    def call(ref: object, method: str, path: str, body: Any) -> dict:
        for request in arrangement(body):
            product.execute(request)
        return as_designed(body)
    return call


def run(arrangement: Callable, named: list, kinds: tuple[str, ...]) -> dict:
    product = Product()
    return shapes.sweep(named, shapes.shapes(kinds), "A", broker(product, arrangement), product, "t", 40)


@settings(max_examples=100, deadline=None, database=None, derandomize=True)
@given(shape=shapes.shapes(EVERY_KIND))
def test_the_designed_answer_is_the_filters(shape):
    """What the sweep expects the broker to answer is what the broker's filter decides, for any shape."""
    builder = object.__new__(shapes.Sweep)  # only its message building: no broker, no product
    builder.count, builder.nonce = 0, "t"
    message, _ = builder.build(shape)
    decision = FILTER.decide(json.dumps(message).encode())
    if decision.forward:
        assert shapes.designed_answer(message) == (200, "result")
    elif decision.response is None:
        assert shapes.designed_answer(message) == (202, "")
    else:
        assert shapes.designed_answer(message) == (200, decision.response["error"]["data"]["reason"])


@pytest.mark.parametrize("named,kinds", [(shapes.ALLOWED_ONLY, (shapes.ALLOWED,)), (shapes.FORBIDDEN, EVERY_KIND)],
                         ids=["TL-1", "TL-2"])
def test_a_broker_that_judges_every_shape_passes_and_every_named_shape_is_sent(named, kinds):
    record = run(judged, named, kinds)
    assert record["named shapes not covered"] == [] and record["messages sent"] >= len(named)


@pytest.mark.parametrize("arrangement", [batch_of_one_unwrapped, batch_notifications_forwarded, batch_judged_once_per_id,
                                         positional_mapped], ids=lambda f: f.__name__)
@pytest.mark.parametrize("named,kinds", [(shapes.ALLOWED_ONLY, (shapes.ALLOWED,)), (shapes.FORBIDDEN, EVERY_KIND)],
                         ids=["TL-1", "TL-2"])
def test_each_broken_arrangement_of_the_class_fails_at_the_product(arrangement, named, kinds):
    """Each way a shape can skip the checks (the mutants of the class) is seen at the product; the broker's
    answer is not what fails it (the fakes answer nothing the design would not, or nothing at all)."""
    with pytest.raises(AssertionError, match="at the product"):
        run(arrangement, named, kinds)


def test_a_product_judge_that_cannot_see_is_broken():
    """A product whose notes never show the allowed bare call: the sweep is broken, not passed."""
    product = Product()
    with pytest.raises(ProofError, match="cannot see"):
        shapes.sweep([], shapes.shapes((shapes.ALLOWED,)), "A", lambda *a: {"status": 200, "body": {}}, product, "t", 1)


def silent(arrangement: Callable[[Any], list[dict]], product: Product) -> Callable[..., dict]:
    """A broker that forwards what ``arrangement`` forwards, and drops the connection of a batch it forwarded
    from (or, with ``judged``, of every batch) unanswered."""
    answer = broker(product, arrangement)

    def call(ref: object, method: str, path: str, body: Any) -> dict:
        forwarded = arrangement(body)
        result = answer(ref, method, path, body)
        if isinstance(body, list) and (forwarded or arrangement is judged):
            raise TargetError("the broker did not answer")
        return result
    return call


def test_a_broker_that_forwards_then_does_not_answer_fails_at_the_product():
    """Silence is broken only when the product shows nothing forbidden: what was executed is judged first."""
    product = Product()
    with pytest.raises(AssertionError, match="at the product"):
        shapes.sweep(shapes.FORBIDDEN, shapes.shapes(EVERY_KIND), "A", silent(batch_of_one_unwrapped, product),
                     product, "t", 1)
    product = Product()
    with pytest.raises(TargetError):
        shapes.sweep(shapes.FORBIDDEN, shapes.shapes(EVERY_KIND), "A", silent(judged, product), product, "t", 1)
