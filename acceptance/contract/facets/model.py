"""The ``model`` facet: the model path (the proxy, a scriptable upstream provider and its record, the meter,
spend caps); with its check-driver round trip, which compares the meter with what the provider billed.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol, runtime_checkable

from acceptance.contract.checking import OWNER, Checker, check
from acceptance.contract.core import Principal


@runtime_checkable
class ModelPath(Protocol):
    """The model path: the proxy, a scriptable upstream provider and its record, the meter and caps."""

    def model_call(self, capability: str, body: Mapping[str, object], *, request_id: str = "") -> tuple[int, dict]:
        """Present ``capability`` to the model proxy directly (OpenAI style); the status and JSON answer."""

    def script_model(self, principal: Principal, steps: Sequence[Mapping[str, object]]) -> None:
        """Queue provider-mock steps (``{"reply": text}`` or ``{"tool": name, "arguments": {...}}``) for the
        principal's next model calls."""

    def model_stream(self, capability: str, body: Mapping[str, object], *, request_id: str = ""
                     ) -> tuple[int, Iterator[str]]:
        """As ``model_call`` with ``body`` asking for a stream (``"stream": true``): the status, and the data of
        each server-sent event as the caller receives it, yielded as it arrives (a refusal's body is the one
        item). The iterator ends when the proxy ends the stream; the suite reads it across a revocation."""

    def provider_records(self) -> list[dict]:
        """The provider's own record of every request it got, in the order they arrived: ``at`` (when, by the
        provider's clock: seconds since the epoch, the harness's own clock), ``user`` (``org:user``), ``purpose``,
        ``status``, ``stream``, ``request_id``, the tools offered, ``usage`` (``{"input": tokens,
        "output": tokens}`` the provider billed for an answered call), and ``body``: the whole request as it
        arrived (prompt, history, tools), which WD-1 scans for another principal's canaries."""

    def ledger_usage(self) -> Mapping[tuple[str, str, str], Mapping[str, int]]:
        """The proxy's meter per (org, user, purpose) of answered calls: ``calls``, ``input_tokens``,
        ``output_tokens`` as the ledger recorded them (what the platform bills, not re-derived)."""

    def set_spend_cap(self, principal: Principal, usd: float) -> None: ...


METER_SETTLE = 10.0


def _owner_usage(usage: Mapping) -> tuple[int, int, int]:
    """(calls, input tokens, output tokens) the ledger holds for OWNER, all purposes."""
    check(isinstance(usage, Mapping), f"ledger_usage returned {type(usage).__name__}, not a mapping")
    rows = [v for k, v in usage.items() if tuple(k[:2]) == (OWNER.org, OWNER.user)]
    return (sum(int(v["calls"]) for v in rows), sum(int(v["input_tokens"]) for v in rows),
            sum(int(v["output_tokens"]) for v in rows))


def round_trip(c: Checker) -> str:
    """A scripted reply comes back through a turn, the provider records the call, and the meter grows by
    exactly what the provider billed; with credentials, the instance's own capability is answered."""
    t, ref = c.target, c.ref
    word = f"pong{secrets.token_hex(4)}"
    before = len(t.provider_records())
    metered_before = _owner_usage(t.ledger_usage())
    t.script_model(OWNER, [{"reply": word}])
    reply = t.turn(ref, "ping")
    check(word in reply, f"script_model then turn: the scripted reply did not come back ({reply[:120]!r})")
    check(len(t.provider_records()) > before, "provider_records did not grow with the turn's model call")

    def compared() -> tuple[tuple[int, ...], tuple[int, ...]]:
        billed = [r for r in t.provider_records()[before:]
                  if r.get("user") == f"{OWNER.org}:{OWNER.user}" and r.get("status") == 200]
        check(all(isinstance(r.get("usage"), Mapping) for r in billed),
              "provider_records: an answered call's record has no usage ({'input': n, 'output': n})")
        expected = (len(billed), sum(int(r["usage"].get("input", 0)) for r in billed),
                    sum(int(r["usage"].get("output", 0)) for r in billed))
        return tuple(a - b for a, b in zip(_owner_usage(t.ledger_usage()), metered_before)), expected

    # The provider records a call when it arrives, the meter when it is answered (background calls
    # follow the turn): compared once both settle, or as they stand after METER_SETTLE seconds.
    end = time.monotonic() + METER_SETTLE
    added, expected = compared()
    while added != expected and time.monotonic() < end:
        time.sleep(0.1)
        added, expected = compared()
    check(added == expected and expected[1] + expected[2] > 0,
          f"ledger_usage: the turn added (calls, input, output tokens) {added} to {OWNER.org}/{OWNER.user}'s "
          f"meter; the provider billed {expected}")
    t.set_spend_cap(OWNER, 100.0)
    detail = f"script_model + turn, provider_records, ledger_usage (metered {added} as billed), set_spend_cap"
    if "credentials" in c.claimed:
        status, _ = t.model_call(t.capabilities(ref)["model"], {"model": "any", "messages": [
            {"role": "user", "content": "ping"}], "metadata": {"purpose": "turn"}})
        check(status == 200, f"model_call with the instance's own model capability: status {status}")
        detail += f", model_call with the instance's capability (status {status})"
    return detail
