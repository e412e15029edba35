"""LF-1..LF-5, LF-7..LF-9: rotation, revocation and recreation leave no old credential working; a crash loses
nothing and repeats nothing; a frozen instance acts for nobody, is seen by nobody, and a revocation thrown on
it outlives the thaw (SN-1..SN-3, snapshots, are in ``test_snapshots.py``).

A refused capability is judged by what it bought, not by the words of the refusal: the proxy's status and,
decisively, whether the provider recorded a call for that principal because of it (``evidence.replay``).

LF-3 checks
the broker address the driver gives against the sockets the host shows listening in the instance's
network namespace. A frozen instance is taken to be frozen only when the host's own cgroup freezer says so
for every one of its processes, and a wake after it to be a thaw only when the same sandbox process runs again
(``frozen_for_real``, ``thawed_the_same``); otherwise the case is broken, never passed.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import pytest

from acceptance.cases.test_model import BODY
from acceptance.cases.test_process import HostProcess, instance_processes, probe_processes, reached, sightings
from acceptance.errors import ProofError, TargetError
from acceptance.harness import observers as observe
from acceptance.harness.evidence import attach, calls_of, replay
from acceptance.harness.wait import until

pytestmark = pytest.mark.usefixtures("planted")


@pytest.fixture
def gina(dedicated):
    return dedicated("G", "gina")


@pytest.mark.case("LF-1", "refusal", pair="G->proxy")
def test_lf1_rotated_credentials_old_ones_refused(gina, target, refused_by_proxy):
    """After rotation the broker holds a different capability, and the old one buys no model call."""
    old = target.capabilities(gina)["model"]
    target.rotate(gina)
    assert target.capabilities(gina)["model"] != old
    assert not replay(refused_by_proxy, target, gina, old, BODY, "pre-rotation capability").admitted


@pytest.mark.case("LF-1", "P", pair="G->proxy")
def test_lf1_new_credentials_work(gina, target):
    target.rotate(gina)
    before = calls_of(target, gina.principal)
    assert target.model_call(target.capabilities(gina)["model"], BODY)[0] == 200
    assert calls_of(target, gina.principal) == before + 1
    assert target.turn(gina, "still working?") == "ok"


IN_FLIGHT = "the answer held in flight"
HOLD_SECONDS = 2.0


def _held_call(target, ref):
    """Start a model call with the broker's own capability, as the broker makes them, whose answer the provider
    holds for HOLD_SECONDS; return a future of its (status, answer) once the call is at the provider (in
    flight: admitted by the proxy, not yet answered)."""
    from concurrent.futures import ThreadPoolExecutor

    target.script_model(ref.principal, [{"reply": IN_FLIGHT, "delay": HOLD_SECONDS}])
    capability = target.capabilities(ref)["model"]
    user = f"{ref.principal.org}:{ref.principal.user}"
    pool = ThreadPoolExecutor(1)
    future = pool.submit(target.model_call, capability, BODY)
    pool.shutdown(wait=False)
    until(lambda: future.done() or [r for r in target.provider_records()
                                    if r["user"] == user and (r.get("step") or {}).get("reply") == IN_FLIGHT],
          "the held model call reaching the provider")
    if future.done():
        raise TargetError(f"the held call ended before the provider held it: {future.result()}")
    return future


def _held_stream(target, ref):
    """Start a streamed model call with the broker's own capability whose provider sends its first event and
    holds the rest for HOLD_SECONDS; return (the first event, an iterator of the events still to come) once
    that first event reached the caller (the stream is in flight: admitted, relaying, not yet answered)."""
    import time

    target.script_model(ref.principal, [{"reply": IN_FLIGHT, "delay": HOLD_SECONDS}])
    started = time.monotonic()
    status, events = target.model_stream(target.capabilities(ref)["model"], BODY)
    first = next(events, None) if status == 200 else None
    if first is None or IN_FLIGHT in first:
        raise TargetError(f"the held stream did not start as held (status {status}, first event {first!r}): "
                          "nothing was in flight")
    if time.monotonic() - started >= HOLD_SECONDS:
        # Its first event came only once the provider had sent the rest: the rest may be on its way already,
        # so what follows a revocation now would prove nothing either way.
        raise ProofError(f"the stream's first event took {time.monotonic() - started:.1f} s (the provider holds the "
                         f"rest {HOLD_SECONDS} s): it was not relayed as it came, nothing is in flight to revoke")
    return first, events


def _from_provider(event: str) -> bool:
    """An event of the provider's stream relayed (a chunk, its usage, its end), as against the proxy's own word."""
    if event.strip() == "[DONE]":
        return True
    try:
        data = json.loads(event)
    except ValueError:
        return True  # not the proxy's JSON refusal: something relayed
    return not (isinstance(data, dict) and set(data) == {"error"})


@pytest.mark.case("LF-2", "refusal", pair="G->proxy")
def test_lf2_revocation_stops_new_and_in_flight_calls(gina, target, refused_by_proxy):
    """A model call and a streamed one are in flight (admitted, the provider holding the answer, the stream's
    first event relayed) when the kill switch is thrown: the answer is not delivered, and nothing more of the
    stream reaches the caller. After it, the capability the broker holds buys no model call, and a new turn
    causes no call at the provider at all.

    Ways it could fail that the probe looks for: revocation checked only when a call is admitted (the held
    answer is delivered); a revocation recorded but not consulted; one the broker works around with a fresh
    capability; background calls (title, memory review) that slip through after it; a routine rotation that
    lifts it; a stream checked only when it starts (its rest is relayed after the revocation)."""
    held = _held_call(target, gina)
    first, stream = _held_stream(target, gina)
    target.revoke(gina)
    status, answer = held.result(timeout=HOLD_SECONDS + 30)
    after = list(stream)
    attach("LF-2 in flight", {"status": status, "answer": answer, "held for": HOLD_SECONDS,
                              "streamed: first event (before revocation)": first,
                              "streamed: events after revocation": after})
    assert status != 200 and IN_FLIGHT not in json.dumps(answer)
    relayed = [e for e in after if _from_provider(e)]
    assert not relayed and IN_FLIGHT not in "".join(after), "the held stream went on after the revocation"
    capability = target.capabilities(gina)["model"]
    assert not replay(refused_by_proxy, target, gina, capability, BODY, "capability held at revocation").admitted
    before = calls_of(target, gina.principal)
    reply = target.turn(gina, "anything?")
    attach("LF-2 new turn", {"reply": reply, "provider calls caused": calls_of(target, gina.principal) - before})
    assert calls_of(target, gina.principal) == before
    target.rotate(gina)  # a routine rotation after the kill switch does not lift it
    assert not replay(refused_by_proxy, target, gina, target.capabilities(gina)["model"], BODY,
                      "capability rotated in after revocation").admitted


@pytest.mark.case("LF-2", "P", pair="G->proxy")
def test_lf2_before_revocation_works(gina, target):
    """Without revocation the same held call completes with its answer, the same held stream relays the rest
    of the provider's events (the held text among them), and a turn works."""
    held = _held_call(target, gina)
    _, stream = _held_stream(target, gina)  # held at the same time, as in the refusal
    status, answer = held.result(timeout=HOLD_SECONDS + 30)
    assert status == 200 and IN_FLIGHT in json.dumps(answer)
    after = list(stream)
    text = "".join(((json.loads(e).get("choices") or [{}])[0].get("delta") or {}).get("content") or ""
                   for e in after if e.strip() != "[DONE]")
    assert [e for e in after if _from_provider(e)] and IN_FLIGHT in text
    assert target.turn(gina, "hello") == "ok"


def _broker_listens(target, ref, endpoint: str) -> None:
    """The driver's broker address must be a socket the host shows listening in the instance's network
    namespace; otherwise the driver's word is not where the broker is (broken)."""
    where = urlsplit(endpoint)
    listening = observe.listening_ports(target.identity(ref).host_pid)
    if (where.hostname, where.port) not in listening and ("0.0.0.0", where.port) not in listening:
        raise TargetError(f"nothing listens at the broker address the driver gives ({endpoint}) in {ref.key}'s "
                          f"network namespace: {sorted(listening)}")


@pytest.mark.case("LF-3", "refusal", pair="G->proxy")
def test_lf3_recreated_instance_refuses_the_old_token_at_the_same_address(gina, target, refused_by_proxy):
    """The recreated instance's broker has the same address; the previous generation's capability, in use
    before the recreation (so a proxy that remembers admitted capabilities is tested too), buys no model call
    there."""
    old = target.capabilities(gina)["model"]
    if target.model_call(old, BODY)[0] != 200:
        raise ProofError("the current capability was refused before the recreation")
    endpoint = target.broker_endpoint(gina)
    _broker_listens(target, gina, endpoint)
    again = target.recreate(gina)
    assert target.broker_endpoint(again) == endpoint  # the address is reused...
    _broker_listens(target, again, endpoint)
    assert not replay(refused_by_proxy, target, again, old, BODY, "previous generation's capability").admitted


@pytest.mark.case("LF-3", "P", pair="G->proxy")
def test_lf3_new_token_works(gina, target):
    again = target.recreate(gina)
    before = calls_of(target, again.principal)
    assert target.model_call(target.capabilities(again)["model"], BODY)[0] == 200
    assert calls_of(target, again.principal) == before + 1


# -- LF-4 / LF-5: crash and recovery ----------------------------------------------------------------------

@pytest.fixture
def hank(dedicated):
    return dedicated("H", "hank")


@pytest.mark.case("LF-4", "refusal", pair="H")
def test_lf4_crash_mid_run(hank, target, refused_by_proxy):
    """SIGKILL while a run waits on the model: after recovery the conversation is there, the lost run is
    reported not found, and the crashed generation's capability buys no model call (whichever of
    generation or lease fences it)."""
    target.script_model(hank.principal, [{"reply": "too late", "delay": 5}])
    status, started = target.runctl(hank, "POST", "/v1/runs", {"input": "about the crash marker"})
    assert status == 202
    until(lambda: [r for r in target.provider_records() if r["user"] == "org3:hank" and r["purpose"] == "turn"],
          "the run's model call")
    stale = target.capabilities(hank)["model"]
    target.crash(hank)
    successor = target.recover(hank)
    kept = "the crash marker" in target.read_back(successor, "transcript")
    status, answer = until(lambda: (a := target.runctl(successor, "GET", f"/v1/runs/{started['run_id']}"))[0] != 502
                           and a, "the successor's run-control API")
    attach("LF-4 after recovery", {"conversation kept (the run's input in the transcript)": kept,
                                   "the lost run asked of the successor": {"status": status, "answer": answer}})
    assert kept
    assert status == 404
    assert not replay(refused_by_proxy, target, successor, stale, BODY, "the crashed generation's capability").admitted


@pytest.mark.case("LF-4", "P", pair="H")
def test_lf4_successor_is_admitted(hank, target):
    target.crash(hank)
    successor = target.recover(hank)
    assert target.turn(successor, "are you back?") == "ok"


def _notes_with(target, principal, body: str) -> int:
    records = target.person(principal).request("GET", "/api/records?kind=note")[1]["records"]
    return sum(r["body"] == body for r in records)


def _one_operation(target, ref, marker: str, when: str) -> dict:
    """The journal's one operation of the scripted notes_create call carrying ``marker``, after counting at the
    product and in the journal first: more than one note, or more than one operation, for the one call the
    model asked for is an effect repeated (the finding, asserted), not a turn that failed to set the case up;
    no operation at all is (the agent never called the tool: nothing to judge, ProofError)."""
    ops = [o for o in target.journal(ref) if o["request"]["params"]["arguments"].get("body") == marker]
    notes = _notes_with(target, ref.principal, marker)
    attach(f"LF-5 {when}: the one scripted call's effects", {"operations in the journal": ops, "notes at the product": notes})
    assert notes <= 1, f"{notes} notes at the product for the one notes_create call the model asked for ({when})"
    assert len(ops) <= 1, f"{len(ops)} operations in the journal for the one notes_create call the model asked for ({when})"
    if not ops:
        raise ProofError(f"{when}: the journal holds no operation of the scripted notes_create call (marker {marker!r}): "
                         "the agent's turn did not set up the case")
    return ops[0]


@pytest.mark.case("LF-5", "refusal", pair="H->product")
def test_lf5_unknown_effect_is_reconciled_not_repeated(agent_profile, hank, target, probe_log):
    """A note whose creation reached the product but whose answer was lost is 'unknown'; recovery asks the
    product, marks it completed and does not send it again: exactly one note. The effects are counted at the
    product and in the journal before anything else is judged: a lost answer answered by sending the call
    again (two notes, two operations) fails here, before recovery."""
    marker = "effect-with-lost-answer"
    target.script_model(hank.principal, [{"tool": agent_profile.tool("notes_create"), "arguments": {"body": marker}},
                                         {"reply": "done"}])
    with target.broken_lossy_product_link(ref=hank):
        target.turn(hank, "make the note")
    op = _one_operation(target, hank, marker, "before recovery")
    assert op["state"] == "unknown"
    nonce = probe_log.platform_probe(hank, f"recovery reconciles {op['op']}")
    target.recover(hank, request_id=nonce)
    [after] = [o for o in target.journal(hank) if o["op"] == op["op"]]
    assert (after["state"], after["attempts"]) == ("completed", 1)
    assert _notes_with(target, hank.principal, marker) == 1
    probe_log.confirm(nonce, target.platform_log())


@pytest.mark.case("LF-5", "P", pair="H->product")
def test_lf5_not_dispatched_effect_is_retried_once(agent_profile, hank, target):
    marker = "effect-never-sent"
    target.script_model(hank.principal, [{"tool": agent_profile.tool("notes_create"), "arguments": {"body": marker}},
                                         {"reply": "done"}])
    with target.broken_unreachable_product(ref=hank):
        target.turn(hank, "make the note")
    [op] = [o for o in target.journal(hank) if o["request"]["params"]["arguments"].get("body") == marker]
    assert op["state"] == "not_dispatched" and _notes_with(target, hank.principal, marker) == 0
    target.recover(hank)
    [after] = [o for o in target.journal(hank) if o["op"] == op["op"]]
    assert (after["state"], after["attempts"]) == ("completed", 2)
    assert _notes_with(target, hank.principal, marker) == 1


# -- LF-5 at every kill point -------------------------------------------------------------------------------

KILL_POINTS = {
    # where the agent dies relative to one tool call's effect, and the link fault that puts it there
    "before-dispatch": "broken_unreachable_product",
    "after-dispatch-before-answer": "broken_lossy_product_link",
    "after-answer": None,
}


@pytest.mark.case("LF-5", "refusal", pair="H->product")
@pytest.mark.parametrize("point", sorted(KILL_POINTS))
def test_lf5_one_effect_per_operation_whatever_the_kill_point(agent_profile, point, hank, target, probe_log):
    """The agent is SIGKILLed with one effect before dispatch, sent but unanswered, or answered; after
    recovery the product holds exactly one effect of that operation."""
    marker = f"kill-point-{point}"
    target.script_model(hank.principal, [{"tool": agent_profile.tool("notes_create"), "arguments": {"body": marker}},
                                         {"reply": "done"}])
    fault = KILL_POINTS[point]
    if fault is None:
        target.turn(hank, "make the note")
    else:
        with getattr(target, fault)(ref=hank):
            target.turn(hank, "make the note")
    # Two effects of the one call before the kill are the finding already; none, no kill point to judge.
    op = _one_operation(target, hank, marker, f"before the kill {point}")
    target.crash(hank)
    nonce = probe_log.platform_probe(hank, f"recovery after a kill {point}")
    successor = target.recover(hank, request_id=nonce)
    [after] = [o for o in target.journal(successor) if o["op"] == op["op"]]
    assert after["state"] == "completed"
    assert _notes_with(target, hank.principal, marker) == 1
    probe_log.confirm(nonce, target.platform_log())


# -- LF-7 / LF-8 / LF-9: a frozen instance -------------------------------------------------------------------

@pytest.fixture
def fay(dedicated):
    return dedicated("F", "fay")


def frozen_for_real(target, ref) -> list[HostProcess]:
    """Freeze ``ref`` through the platform and return its processes; the host itself must then hold every
    one of them frozen (its cgroup freezer says so). Otherwise the platform did not freeze it, and a case
    about a frozen instance proved nothing (broken)."""
    kept = instance_processes(target, ref)
    target.freeze(ref)
    states = {p.host_pid: observe.frozen(p.host_pid) for p in kept}
    attach(f"{ref.key} frozen: the host's freezer per process", {str(pid): state for pid, state in states.items()})
    if not all(states.values()):
        raise ProofError(f"after freeze the host does not hold every process of {ref.key} frozen: {states}")
    return kept


def thawed_the_same(target, ref, kept: list[HostProcess]) -> None:
    """After the wake: the sandbox frozen before runs again, the very process (host pid and start time), and
    the host no longer holds it frozen. Otherwise the wake was a restart, not a thaw (broken)."""
    sandbox = target.identity(ref).host_pid
    now = {(p.host_pid, p.start) for p in instance_processes(target, ref)}
    if not any((p.host_pid, p.start) in now and p.host_pid == sandbox for p in kept):
        raise ProofError(f"the wake of {ref.key} did not bring back the sandbox frozen before (its pid is {sandbox} "
                         f"now, it was one of {[p.host_pid for p in kept]}): it was not a thaw")
    if observe.frozen(sandbox):
        raise ProofError(f"the wake of {ref.key} returned with its sandbox {sandbox} still frozen")


@pytest.mark.case("LF-7", "refusal", pair="F->proxy")
def test_lf7_revoked_while_frozen_stays_refused_after_the_thaw(fay, target, refused_by_proxy):
    """The kill switch is thrown while F is frozen; after the thaw neither the capability its broker held
    before the freeze nor the one it holds after the thaw buys a model call, and a turn causes no call at
    the provider.

    Ways it could fail that the probe looks for: a thaw that renews the lease without re-checking it (the
    revocation thrown on the suspended lease is lost); a revocation recorded only for running instances;
    a broker that fetches fresh capabilities on the thaw."""
    held = target.capabilities(fay)["model"]
    kept = frozen_for_real(target, fay)
    target.revoke(fay)
    woke = target.wake(fay)
    thawed_the_same(target, woke, kept)
    after = target.capabilities(woke)["model"]
    assert not replay(refused_by_proxy, target, woke, held, BODY, "capability held before the freeze").admitted
    assert not replay(refused_by_proxy, target, woke, after, BODY, "capability the broker holds after the thaw").admitted
    before = calls_of(target, woke.principal)
    reply = target.turn(woke, "anything after the thaw?")
    attach("LF-7 turn after the thaw", {"reply": reply, "provider calls caused": calls_of(target, woke.principal) - before})
    assert calls_of(target, woke.principal) == before


@pytest.mark.case("LF-7", "P", pair="F->proxy")
def test_lf7_unrevoked_capability_works_after_the_thaw(fay, target):
    """Frozen and thawed the same way, without the revocation: the capability the broker holds after the thaw
    buys a model call (the provider records it) and a turn is answered."""
    kept = frozen_for_real(target, fay)
    woke = target.wake(fay)
    thawed_the_same(target, woke, kept)
    before = calls_of(target, woke.principal)
    assert target.model_call(target.capabilities(woke)["model"], BODY)[0] == 200
    assert calls_of(target, woke.principal) == before + 1
    assert target.turn(woke, "back from the cold?") == "ok"


FROZEN_MARKER = "a run asked for while frozen"
ANSWER_WITHIN = 3.0  # a refusal is immediate; an answer later than this was held, not refused


def _runctl_requests(run: str) -> list[tuple[str, str, dict | None]]:
    """One request of each permitted run-control route (TL-4's set) about ``run``."""
    return [("POST", "/v1/runs", {"input": FROZEN_MARKER}), ("GET", f"/v1/runs/{run}", None),
            ("GET", f"/v1/runs/{run}/events", None), ("POST", f"/v1/runs/{run}/stop", {})]


@pytest.mark.case("LF-8", "refusal", pair="platform->F")
def test_lf8_frozen_broker_refuses_all(fay, target, refused_by_proxy):
    """While F is frozen, one request of each permitted run-control route goes through its broker: each is
    refused, and answered while F is still frozen (a request held until the thaw and run then was not
    refused), and none takes effect after the thaw: once a run started after the thaw has completed, the run
    the stop request named (sent while frozen) is not stopped. The model capability its broker holds buys no
    model call while frozen, nor does the one a routine rotation gives it while frozen. A run that exists
    (started before the freeze) is what the GET, events and stop requests name.

    Ways it could fail that the probe looks for: a broker left serving in front of a frozen agent (the
    request waits in the agent's backlog and runs on the thaw), whatever it answers meanwhile (a broker
    that gives up on the frozen agent after a timeout answers an error in time, yet the request it wrote
    is in the agent's socket, and runs on the thaw); a lease left current while frozen, so
    what the broker holds (or a copy of it) still works; a rotation while frozen that admits a lease as
    current again (the suspension lifted by the rotation, not the thaw)."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    target.script_model(fay.principal, [{"reply": "the run before the freeze"}])
    status, started = target.runctl(fay, "POST", "/v1/runs", {"input": "before the freeze"})
    if status != 202:
        raise TargetError(f"F's run before the freeze was not started ({status}): nothing to name")
    until(lambda: (s := target.runctl(fay, "GET", f"/v1/runs/{started['run_id']}"))[0] == 200
          and s[1].get("status") == "completed", "the run before the freeze completing")
    capability = target.capabilities(fay)["model"]
    kept = frozen_for_real(target, fay)
    requests = _runctl_requests(started["run_id"])
    sent = time.monotonic()

    def timed(method, path, body):
        status, answer = target.runctl(fay, method, path, body)
        return status, answer, time.monotonic() - sent

    pool = ThreadPoolExecutor(len(requests))
    futures = [pool.submit(timed, *request) for request in requests]
    pool.shutdown(wait=False)
    end = sent + ANSWER_WITHIN
    while time.monotonic() < end and not all(f.done() for f in futures):
        time.sleep(0.01)
    frozen_replay = replay(refused_by_proxy, target, fay, capability, BODY, "the broker's capability while frozen")
    target.rotate(fay)
    rotated = target.capabilities(fay)["model"]
    rotated_replay = replay(refused_by_proxy, target, fay, rotated, BODY, "capability rotated in while frozen")
    thaw_at = time.monotonic() - sent
    woke = target.wake(fay)
    thawed_the_same(target, woke, kept)
    try:
        answers = [f.result(timeout=60) for f in futures]
    except TimeoutError:
        raise TargetError("a run-control request sent while frozen was not answered a minute after the thaw") from None
    seen = {f"{m} {p}": {"status": s, "answered after (s)": round(t, 3), "answer": a}
            for (m, p, _), (s, a, t) in zip(requests, answers)}
    attach("LF-8 while frozen", {"requests": seen, "thawed after (s)": round(thaw_at, 3),
                                 "capability replayed while frozen": vars(frozen_replay),
                                 "capability rotated in while frozen, replayed": vars(rotated_replay)})
    # Taken effect after the thaw? A request the agent's socket held runs as soon as it is thawed, before a
    # request sent later; so once a run sent after the thaw has completed, one held would have shown. (A
    # schedule that runs the held one later could only hide a fault here, never invent one.)
    status, later = target.runctl(woke, "POST", "/v1/runs", {"input": "a run after the thaw"})
    if status != 202:
        raise TargetError(f"F's run after the thaw was not started ({status}): nothing to wait for")
    until(lambda: (s := target.runctl(woke, "GET", f"/v1/runs/{later['run_id']}"))[0] == 200
          and s[1].get("status") == "completed", "the run after the thaw completing")
    named = target.runctl(woke, "GET", f"/v1/runs/{started['run_id']}")
    attach("LF-8 after the thaw", {"the run the stop named, after the thaw": named})
    assert [r for r, a in seen.items() if a["answered after (s)"] >= thaw_at] == [], "held until the thaw"
    assert named[0] == 200 and named[1].get("status") == "completed", "a stop sent while frozen took effect"
    assert [r for r, a in seen.items() if a["status"] < 400] == []
    assert not frozen_replay.admitted
    assert not rotated_replay.admitted


@pytest.mark.case("LF-8", "P", pair="platform->F")
def test_lf8_thawed_broker_answers_again(fay, target):
    """Frozen, rotated while frozen (as the refusal does) and thawed: the same four run-control requests are
    answered by the agent (the run is started, read, stopped while it runs, its events listed), and the broker's
    capability buys a model call."""
    woke = target.wake(fay)
    kept = frozen_for_real(target, woke)
    target.rotate(woke)
    woke = target.wake(woke)
    thawed_the_same(target, woke, kept)
    # The run is held in flight by a slow model answer so that the stop is a stop of a live run (an agent may
    # answer a stop of a finished run as not found: hermes does), sent once its model call is made (so the
    # scripted answer is used up, not left for a later turn); its events are read after, to the end of the run.
    step = {"reply": "after the thaw", "delay": 3.0}
    target.script_model(woke.principal, [step])
    user = f"{woke.principal.org}:{woke.principal.user}"
    status, started = target.runctl(woke, "POST", "/v1/runs", {"input": FROZEN_MARKER})
    assert status == 202
    until(lambda: [r for r in target.provider_records() if r["user"] == user and r["step"] == step],
          "the run's model call")
    get, events, stop = _runctl_requests(started["run_id"])[1:]
    for method, path, body in (get, stop, events):
        assert target.runctl(woke, method, path, body)[0] == 200, f"{method} {path}"
    before = calls_of(target, woke.principal)
    assert target.model_call(target.capabilities(woke)["model"], BODY)[0] == 200
    assert calls_of(target, woke.principal) > before


@pytest.mark.parametrize("intruder", [pytest.param(n, marks=pytest.mark.case("LF-9", "refusal", pair=f"{n}->F"), id=n)
                                      for n in ("B", "C")])
def test_lf9_frozen_instance_is_invisible(intruder, fay, instances, target, sandbox_host):
    """F frozen: none of its processes (every one the host finds in its pid namespace or cgroup) shows in any
    procfs view of the intruder's sandbox, and none of their numbers, at any pid-namespace level, can be
    signalled or traced from there (PR-1's probe, against a frozen instance).

    Ways it could fail that the probe looks for: freezing done by parking the processes somewhere the
    intruder's namespaces can see; a frozen instance's pid namespace shared, or its host /proc bound, for
    the freezer's own bookkeeping."""
    kept = frozen_for_real(target, fay)
    try:
        numbers = {n for p in kept for n in p.nspids}
        report = probe_processes(sandbox_host(instances[intruder]), numbers)
        attach(f"LF-9 {intruder}->F", {"F's processes (host side)": [vars(p) for p in kept], "report": report})
        assert sightings(report, kept) == []
        assert reached(report, kept) == []
    finally:
        target.wake(fay)


@pytest.mark.case("LF-9", "X", pair="B->F")
def test_lf9_broken_shared_pid_ns_sees_the_frozen_instance(fay, principals, target, sandbox_host):
    """A sandbox sharing the host's pid namespace: the same probe sees F's frozen processes, and signalling
    them answers EPERM (visible, not permitted), not ESRCH: the probe sees a frozen process where one is."""
    kept = frozen_for_real(target, fay)
    try:
        with target.broken_shared_pid_ns(intruder=principals["B"]) as leaky:
            report = probe_processes(sandbox_host(leaky), {n for p in kept for n in p.nspids})
        attach("LF-9 X", {"F's processes": [vars(p) for p in kept], "report": report})
        assert sightings(report, kept)
        assert {report["tried"][str(p.host_pid)]["kill"] for p in kept} == {"EPERM"}
    finally:
        target.wake(fay)
