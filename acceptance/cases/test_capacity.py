"""CP-1, CP-2: capacity. The platform's admission arithmetic reproduces the seed's worked example and
refuses what does not fit (CP-1); the platform refuses to wake (or provision) what its model won't admit,
says which resource is short, and starts nothing (CP-2).

CP-1 probes no sandbox: it asks the platform's capacity model (``MODEL`` below names it), and its proof is
the platform's own log of the assessment it made for the probe's request id.

CP-2 does not take the fleet the driver reports (``fleet_need``) on its word: the host shows which sandboxes
run (``acceptance.harness.observers``: this process's descendants in namespaces of their own, and the processes in an
instance's namespaces). A host running more sandboxes than the platform counts as resident is a finding
(admission counts a fleet smaller than the one it runs: a sandbox left running after sleep, a second agent);
fewer means the driver's figure is not the platform's (broken). Where it cannot look: sandboxes that are
not this process's descendants (a platform on another host, or under a container engine's daemon) are
observed only through their namespaces, and memory the platform uses outside any sandbox not at all.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acceptance.contract import InstanceRef, Principal
from acceptance.errors import CapacityRefusedError, ProofError, TargetError
from acceptance.harness import observers as observe
from acceptance.harness.evidence import attach

# The seed's example: 10 resident, 4 active, 20 stored; 640 MB idle, 1,024 MB active, 60 MB broker,
# 3,000 MB shared memory + headroom (split 2,000 + 1,000 by choice). Its 77,000 MB of disk is split by
# choice into 5,000 MB headroom, 20 volumes of 2,000 MB and 32,000 MB of snapshots.
SEED_BUDGET = {"shared_memory_mb": 2000, "memory_headroom_mb": 1000, "idle_instance_mb": 640,
               "active_instance_mb": 1024, "broker_mb": 60, "volume_mb": 2000, "disk_headroom_mb": 5000}
SEED_FLEET = {"resident": 10, "active": 4, "stored_users": 20, "snapshots_mb": 32000}
SEED_HOST = {"memory_mb": 11536, "disk_mb": 77000}
T = TypeVar("T")
MODEL = InstanceRef(Principal("model", "platform", "capacity"), "capacity-model", 0)
KIM = Principal("K", "org3", "kim")
LEE = Principal("L", "org3", "lee")
# One falsifying example, raised as its AssertionError (a finding), never a group of them.
PROPERTY = settings(derandomize=True, max_examples=60, deadline=None, database=None, report_multiple_bugs=False)


def _attempt(operation: Callable[[], T]) -> tuple[T | None, Exception | None]:
    """(result, None) if the platform went ahead, (None, the error) if it refused: the case can then clean
    up what an operation that should have been refused made, and assert on the reason it gave."""
    try:
        return operation(), None
    except TargetError as exc:
        return None, exc


def _refusal(error: Exception | None, what: str) -> str:
    """The capacity refusal's reason. The platform going ahead is a finding; any other failure (a target
    error, a timeout) is the harness's, raised as it is (broken), never taken for a refusal."""
    assert error is not None, f"{what} was not refused: the platform went ahead"
    if not isinstance(error, CapacityRefusedError):
        raise error
    return error.reason


def _names(reason: str, resource: str, needed: int, host: int) -> None:
    """The reason names the resource, the MB needed and the MB the host has (digits, separators aside)."""
    plain = reason.replace(",", "").replace("_", "")
    assert resource in reason and str(needed) in plain and str(host) in plain, reason


# -- CP-1 ----------------------------------------------------------------------------------------------

def seed_example_problems(target) -> list[str]:
    """What the platform's arithmetic gets wrong about the seed's worked example (empty: all of it right):
    the fleet needs exactly 11,536 MB of memory and 77,000 MB of disk; on a host of exactly that size it is
    admitted; one more active or resident instance is refused naming memory (and not disk); one more stored
    user is refused naming disk (and not memory), each reason with the MB needed and the MB there."""
    problems = []
    need = dict(target.capacity_need(SEED_BUDGET, SEED_FLEET))
    if need != {"memory_mb": 11536, "disk_mb": 77000}:
        problems.append(f"the seed fleet needs {need}, the seed says 11536 MB memory and 77000 MB disk")
    ok, reason = target.capacity_admit(SEED_BUDGET, SEED_FLEET, SEED_HOST)
    if not ok:
        problems.append(f"the seed fleet on a host of exactly its size was refused: {reason}")
    more_active = {**SEED_FLEET, "resident": 11, "active": 5}  # 11,536 + 1,024 + 60
    more_resident = {**SEED_FLEET, "resident": 11}  # 11,536 + 640 + 60
    more_stored = {**SEED_FLEET, "stored_users": 21}  # 77,000 + 2,000
    for fleet, resource, other, needed, host in ((more_active, "memory", "disk", 12620, 11536),
                                                 (more_resident, "memory", "disk", 12236, 11536),
                                                 (more_stored, "disk", "memory", 79000, 77000)):
        ok, reason = target.capacity_admit(SEED_BUDGET, fleet, SEED_HOST)
        plain = reason.replace(",", "").replace("_", "")
        if ok or resource not in reason or other in reason or str(needed) not in plain or str(host) not in plain:
            problems.append(f"{fleet} on the seed host: admitted={ok}, reason {reason!r}; expected a refusal naming "
                            f"{resource} only, {needed} MB needed of {host}")
    return problems


@pytest.mark.case("CP-1", "refusal", pair="model")
def test_cp1_seed_example_reproduced_and_the_next_instance_refused(target, probe_log):
    """The seed's fleet needs exactly 11,536 MB of memory and 77,000 MB of disk; on a host of exactly that
    size it is admitted, one more active or resident instance is refused naming memory, one more stored
    user is refused naming disk."""
    problems = seed_example_problems(target)
    attach("CP-1 seed example", {"checks": 5, "problems": problems})
    assert problems == []
    nonce = probe_log.platform_probe(MODEL, "seed example with one more stored user")
    ok, reason = target.capacity_admit(SEED_BUDGET, {**SEED_FLEET, "stored_users": 21}, SEED_HOST, request_id=nonce)
    assert not ok and "disk" in reason, reason
    probe_log.confirm(nonce, target.platform_log())


@pytest.mark.case("CP-1", "X", pair="model")
def test_cp1_broken_model_without_brokers_is_detected(target):
    """A capacity model that budgets no broker beside each instance fails the same seed-example check."""
    with target.broken_capacity_without_brokers():
        problems = seed_example_problems(target)
    attach("CP-1 X", {"problems": problems})
    assert problems != []


budgets = st.fixed_dictionaries({name: st.integers(0, 4096) for name in SEED_BUDGET})


@st.composite
def fleets(draw) -> dict[str, int]:
    resident = draw(st.integers(0, 60))
    return {"resident": resident, "active": draw(st.integers(0, resident)),
            "stored_users": draw(st.integers(0, 200)), "snapshots_mb": draw(st.integers(0, 10**6))}


@pytest.mark.case("CP-1", "refusal", pair="model")
def test_cp1_need_is_monotone_and_admission_is_need_within_host(target, probe_log):
    """More instances, users, snapshots or a larger allowance never need less; a fleet is admitted exactly
    when both needs are within the host, and a refusal names exactly the resources that do not fit."""
    checked = []
    # The first example's admission carries the probe's request id; the platform's log of it is the proof.
    nonce = probe_log.platform_probe(MODEL, "admission of the first generated fleet")

    @PROPERTY
    @given(budget=budgets, fleet=fleets(), grow=st.tuples(*(st.integers(0, 5) for _ in range(4))),
           bigger=st.sampled_from(sorted(SEED_BUDGET)), slack=st.tuples(st.integers(-3, 3), st.integers(-3, 3)))
    def check(budget, fleet, grow, bigger, slack):
        base = target.capacity_need(budget, fleet)
        more_idle, more_active, more_stored, more_snap = grow
        grown = {"resident": fleet["resident"] + more_idle + more_active, "active": fleet["active"] + more_active,
                 "stored_users": fleet["stored_users"] + more_stored, "snapshots_mb": fleet["snapshots_mb"] + more_snap}
        for other in (target.capacity_need(budget, grown), target.capacity_need({**budget, bigger: budget[bigger] + 1}, fleet)):
            assert other["memory_mb"] >= base["memory_mb"] and other["disk_mb"] >= base["disk_mb"], (base, other)
        host = {"memory_mb": max(0, base["memory_mb"] + slack[0]), "disk_mb": max(0, base["disk_mb"] + slack[1])}
        ok, reason = target.capacity_admit(budget, fleet, host, request_id="" if checked else nonce)
        short = {r for r in ("memory", "disk") if base[f"{r}_mb"] > host[f"{r}_mb"]}
        assert ok == (not short), (base, host, reason)
        if not ok:
            assert {r for r in ("memory", "disk") if r in reason} == short, reason
        checked.append(ok)

    check()
    assert True in checked and False in checked  # the search reached both sides of the boundary
    probe_log.confirm(nonce, target.platform_log())


BAD = [
    ({**SEED_BUDGET, "broker_mb": -60}, SEED_FLEET, "broker_mb"),
    ({**SEED_BUDGET, "idle_instance_mb": 640.5}, SEED_FLEET, "idle_instance_mb"),
    ({**SEED_BUDGET, "volume_mb": "2000"}, SEED_FLEET, "volume_mb"),
    (SEED_BUDGET, {**SEED_FLEET, "resident": True}, "resident"),
    (SEED_BUDGET, {**SEED_FLEET, "active": 11}, "active"),
    (SEED_BUDGET, {**SEED_FLEET, "snapshots_mb": -1}, "snapshots_mb"),
    ({k: v for k, v in SEED_BUDGET.items() if k != "broker_mb"}, SEED_FLEET, "broker_mb"),
]


@pytest.mark.case("CP-1", "refusal", pair="model")
def test_cp1_bad_inputs_are_rejected_naming_the_field(target, probe_log):
    """Negative, fractional, textual or boolean counts, more active than resident and a missing allowance
    are rejected with a message naming the field, by both the arithmetic and the admission."""
    for budget, fleet, field in BAD:
        nonce = probe_log.platform_probe(MODEL, f"admission of a bad {field}")
        for call, args in ((target.capacity_need, (budget, fleet)), (target.capacity_admit, (budget, fleet, SEED_HOST))):
            rid = nonce if call == target.capacity_admit else ""
            answer, rejected = _attempt(lambda: call(*args, request_id=rid))  # noqa: B023 (called at once)
            assert answer is None and rejected is not None, f"{call.__name__}{args} answered {answer!r}"
            assert field in str(rejected), (field, str(rejected))
            assert not isinstance(rejected, CapacityRefusedError)
        probe_log.confirm(nonce, target.platform_log())
    answer, rejected = _attempt(lambda: target.capacity_admit(SEED_BUDGET, SEED_FLEET, {**SEED_HOST, "memory_mb": -1}))
    assert answer is None and "memory_mb" in str(rejected), (answer, rejected)


# -- CP-2 ----------------------------------------------------------------------------------------------

def _host_sandboxes(target) -> set[frozenset[str]]:
    """The platform's sandboxes as the host shows them, once they agree with the platform's resident count
    (or a deadline passes): more on the host than the platform counts is a finding, fewer is the driver's."""
    claimed = target.fleet_need()["resident"]
    seen = observe.settle(lambda: set(observe.sandboxes()), lambda groups: len(groups) == claimed)
    if len(seen) < claimed:
        raise TargetError(f"the driver reports {claimed} resident instances, the host shows {len(seen)} sandboxes")
    assert len(seen) == claimed, (f"the host runs {len(seen)} sandboxes of this platform but its capacity model "
                                  f"counts {claimed} resident: admission is judged on a smaller fleet than runs")
    return seen


def _instance_processes(target, ref: InstanceRef) -> tuple[dict[str, str], list[observe.HostProcess]]:
    """``ref``'s namespaces and the processes the host shows in them; none means the driver's identity of a
    running instance is not what runs (broken)."""
    namespaces = dict(target.identity(ref).namespaces)
    found = observe.members(namespaces)
    if not found:
        raise ProofError(f"the host shows no process in the namespaces the driver gives for {ref.key}")
    return namespaces, found


@pytest.mark.case("CP-2", "refusal", pair="K")
def test_cp2_wake_refused_when_memory_would_not_fit(target, probe_log):
    """With the host's memory one MB short of what the current fleet plus one more *active* instance and its
    broker needs (the P control wakes K with exactly that much), waking K's sleeping instance is refused with
    a reason naming memory; nothing starts (no process to run in, the fleet unchanged), the refusal is in the
    platform's log, and the host's own limits come back afterwards.

    Ways it could fail that the probe looks for: no admission on wake; admission after the sandbox started;
    a wake counted as an idle instance (it wakes to run a turn) or without its broker, which the boundary
    admits where the model would not."""
    ref = target.provision(KIM)
    try:
        namespaces, _ = _instance_processes(target, ref)
        target.sleep(ref)
        left = observe.settle(lambda: observe.members(namespaces), lambda found: not found)
        assert not left, f"K's sandbox still runs after sleep: {[(p.pid, p.comm) for p in left]}"
        before = _host_sandboxes(target)
        current = target.fleet_need()
        log_lines = len(target.platform_log().splitlines())
        nonce = probe_log.platform_probe(ref, "wake under a host with no memory to spare")
        short = current["memory_mb"] + current["active_instance_mb"] + current["broker_mb"] - 1
        with target.host_limits(memory_mb=short):
            assert target.fleet_need()["host_memory_mb"] == short
            woken, refused = _attempt(lambda: target.wake(ref, request_id=nonce))
            after = target.fleet_need()
        attach("CP-2 wake under a full host", {"fleet before": dict(current), "fleet after": dict(after),
                                               "refusal": repr(refused), "went ahead": woken is not None})
        reason = _refusal(refused, "waking K on a host with no memory to spare")
        assert "memory" in reason and "disk" not in reason, reason
        assert str(short) in reason.replace(",", ""), reason
        assert (after["resident"], after["active"], after["memory_mb"]) == \
               (current["resident"], current["active"], current["memory_mb"])
        # Nothing of K runs: the platform's own word (no running sandbox for K's pair), its fleet (above),
        # and the host's own view of the sandboxes.
        assert not target.running(KIM)
        assert _host_sandboxes(target) == before, "a sandbox started though the wake was refused"
        # A sleeping instance has no sandbox to run in; the contract does not fix the error's type.
        for operation in (lambda: target.exec(ref, ["/bin/true"]), lambda: target.turn(ref, "hello")):
            try:
                operation()
            except Exception:
                continue
            raise AssertionError("K's instance ran a command or a turn after its wake was refused")
        assert target.fleet_need()["host_memory_mb"] == current["host_memory_mb"]
        logged = [line for line in target.platform_log().splitlines()[log_lines:] if reason in line]
        assert logged, "the refusal is not in the platform's log"
        probe_log.confirm(nonce, target.platform_log())
    finally:
        target.destroy(ref)


@pytest.mark.case("CP-2", "refusal", pair="L")
def test_cp2_provision_refused_when_disk_is_exhausted(target, probe_log):
    """With the host's disk set to exactly what the stored users need, provisioning L is refused naming
    disk, registers nothing (the same principal provisions once there is room again)."""
    current = target.fleet_need()
    before = _host_sandboxes(target)
    nonce = probe_log.platform_probe(LEE, "provision under a full disk")
    with target.host_limits(disk_mb=current["disk_mb"]):
        made, refused = _attempt(lambda: target.provision(LEE, request_id=nonce))
        after = target.fleet_need()
    if made is not None:
        target.destroy(made)
    attach("CP-2 provision under a full disk", {"fleet before": dict(current), "fleet after": dict(after),
                                                "refusal": repr(refused), "went ahead": made is not None})
    reason = _refusal(refused, "provisioning L on a host with no disk to spare")
    assert "disk" in reason and "memory" not in reason, reason
    assert str(current["disk_mb"]) in reason.replace(",", ""), reason
    assert after["stored_users"] == current["stored_users"]
    assert _host_sandboxes(target) == before, "a sandbox started though the provision was refused"
    probe_log.confirm(nonce, target.platform_log())
    ref = target.provision(LEE)
    try:
        assert target.fleet_need()["stored_users"] == current["stored_users"] + 1
    finally:
        target.destroy(ref)


@pytest.mark.case("CP-2", "P", pair="K")
def test_cp2_admitted_wake_works(target):
    """With room for exactly one more instance (the current need plus an active instance and its broker),
    K's instance wakes and answers a turn; the host shows its sandbox (new, below this process, in K's
    namespaces), so the refusals' host-side observation can see this platform's sandboxes at all."""
    ref = target.provision(KIM)
    try:
        target.sleep(ref)
        before = _host_sandboxes(target)
        current = target.fleet_need()
        room = current["memory_mb"] + current["active_instance_mb"] + current["broker_mb"]
        with target.host_limits(memory_mb=room):
            ref = target.wake(ref)
            assert target.turn(ref, "hello")
        assert target.fleet_need()["resident"] == current["resident"] + 1
        namespaces, _ = _instance_processes(target, ref)
        new = _host_sandboxes(target) - before
        if len(new) != 1 or observe.sandbox_of(namespaces, new) is None:
            raise ProofError("the host-side observer does not see K's new sandbox below this process: CP-2's "
                             "'nothing starts' cannot be observed for this target")
    finally:
        target.destroy(ref)
