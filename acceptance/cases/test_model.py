"""MD-1..MD-4: the model path. No key in a sandbox, capabilities scoped to a current generation and
lease, a central spend cap that background calls cannot slip past, and a meter that agrees with the
provider call for call."""

from __future__ import annotations

import base64
import json
import threading

import pytest

from acceptance.cases.judges import metering, presented
from acceptance.cases.judges.detectors import tokens_in
from acceptance.errors import ProofError
from acceptance.harness.evidence import attach, calls_of, replay
from acceptance.harness.wait import settle, until
from canaries.known import find_known

pytestmark = pytest.mark.usefixtures("planted")
BODY = {"model": "reference-main", "messages": [{"role": "user", "content": "hi"}], "metadata": {"purpose": "turn"}}


def _refusal(answer: tuple[int, dict]) -> tuple[int, str]:
    status, body = answer
    return status, (body.get("error") or {}).get("reason", "")


# -- MD-1 ---------------------------------------------------------------------------------------------

def _key_in_sandbox(visible_bytes, ref, key: str, own: set[str], label: str) -> set:
    """The provider key in every byte the sandbox can see (files, /proc environ and cmdline), in any encoding
    ``find_known`` knows. The same bytes must hold the instance's own canaries, or the dump did not look."""
    seen = visible_bytes(ref)
    found = tokens_in(seen, f"the dump of {label}")
    attach(f"MD-1 {label}", {"bytes scanned": len(seen), "own canaries found": len(own & found)})
    if own and not own <= found:
        raise ProofError(f"the dump of {ref.key} did not carry its own canaries out: it did not look")
    return find_known(seen, {key})


@pytest.mark.case("MD-1", "refusal", pair="A->provider")
def test_md1_no_provider_key_in_the_sandbox_and_the_adapter_header_is_replaced(
        instances, principals, planted, target, visible_bytes, broker_call, pairproof_run):
    """The provider key is nowhere in A's sandbox; the agent's adapter sends a placeholder x-api-key and a
    user id of its own choosing, and the call that reaches the provider (found by its unique answer) was
    authorized with the platform's key (the provider answered it) and names the end user the capability
    says, never the one the agent claimed.

    Ways it could fail that the probe looks for: the key in the environment, a file, a process's cmdline,
    raw or encoded; the adapter's header passed through; the agent's user id trusted."""
    key = planted.platform["PAIRPROOF_PROVIDER_KEY"]
    assert _key_in_sandbox(visible_bytes, instances["A"], key, planted.of("A"), "A's sandbox") == set()
    marker = f"adapter ok {pairproof_run.nonce}"
    target.script_model(principals["A"], [{"reply": marker}])
    answer = broker_call(instances["A"], "POST", "/v1/chat/completions", {**BODY, "user": "someone-else"})
    records = [r for r in target.provider_records() if (r.get("step") or {}).get("reply") == marker]
    attach("MD-1 the call at the provider", {"broker answer": answer, "provider records": records})
    assert answer["status"] == 200 and answer["body"]["choices"][0]["message"]["content"] == marker
    assert [(r["status"], r["user"]) for r in records] == [(200, "org1:alice")]  # the proxy, not the agent, says who


@pytest.mark.case("MD-1", "P", pair="A->provider")
def test_md1_turn_succeeds(agent_profile, instances, principals, target):
    target.script_model(principals["A"], [{"tool": agent_profile.tool("notes_list"), "arguments": {}}, {"reply": "listed"}])
    assert target.turn(instances["A"], "what notes do I have?") == "listed"


@pytest.mark.case("MD-1", "X", pair="B->provider")
def test_md1_broken_key_in_sandbox_is_detected(principals, planted, target, visible_bytes):
    """A sandbox launched with the provider key in its environment: the same scan finds it."""
    key = planted.platform["PAIRPROOF_PROVIDER_KEY"]
    with target.broken_secret_in_env(principal=principals["B"]) as leaky:
        assert _key_in_sandbox(visible_bytes, leaky, key, set(), "leaky sandbox") != set()


# -- MD-2 ---------------------------------------------------------------------------------------------

@pytest.fixture
def eve(dedicated):
    return dedicated("E", "eve")


def _in_use(target, capability: str) -> str:
    """A capability the proxy has admitted already (as the broker's is, by the time it is stolen): a proxy
    that remembers what it admitted must still refuse it once it is no longer current."""
    status, _ = target.model_call(capability, BODY)
    if status != 200:
        raise ProofError(f"the current capability was refused ({status}) before the change under test")
    return capability


def _refused_unspent(refused_by_proxy, target, ref, capability: str, label: str) -> tuple[int, str]:
    """(status, reason) of the replayed capability, once it is shown to have caused no call at the provider: a
    refusal that is only the answer withheld after the provider was called is no refusal."""
    result = replay(refused_by_proxy, target, ref, capability, BODY, label)
    assert result.reached_provider == 0, f"{label}: the proxy forwarded the call before refusing its answer"
    return result.status, result.reason


@pytest.mark.case("MD-2", "refusal", pair="E->proxy")
def test_md2_old_generation_token_refused(eve, target, refused_by_proxy):
    """A capability of generation 1, used and then replayed after the instance was recreated, is refused as
    stale and reaches no provider."""
    old = _in_use(target, target.capabilities(eve)["model"])
    target.recreate(eve)
    assert _refused_unspent(refused_by_proxy, target, eve, old, "old generation") == (403, "generation_stale")


@pytest.mark.case("MD-2", "refusal", pair="E->proxy")
def test_md2_ended_lease_token_refused(eve, target, refused_by_proxy):
    """A capability whose lease ended (the instance went to sleep) is refused, though unexpired, and reaches
    no provider, though the proxy admitted it before."""
    old = _in_use(target, target.capabilities(eve)["model"])
    target.sleep(eve)
    assert _refused_unspent(refused_by_proxy, target, eve, old, "lease ended") == (403, "no_current_lease")
    target.wake(eve)
    assert _refused_unspent(refused_by_proxy, target, eve, old, "lease replaced") == (403, "lease_stale")


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


def _stolen_and_live(target, ref) -> list[presented.Artifact]:
    """Every artifact ``capabilities`` names for ``ref``, taken as a thief would; its model capability shown live
    (the proxy, presented it directly, answers it): refused later from another sandbox, it was refused there,
    not dead already."""
    held = dict(target.capabilities(ref))
    if "model" in held:
        _in_use(target, held["model"])
    return [presented.Artifact(ref.principal, kind, value) for kind, value in sorted(held.items())]


@pytest.mark.case("MD-2", "refusal", pair="A,C,G->H")
def test_md2_no_artifact_presented_from_a_sandbox_buys_anything(instances, target, dedicated, sandbox_host):
    """From inside H's sandbox (org1), every authority artifact the platform holds for another holder (every
    kind ``capabilities`` names: grant, model capability, run-control key) of A (same organization), C (another
    organization) and G (same organization, an old generation: taken, then G recreated) is presented in every
    place an agent can put a credential (each header, the query, the body) on every route H's broker forwards
    (both model styles, /mcp). None buys anything for anyone but H: no call at the provider recorded for A, C
    or G under the request's id, no note in their records (``judges.presented`` says what it enumerates and
    what it cannot). H's own purchases, judged the same way, are the proof that the sweep sees.

    Ways it could fail that the probe looks for: the broker or the proxy honouring a capability the agent
    presents (in x-api-key, Authorization, a query or the body) instead of the instance's own, whether because
    its organization matches, because it verifies, or because it is a grant an MCP client sent along."""
    presenter = dedicated("H", "hana", org="org1")
    old = dedicated("G", "gia", org="org1")
    stale = [presented.Artifact(old.principal, kind, value, "old generation")
             for kind, value in sorted(dict(target.capabilities(old)).items())]
    target.recreate(old)
    artifacts = [*_stolen_and_live(target, instances["A"]), *_stolen_and_live(target, instances["C"]), *stale]
    readers = [instances["A"].principal, instances["C"].principal, old.principal]
    sweep = presented.run(target, sandbox_host(presenter), target.broker_endpoint(presenter), presenter.principal,
                          artifacts, readers)
    attach("MD-2 authority sweep", sweep.summary())
    assert sweep.findings() == []


@pytest.mark.case("MD-2", "P", pair="H->H")
def test_md2_own_current_artifacts_buy_from_own_sandbox(target, dedicated, sandbox_host):
    """The same sweep from inside H's own sandbox with H's own current artifacts: on every route, every request
    that carries the artifact in a header (where no filter stops it first) buys H a call at the provider or a
    note in H's records, judged as the refusal judges (what the refusal counts as bought)."""
    own = dedicated("H", "hana", org="org1")
    artifacts = _stolen_and_live(target, own)
    sweep = presented.run(target, sandbox_host(own), target.broker_endpoint(own), own.principal, artifacts, [])
    attach("MD-2 authority sweep, own artifacts", sweep.summary())
    mine = f"{own.principal.org}:{own.principal.user}"
    bought = {p.id for p, who in sweep.bought if who == mine}
    missed = [p.show() for p in sweep.requests if p.place.startswith("header ") and p.id not in bought]
    assert sweep.findings() == [] and missed == []


@pytest.mark.case("MD-2", "P", pair="A->proxy")
def test_md2_current_token_works(instances, target):
    status, body = target.model_call(target.capabilities(instances["A"])["model"], BODY)
    assert status == 200 and body["choices"]


# -- MD-3 ---------------------------------------------------------------------------------------------

# More than the cap lets turns make (12 turns of a few calls each reach it), so a cap that counts every
# purpose is reached by background calls alone well before.
BACKGROUND_CALLS = 60
CAPPED_TURNS = 12
BACKGROUND_DEADLINE = 30.0  # from a turn's reply to its background calls metered (hermes: a thread after the reply)


def background_purposes(agent_profile) -> tuple[str, ...]:
    """The purposes the agent's background calls are metered under (its profile's ``[background]``). A profile
    that says none: broken, never passed (a case that saw no background call proved nothing about them)."""
    purposes = tuple(agent_profile.background.get("purposes", ()))
    if not purposes:
        raise ProofError(f"profile {agent_profile.name} does not say how its agent makes background calls "
                         "([background]): nothing to count")
    return purposes


def background_instance(dedicated, agent_profile, name: str, user: str, org: str = "org3"):
    """A dedicated instance started with the settings under which its agent makes a background call after every
    turn (the profile's ``[background].settings``; none for an agent that always does)."""
    settings = agent_profile.background.get("settings")
    return dedicated(name, user, org=org, **({"settings": settings} if settings else {}))


def metered(target, principal, purposes) -> dict[str, int]:
    """The calls the proxy's ledger holds for ``principal`` under each of ``purposes``."""
    return {p: v["calls"] for (o, u, p), v in target.ledger_usage().items()
            if (o, u) == (principal.org, principal.user) and p in purposes}


def answered(target, principal, purposes) -> dict[str, int]:
    """The calls the provider answered for ``principal`` under each of ``purposes`` (the purpose it saw)."""
    user = f"{principal.org}:{principal.user}"
    counts = dict.fromkeys(purposes, 0)
    for r in target.provider_records():
        if r["user"] == user and r["status"] == 200 and r["purpose"] in counts:
            counts[r["purpose"]] += 1
    return counts


def await_background(target, principal, purposes, label: str) -> dict[str, int]:
    """The background calls the provider answered for ``principal``, once every purpose of ``purposes`` has one:
    what the agent did, whatever the meter made of it (the ledger is what the cases then check). HarnessTimeout
    (broken) if that does not happen within BACKGROUND_DEADLINE: nothing to count."""
    seen: dict[str, int] = {}

    def every_purpose() -> dict[str, int] | None:
        seen.update(answered(target, principal, purposes))
        return dict(seen) if all(seen.values()) else None

    return until(every_purpose, lambda: f"{label}: a background call of each purpose after the turn (nothing to count; "
                 f"{seen} at the provider)", BACKGROUND_DEADLINE, every=0.1)


@pytest.mark.case("MD-3", "refusal", pair="F->proxy")
def test_md3_cap_is_central_and_background_calls_count(agent_profile, target, refused_by_proxy, dedicated):
    """A turn makes the agent's background calls (the purposes its profile names: the reference agent's title
    and memory review; hermes's memory review) and they are metered; then, with a cap of a few calls, turns
    stop at the cap and every purpose is refused. Then the other way round: a second user's background calls
    alone (titles, memory reviews) reach the same cap, and then a main turn is refused. A run in which the agent
    made no background call is broken, not passed.

    Ways it could fail that the probe looks for: no cap; background calls unmetered; background calls
    metered but left out of the sum the cap is checked against (turns alone reach the cap, which hides it
    from the first half); a cap per purpose or per instance rather than per user (a new instance of the
    same user would start afresh)."""
    purposes = background_purposes(agent_profile)
    ref = background_instance(dedicated, agent_profile, "F", "frank")
    before = calls_of(target, ref.principal)
    target.turn(ref, "message 0")
    background = await_background(target, ref.principal, purposes, "frank's first turn")
    first = calls_of(target, ref.principal) - before
    target.set_spend_cap(ref.principal, 0.0005)
    # A turn the cap stops reaches the provider with no call at all, whatever the agent then says (its reply
    # text is the agent's own; the reason is checked at the proxy below).
    reached = []
    for i in range(1, CAPPED_TURNS + 1):
        before = calls_of(target, ref.principal)
        target.turn(ref, f"message {i}")
        reached.append(calls_of(target, ref.principal) - before)
        if reached[-1] == 0:
            break
    attach("MD-3 provider calls per turn", {"first turn, under the default cap": first,
                                            "its background calls, at the provider": background,
                                            "in the ledger": metered(target, ref.principal, purposes),
                                            "capped turns": reached})
    assert 0 in reached, f"every one of {len(reached)} capped turns reached the provider ({reached}): the cap stopped none"
    assert all(metered(target, ref.principal, purposes).get(p, 0) >= 1 for p in purposes)
    status, reason = refused_by_proxy(ref, target.capabilities(ref)["model"],
                                      {**BODY, "metadata": {"purpose": "memory_review"}})
    assert (status, reason) == (429, "spend_exhausted")
    # The cap is the user's, not an instance's: frank's next instance starts where frank's last one stopped.
    target.destroy(ref)
    again = dedicated("F", "frank")
    assert refused_by_proxy(again, target.capabilities(again)["model"], BODY) == (429, "spend_exhausted")
    # A user of its own (no other case spends as flo): the cap is reached by its background calls alone.
    flo = dedicated("F", "flo")
    target.set_spend_cap(flo.principal, 0.0005)
    capability = target.capabilities(flo)["model"]
    background = []
    for i in range(BACKGROUND_CALLS):
        status, _ = target.model_call(capability, {**BODY, "metadata": {"purpose": ("title", "memory_review")[i % 2]}})
        background.append(status)
        if status not in (200, 429):
            raise ProofError(f"background call {i + 1} of {flo.key} answered {status}: the cap was not what stopped it")
        if status == 429:
            break
    attach("MD-3 background calls until refused", {"statuses": background})
    assert background[-1] == 429, f"{len(background)} background calls never reached the cap"
    if background[0] != 200:
        raise ProofError(f"{flo.key}'s first background call was refused ({background[0]}): its user had spent the cap "
                         "before, so no background call was counted towards it")
    assert refused_by_proxy(flo, capability, BODY) == (429, "spend_exhausted")


@pytest.mark.case("MD-3", "P", pair="A->proxy")
def test_md3_under_cap_works(instances, principals, target):
    target.script_model(principals["A"], [{"reply": "still under the cap"}])
    assert target.turn(instances["A"], "one more") == "still under the cap"


# -- MD-4 ---------------------------------------------------------------------------------------------

SETTLE_SECONDS = 15.0  # longer than any scripted reply delay (LF-4 holds one for 5 s)


FIELDS = ("calls", "input_tokens", "output_tokens")


def metered_tables(target, users: set[tuple[str, str]], *, settle_on_equal: bool = True) -> tuple[dict, dict]:
    """(the proxy's ledger, the provider's own record) of answered calls per (org, user, purpose), for
    ``users`` only: each a (calls, input tokens, output tokens) triple, once both agree or SETTLE_SECONDS
    passed. The provider records a call when it arrives, the proxy meters it when the answer comes back: a
    call another case left in flight is in one and not yet in the other; a real difference stays one. With
    ``settle_on_equal=False`` (the X control, which expects a difference) it returns as soon as they differ."""
    def both() -> tuple[dict, dict]:
        # The purpose the provider saw the call tagged with; a call it saw untagged is one nobody attributed.
        provider: dict = {}
        for r in target.provider_records():
            if r["status"] != 200:
                continue
            key = (r["user"].split(":")[0], r["user"].split(":")[1], r["purpose"] or "unattributed")
            if key[:2] not in users:
                continue
            usage = r.get("usage") or {}
            calls, tokens_in, tokens_out = provider.get(key, (0, 0, 0))
            provider[key] = (calls + 1, tokens_in + int(usage.get("input", 0)), tokens_out + int(usage.get("output", 0)))
        ledger = {k: tuple(int(v[f] or 0) for f in FIELDS) for k, v in target.ledger_usage().items() if k[:2] in users}
        return ledger, provider

    return settle(both, lambda seen: (seen[0] != seen[1]) != settle_on_equal, SETTLE_SECONDS, 0.1)


def _delta(after: dict, before: dict) -> dict:
    zero = (0, 0, 0)
    return {k: tuple(a - b for a, b in zip(after.get(k, zero), before.get(k, zero)))
            for k in set(after) | set(before) if after.get(k, zero) != before.get(k, zero)}


def _show(table: dict) -> dict:
    return {"/".join(k): dict(zip(FIELDS, v)) for k, v in sorted(table.items())}


# Three users of their own (two organizations), each with one instance started as the agent makes background
# calls (the profile's [background]): what MD-4 meters is theirs alone.
METERED = (("N", "nina", "org1"), ("O", "omar", "org1"), ("Q", "quinn", "org2"))


@pytest.mark.case("MD-4", "refusal", pair="N,O,Q->proxy")
def test_md4_ledger_equals_provider_count_per_org_user_purpose(agent_profile, target, dedicated, probe_log):
    """After a turn with a tool call by each of N, O (one organization) and Q (another), the proxy's ledger and
    the provider's own record agree exactly per org, user and purpose, in calls and in input and output tokens,
    in total and in what the turns added; and what they added is what a turn with a tool call makes: at least
    two main-turn calls (the tool round and the answer) and the agent's background calls (the purposes its
    profile names, each at least once: without one the case is broken, not passed), so the equality is between
    non-empty counts. The agent streams its main-turn calls: each turn's calls at the provider (found by the
    turn's request id) must include a streamed one, so the equality covers calls metered from a stream's final
    usage chunk (a run with streaming off is broken, not a pass).

    Ways it could fail that the probe looks for: background calls (title, memory review) unmetered; tool
    rounds unmetered; a call metered at other tokens than the provider billed (a streamed call metered at
    zero, or from an estimate although the provider reported its usage); calls metered under another
    purpose, user or organization; a call metered that the provider never answered."""
    purposes = background_purposes(agent_profile)
    instances = {name: background_instance(dedicated, agent_profile, name, user, org) for name, user, org in METERED}
    principals = {name: ref.principal for name, ref in instances.items()}
    users = {(p.org, p.user) for p in principals.values()}
    ledger_before, provider_before = metered_tables(target, users)
    nonces = {}
    for name, ref in instances.items():
        nonces[name] = probe_log.platform_probe(ref, "a turn with a tool call, metered and recorded by the provider")
        target.script_model(principals[name], [{"tool": agent_profile.tool("notes_list"), "arguments": {}}, {"reply": "done"}])
        target.turn(ref, "list my notes", request_id=nonces[name])
    background = {name: await_background(target, p, purposes, f"{name}'s turn") for name, p in principals.items()}
    ledger, provider = metered_tables(target, users)
    added_ledger, added_provider = _delta(ledger, ledger_before), _delta(provider, provider_before)
    records = target.provider_records()
    streamed = {name: sum(1 for r in records if r.get("request_id") == nonce and r.get("stream") and r["status"] == 200)
                for name, nonce in nonces.items()}
    attach("MD-4 records compared", {"ledger": _show(ledger), "provider": _show(provider),
                                     "added by this case (provider)": _show(added_provider),
                                     "added by this case (ledger)": _show(added_ledger),
                                     "background calls at the provider, per user": background,
                                     "calls compared": sum(v[0] for v in provider.values()),
                                     "streamed calls among them, per turn": streamed})
    for p in principals.values():
        made = {purpose: added_provider.get((p.org, p.user, purpose), (0, 0, 0))[0] for purpose in ("turn", *purposes)}
        tokens = sum(v[1] + v[2] for k, v in added_provider.items() if k[:2] == (p.org, p.user))
        if made["turn"] < 2 or not all(made[purpose] for purpose in purposes) or tokens <= 0:
            raise ProofError(f"{p.name}'s turn did not make the calls it should at the provider ({made}, {tokens} tokens): "
                             "nothing was there to compare")
    for name, count in streamed.items():
        if not count:
            raise ProofError(f"{name}'s turn made no streamed model call (none at the provider with its request "
                             "id and stream true): the ledger would be compared on whole answers only")
    assert added_ledger == added_provider
    assert ledger == provider
    provider_record = "\n".join(json.dumps(r, sort_keys=True) for r in records)
    for nonce in nonces.values():
        probe_log.confirm(nonce, provider_record)


@pytest.mark.case("MD-4", "X", pair="M->proxy")
def test_md4_broken_unmetered_call_is_detected(target, dedicated):
    """A model call that reaches the provider without passing the proxy's meter (a component wired to the
    provider directly) shows as a difference between the same two tables."""
    ref = dedicated("M", "mia")
    users = {(ref.principal.org, ref.principal.user)}
    target.turn(ref, "hello")
    before = metered_tables(target, users)
    with target.broken_unmetered_model_call(principal=ref.principal):
        pass
    ledger, provider = metered_tables(target, users, settle_on_equal=False)
    attach("MD-4 X", {"before": [_show(t) for t in before], "after": [_show(t) for t in (ledger, provider)]})
    assert before[0] == before[1] and ledger != provider


# -- MD-5 ---------------------------------------------------------------------------------------------

# Long enough that a caller who hangs up after the first event leaves dozens of events still to relay (8
# characters each): the proxy finds the caller gone while the provider is still sending.
LONG_REPLY = " ".join(f"word{i}" for i in range(80))
HOLD = 1.5  # seconds the provider holds a call after its first event: the caller hangs up, or is revoked, meanwhile
TITLE_ASK = "Title for: a weekend in the hills"  # recognised by its shape (no purpose declared): 'title'
NOT_MADE = {
    "timed out at the proxy": "the proxy's provider timeout is 60 s and the lab provider holds a call 30 s at most",
    "errored mid-stream upstream": "the lab provider cannot be scripted to cut its own stream",
    "retried after an upstream 5xx": "the lab provider cannot be scripted to answer 5xx, and the proxy does not retry",
    "anthropic style": "the contract's model_call and model_stream speak the OpenAI style only",
}


def _drain(events) -> int:
    return sum(1 for _ in events)


def _in_flight(target, request_id: str) -> bool:
    return any(r.get("request_id") == request_id for r in target.provider_records())


@pytest.mark.case("MD-5", "refusal", pair="W,Y->provider")
def test_md5_every_billed_token_is_in_the_ledger_whatever_became_of_the_call(
        agent_profile, target, dedicated, pairproof_run, probe_log):
    """Every call shape the suite can make is reconciled against the provider's own bill (the reference, not
    the proxy's view of the call), per org, user and purpose (``judges/metering.py``): a whole answer under a
    declared purpose, one recognised as a title by its shape, one nobody can attribute (metered
    'unattributed'), a stream read to its end, a stream whose caller hangs up after the first event, a whole
    answer and a stream refused to the caller after the provider answered (the instance revoked while they
    were in flight), and a turn with a tool call (the agent's own streamed rounds and background calls). The
    provider billed each; the ledger must hold each, at the tokens the provider billed.

    Ways it could fail that the probe looks for: a hung-up stream metered at what the caller read (or an
    estimate of it) or not at all; an answer withheld after revocation not metered ('not delivered, not
    billed'); a recognised background call metered under another purpose than the one it was forwarded
    tagged with; any call metered at other tokens than billed."""
    wren = background_instance(dedicated, agent_profile, "W", "wren")
    yara = dedicated("Y", "yara")
    people = [wren.principal, yara.principal]
    ids = {name: f"md5-{pairproof_run.nonce}-{i}"[:64] for i, name in enumerate(
        ("whole, declared", "whole, recognised title", "whole, unattributed", "stream, read to the end",
         "stream, caller hung up", "whole, withheld after revocation", "stream, withheld after revocation",
         "turn with a tool call"))}
    ids["turn with a tool call"] = probe_log.platform_probe(wren, "a turn whose calls are reconciled with the provider's bill")
    shapes = [metering.Shape(name, rid, yara.principal if "revocation" in name else wren.principal, purpose)
              for (name, rid), purpose in zip(ids.items(), ("turn", "title", "unattributed", "turn", "turn", "turn",
                                                            "turn", ""))]
    since = metering.mark(target, people)
    capability = target.capabilities(wren)["model"]
    asks = {"whole, declared": BODY,
            "whole, recognised title": {"model": "reference-aux", "messages": [{"role": "user", "content": TITLE_ASK}]},
            "whole, unattributed": {"model": "reference-aux", "messages": [{"role": "user", "content": "hello there"}]}}
    for name, body in asks.items():
        status, answer = target.model_call(capability, body, request_id=ids[name])
        if status != 200:
            raise ProofError(f"{name}: the proxy answered {status} {answer}: no call to reconcile")
    status, events = target.model_stream(capability, BODY, request_id=ids["stream, read to the end"])
    relayed = _drain(events)
    target.script_model(wren.principal, [{"reply": LONG_REPLY, "delay": HOLD}])
    status, events = target.model_stream(capability, BODY, request_id=ids["stream, caller hung up"])
    first = next(events, None)
    events.close()  # the caller hangs up with one event read; the provider sends the rest after HOLD
    if status != 200 or first is None or "word0" in first:
        raise ProofError(f"the hung-up stream did not start as held (status {status}, first {first!r})")
    # Refused after the provider answered: both in flight at the provider when the instance is revoked.
    target.script_model(yara.principal, [{"reply": "held", "delay": HOLD}, {"reply": LONG_REPLY, "delay": HOLD}])
    own = target.capabilities(yara)["model"]
    outcome: dict[str, object] = {}
    whole = threading.Thread(target=lambda: outcome.update(whole=target.model_call(
        own, BODY, request_id=ids["whole, withheld after revocation"])[0]))
    whole.start()
    until(lambda: _in_flight(target, ids["whole, withheld after revocation"]), "the withheld call at the provider")
    status, events = target.model_stream(own, BODY, request_id=ids["stream, withheld after revocation"])
    first_held = next(events, None)
    target.revoke(yara)
    outcome["stream"] = (status, first_held, list(events))
    whole.join(timeout=30)
    target.script_model(wren.principal, [{"tool": agent_profile.tool("notes_list"), "arguments": {}}, {"reply": "done"}])
    target.turn(wren, "list my notes", request_id=ids["turn with a tool call"])
    await_background(target, wren.principal, background_purposes(agent_profile), "wren's turn")
    result = metering.reconcile(target, since, shapes, people, not_made=NOT_MADE)
    attach("MD-5 reconciliation", {**result.summary(), "events of the stream read to its end": relayed,
                                   "withheld whole answer's status": outcome.get("whole"),
                                   "withheld stream (status, first event, the rest)": str(outcome["stream"])[:400]})
    if "[DONE]" in str(outcome["stream"][2]):
        raise ProofError("the stream in flight at revocation was relayed to its end: it was not refused after the "
                         "provider answered, so that shape was not made")
    if outcome.get("whole") in (None, 200):
        raise ProofError(f"the call in flight at revocation was answered {outcome.get('whole')}: it was not refused "
                         "after the provider answered, so that shape was not made")
    probe_log.confirm(ids["turn with a tool call"], "\n".join(json.dumps(r, sort_keys=True) for r in target.provider_records()))
    assert result.missing == {}, "tokens the provider billed that the ledger does not hold (or holds otherwise)"


@pytest.mark.case("MD-5", "X", pair="M->provider")
def test_md5_broken_call_past_the_meter_is_reconciled_as_missing(target, dedicated):
    """A call the provider bills that never passed the meter (a component wired to the provider directly):
    the same reconciliation names its tokens as billed and not metered."""
    ref = dedicated("M", "mia")
    since = metering.mark(target, [ref.principal])
    with target.broken_unmetered_model_call(principal=ref.principal):
        pass
    result = metering.reconcile(target, since, [], [ref.principal], expect_equal=False)
    attach("MD-5 X", result.summary())
    key = f"{ref.principal.org}/{ref.principal.user}/title"
    assert result.missing.get(key, {}).get("calls") == 1 and result.missing[key]["input_tokens"] > 0
