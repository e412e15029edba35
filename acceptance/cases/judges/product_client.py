"""How cases talk to the product: an agent turn that makes given tool calls, a probe's request id header,
the refusal reason of an answer. Shared by the product cases and TL-5 (whose refusals live with the broker's)."""

from __future__ import annotations


def drive(target, profile, principal, ref, calls: list[tuple[str, dict]], reply: str = "done",
          request_id: str = "") -> str:
    """One agent turn in which the model makes ``calls`` (the product's tool, arguments), each by the name
    the agent (``profile``) gives that tool, and then replies; the turn's ``request_id`` goes with each of
    its calls, and the product logs its decisions under it."""
    target.script_model(principal, [{"tool": profile.tool(t), "arguments": a} for t, a in calls] + [{"reply": reply}])
    return target.turn(ref, "please do it", request_id=request_id)


def with_request_id(nonce: str) -> dict[str, str]:
    """The header a probe's request carries its id in (the product logs its answer under it)."""
    return {"X-Request-Id": nonce}


def reason_of(body: object) -> str | None:
    """The refusal reason of an answer, or None: a missing one is an assertion failure, not a crash."""
    return ((body or {}).get("error") or {}).get("reason") if isinstance(body, dict) else None


def answer_differences(answer: dict, missing: dict) -> dict:
    """Where ``answer`` (a broker call's ``{"status", "body"}`` for another principal's record) differs from
    ``missing`` (the same call for a record that does not exist): every field, the HTTP status and the whole
    JSON-RPC body with its error's code, message and data. A difference is an oracle of the record's existence,
    whatever the refusal reason says: the broker answers every request over HTTP 200 with the product's own
    status in the error's data (an HTTP 403 for one and a JSON-RPC error for the other carry the same reason)."""
    def flat(value: object, at: str = "") -> dict:
        if isinstance(value, dict):
            return {k: v for key, item in value.items() for k, v in flat(item, f"{at}.{key}" if at else str(key)).items()}
        return {at: value}
    mine, theirs = flat(answer), flat(missing)
    return {k: (mine.get(k), theirs.get(k)) for k in sorted(mine.keys() | theirs.keys()) if mine.get(k) != theirs.get(k)}
