"""MD-1..MD-4: the model path. No key in a sandbox, capabilities scoped to a current generation and
lease, a central spend cap that background calls cannot slip past, and a meter that agrees with the
provider call for call."""

from __future__ import annotations

import base64
import json
import time
from collections import Counter

import pytest

from canaries.known import find_known

pytestmark = pytest.mark.usefixtures("planted")
BODY = {"model": "reference-main", "messages": [{"role": "user", "content": "hi"}], "metadata": {"purpose": "turn"}}


def _refusal(answer: tuple[int, dict]) -> tuple[int, str]:
    status, body = answer
    return status, (body.get("error") or {}).get("reason", "")


# -- MD-1 ---------------------------------------------------------------------------------------------

@pytest.mark.case("MD-1", "refusal", pair="A->provider")
def test_md1_no_provider_key_in_the_sandbox_and_the_adapter_header_is_replaced(
        instances, principals, planted, target, visible_bytes, broker_call):
    """The provider key is nowhere in A's sandbox; the agent's adapter sends a placeholder x-api-key,
    and what the provider receives is the platform's own authorization (the call succeeds), never that
    placeholder."""
    key = planted.platform["PAIRPROOF_PROVIDER_KEY"]
    assert find_known(visible_bytes(instances["A"]), {key}) == set()
    target.script_model(principals["A"], [{"reply": "adapter ok"}])
    answer = broker_call(instances["A"], "POST", "/v1/chat/completions", {**BODY, "user": "someone-else"})
    assert answer["status"] == 200 and answer["body"]["choices"][0]["message"]["content"] == "adapter ok"
    last = target.provider_records()[-1]
    assert (last["status"], last["user"]) == (200, "org1:alice")  # the proxy, not the agent, says who


@pytest.mark.case("MD-1", "P", pair="A->provider")
def test_md1_turn_succeeds(instances, principals, target):
    target.script_model(principals["A"], [{"tool": "notes_list", "arguments": {}}, {"reply": "listed"}])
    assert target.turn(instances["A"], "what notes do I have?") == "listed"


# -- MD-2 ---------------------------------------------------------------------------------------------

@pytest.fixture
def eve(dedicated):
    return dedicated("E", "eve")


@pytest.mark.case("MD-2", "refusal", pair="E->proxy")
def test_md2_old_generation_token_refused(eve, target, refused_by_proxy):
    """A capability of generation 1, replayed after the instance was recreated, is refused as stale."""
    old = target.capabilities(eve)["model"]
    target.recreate(eve)
    assert refused_by_proxy(eve, old, BODY) == (403, "generation_stale")


@pytest.mark.case("MD-2", "refusal", pair="E->proxy")
def test_md2_ended_lease_token_refused(eve, target, refused_by_proxy):
    """A capability whose lease ended (the instance went to sleep) is refused, though unexpired."""
    old = target.capabilities(eve)["model"]
    target.sleep(eve)
    assert refused_by_proxy(eve, old, BODY) == (403, "no_current_lease")
    target.wake(eve)
    assert refused_by_proxy(eve, old, BODY) == (403, "lease_stale")


@pytest.mark.case("MD-2", "refusal", pair="B->proxy")
def test_md2_token_bent_to_another_instance_refused(instances, target, refused_by_proxy):
    """B's capability with its claims edited to name A's instance fails its signature."""
    token = target.capabilities(instances["B"])["model"]
    prefix, body, mac = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    claims.update(i=instances["A"].key, u="alice")
    forged = base64.urlsafe_b64encode(json.dumps(claims, separators=(",", ":"), sort_keys=True).encode()).rstrip(b"=")
    assert refused_by_proxy(instances["B"], f"{prefix}.{forged.decode()}.{mac}", BODY) == (403, "bad_signature")
    assert refused_by_proxy(instances["A"], target.capabilities(instances["A"])["grant"], BODY) == (403, "wrong_kind")


@pytest.mark.case("MD-2", "P", pair="A->proxy")
def test_md2_current_token_works(instances, target):
    status, body = target.model_call(target.capabilities(instances["A"])["model"], BODY)
    assert status == 200 and body["choices"]


# -- MD-3 ---------------------------------------------------------------------------------------------

@pytest.mark.case("MD-3", "refusal", pair="F->proxy")
def test_md3_cap_is_central_and_background_calls_count(target, refused_by_proxy, dedicated):
    """With a cap of a few calls, turns stop at the cap; the title and memory-review calls are metered
    against it too, and once it is reached every purpose is refused."""
    ref = dedicated("F", "frank")
    target.set_spend_cap(ref.principal, 0.0005)
    replies = [target.turn(ref, f"message {i}") for i in range(12)]
    assert "model unavailable: spend_exhausted" in replies
    ledger = {p: n for (o, u, p), n in target.ledger_counts().items() if (o, u) == ("org3", "frank")}
    assert ledger.get("title", 0) >= 1 and ledger.get("memory_review", 0) >= 1
    status, reason = refused_by_proxy(ref, target.capabilities(ref)["model"],
                                      {**BODY, "metadata": {"purpose": "memory_review"}})
    assert (status, reason) == (429, "spend_exhausted")


@pytest.mark.case("MD-3", "P", pair="A->proxy")
def test_md3_under_cap_works(instances, principals, target):
    target.script_model(principals["A"], [{"reply": "still under the cap"}])
    assert target.turn(instances["A"], "one more") == "still under the cap"


# -- MD-4 ---------------------------------------------------------------------------------------------

SETTLE_SECONDS = 15.0  # longer than any scripted reply delay (LF-4 holds one for 5 s)

@pytest.mark.case("MD-4", "refusal", pair="A,B,C->proxy")
def test_md4_ledger_equals_provider_count_per_org_user_purpose(instances, principals, target, probe_log):
    """After turns with tool calls by A, B and C, the proxy's ledger and the provider's own record agree
    exactly, per org, user and purpose (main turns, titles, memory reviews)."""
    nonces = {}
    for name, ref in instances.items():
        nonces[name] = probe_log.platform_probe(ref, "a turn with a tool call, metered and recorded by the provider")
        target.script_model(principals[name], [{"tool": "notes_list", "arguments": {}}, {"reply": "done"}])
        target.turn(ref, "list my notes", request_id=nonces[name])

    def both() -> tuple[dict, dict]:
        provider = Counter((r["user"].split(":")[0], r["user"].split(":")[1], r["purpose"] or "other")
                           for r in target.provider_records() if r["status"] == 200)
        return dict(target.ledger_counts()), dict(provider)

    # The provider records a call when it arrives, the proxy meters it when the answer comes back: a call
    # another case left in flight (a delayed reply to an agent that crashed) is in one and not yet in the
    # other. Wait, with a deadline, for the calls in flight to land; a real difference stays one.
    deadline = time.monotonic() + SETTLE_SECONDS
    ledger, provider = both()
    while ledger != provider and time.monotonic() < deadline:
        time.sleep(0.1)
        ledger, provider = both()
    assert ledger == provider
    provider_record = "\n".join(json.dumps(r, sort_keys=True) for r in target.provider_records())
    for nonce in nonces.values():
        probe_log.confirm(nonce, provider_record)
