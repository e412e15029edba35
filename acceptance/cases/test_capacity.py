"""CP-1, CP-2: capacity. The platform's admission arithmetic reproduces the seed's worked example and
refuses what does not fit (CP-1); the platform refuses to wake (or provision) what its model won't admit,
says which resource is short, and starts nothing (CP-2).

CP-1 probes no sandbox: its witness is the platform's capacity model itself (``MODEL`` below names it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ..contract import InstanceRef, Principal
from ..errors import CapacityRefusedError, TargetError
from .evidence import attach

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
    reason = target.capacity_admit(SEED_BUDGET, {**SEED_FLEET, "stored_users": 21}, SEED_HOST)[1]
    probe_log.witness(MODEL, "seed example", f"11536 MB / 77000 MB admitted exactly; next refused: {reason}")


@pytest.mark.case("CP-1", "X", pair="model")
def test_cp1_broken_model_without_brokers_is_detected(target):
    """A capacity model that budgets no broker beside each instance fails the same seed-example check."""
    with target.broken("capacity-without-brokers"):
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
        ok, reason = target.capacity_admit(budget, fleet, host)
        short = {r for r in ("memory", "disk") if base[f"{r}_mb"] > host[f"{r}_mb"]}
        assert ok == (not short), (base, host, reason)
        if not ok:
            assert {r for r in ("memory", "disk") if r in reason} == short, reason
        checked.append(ok)

    check()
    assert True in checked and False in checked  # the search reached both sides of the boundary
    probe_log.witness(MODEL, "monotone need, admission == need within host",
                      f"{len(checked)} examples, {checked.count(True)} admitted")


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
        for call, args in ((target.capacity_need, (budget, fleet)), (target.capacity_admit, (budget, fleet, SEED_HOST))):
            answer, rejected = _attempt(lambda: call(*args))  # noqa: B023 (called at once)
            assert answer is None and rejected is not None, f"{call.__name__}{args} answered {answer!r}"
            assert field in str(rejected), (field, str(rejected))
            assert not isinstance(rejected, CapacityRefusedError)
    answer, rejected = _attempt(lambda: target.capacity_admit(SEED_BUDGET, SEED_FLEET, {**SEED_HOST, "memory_mb": -1}))
    assert answer is None and "memory_mb" in str(rejected), (answer, rejected)
    probe_log.witness(MODEL, "bad inputs", f"{len(BAD)} bad inputs rejected, each naming its field")


# -- CP-2 ----------------------------------------------------------------------------------------------

@pytest.mark.case("CP-2", "refusal", pair="K")
def test_cp2_wake_refused_when_memory_would_not_fit(target, probe_log):
    """With the host's memory set to exactly what the current fleet needs, waking K's sleeping instance is
    refused with a reason naming memory; nothing starts (no process to run in, the fleet unchanged), the
    refusal is in the platform's log, and the host's own limits come back afterwards."""
    ref = target.provision(KIM)
    try:
        target.sleep(ref)
        current = target.fleet_need()
        log_lines = len(target.platform_log().splitlines())
        with target.host_limits(memory_mb=current["memory_mb"]):
            assert target.fleet_need()["host_memory_mb"] == current["memory_mb"]
            woken, refused = _attempt(lambda: target.wake(ref))
            after = target.fleet_need()
        attach("CP-2 wake under a full host", {"fleet before": dict(current), "fleet after": dict(after),
                                               "refusal": repr(refused), "went ahead": woken is not None})
        reason = _refusal(refused, "waking K on a host with no memory to spare")
        assert "memory" in reason and "disk" not in reason, reason
        assert str(current["memory_mb"]) in reason.replace(",", ""), reason
        assert (after["resident"], after["active"], after["memory_mb"]) == \
               (current["resident"], current["active"], current["memory_mb"])
        # Nothing of K runs: the platform's own word (no running sandbox for K's pair) and its fleet (above).
        assert not target.running(KIM)
        assert target.fleet_need()["host_memory_mb"] == current["host_memory_mb"]
        logged = [line for line in target.platform_log().splitlines()[log_lines:] if reason in line]
        assert logged, "the refusal is not in the platform's log"
        probe_log.witness(ref, "wake under a host with no memory to spare", logged[-1][-160:])
    finally:
        target.destroy(ref)


@pytest.mark.case("CP-2", "refusal", pair="L")
def test_cp2_provision_refused_when_disk_is_exhausted(target, probe_log):
    """With the host's disk set to exactly what the stored users need, provisioning L is refused naming
    disk, registers nothing (the same principal provisions once there is room again)."""
    current = target.fleet_need()
    with target.host_limits(disk_mb=current["disk_mb"]):
        made, refused = _attempt(lambda: target.provision(LEE))
        after = target.fleet_need()
    if made is not None:
        target.destroy(made)
    attach("CP-2 provision under a full disk", {"fleet before": dict(current), "fleet after": dict(after),
                                                "refusal": repr(refused), "went ahead": made is not None})
    reason = _refusal(refused, "provisioning L on a host with no disk to spare")
    assert "disk" in reason and "memory" not in reason, reason
    assert str(current["disk_mb"]) in reason.replace(",", ""), reason
    assert after["stored_users"] == current["stored_users"]
    ref = target.provision(LEE)
    try:
        assert target.fleet_need()["stored_users"] == current["stored_users"] + 1
        probe_log.witness(ref, "provision under a full disk", reason[-160:])
    finally:
        target.destroy(ref)


@pytest.mark.case("CP-2", "P", pair="K")
def test_cp2_admitted_wake_works(target):
    """With room for exactly one more instance (the current need plus an active instance and its broker),
    K's instance wakes and answers a turn."""
    ref = target.provision(KIM)
    try:
        target.sleep(ref)
        current = target.fleet_need()
        room = current["memory_mb"] + current["active_instance_mb"] + current["broker_mb"]
        with target.host_limits(memory_mb=room):
            ref = target.wake(ref)
            assert target.turn(ref, "hello")
        assert target.fleet_need()["resident"] == current["resident"] + 1
    finally:
        target.destroy(ref)
