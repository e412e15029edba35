"""Ten instances woken at once under admission: the ones that fit wake, the others are refused with the
reason, and none is left half-started (no sandbox, no broker, no cgroup, not recorded running)."""

from __future__ import annotations

import pytest

from runtime import capacity
from runtime.errors import InstanceError, SandboxError

N = 10


def _leftovers(c, instance_id: str) -> list[str]:
    """What of a refused wake is still there: a sandbox, a broker, a cgroup, a registry state of running."""
    found = []
    try:
        c.sandbox(instance_id)
        found.append("sandbox")
    except InstanceError:
        pass
    try:
        c.broker(instance_id)
        found.append("broker")
    except InstanceError:
        pass
    record = c.get(instance_id)
    if record.state == "running":
        found.append("registry says running")
    for _, dirs in c.hierarchy.run_dirs():
        found += [str(d) for run_dir in dirs for d in run_dir.glob(f"{instance_id}-g*")]
    return found


def test_simultaneous_wakes_admit_only_what_fits_and_leave_nothing_half_started(platform_controller):
    c = platform_controller
    b = c.budget
    ids = [c.provision("org1", f"user{i}").id for i in range(N)]
    # Room for the first wake's active allowance and for four more instances beside it, at most: a wake is
    # admitted counting every other admitted instance (at least idle) and itself active.
    base = b.shared_memory_mb + b.memory_headroom_mb
    c.host = capacity.Host(memory_mb=base + b.active_instance_mb + b.broker_mb + 4 * (b.idle_instance_mb + b.broker_mb),
                           disk_mb=c.host.disk_mb)
    outcomes = c.wake_many(ids)
    by = {status: [o for o in outcomes if o.status == status] for status in ("woke", "refused", "failed")}
    assert [o.instance for o in outcomes] == ids
    assert by["failed"] == []
    assert 1 <= len(by["woke"]) <= 5 and len(by["woke"]) + len(by["refused"]) == N
    assert all("memory" in o.detail for o in by["refused"])
    assert {o.instance: _leftovers(c, o.instance) for o in by["refused"]} == {o.instance: [] for o in by["refused"]}
    for o in by["woke"]:
        assert c.agent_api(o.instance, "GET", "/v1/runs/run_none")[0] == 404  # its agent answers: whole
    assert capacity.admit(b, c.fleet(), c.host).ok


def test_wakes_that_fail_once_started_are_undone_whole(platform_controller, monkeypatch):
    """Wakes admitted and started (sandbox, cgroup, lease, broker) whose agent is then not ready in time fail,
    and leave nothing of themselves: no sandbox, broker, cgroup, current lease, nor a registry state of running;
    the same instances then wake whole."""
    c = platform_controller
    ids = [c.provision("org1", f"user{i}").id for i in range(3)]

    def never_ready(proc):
        raise SandboxError(f"agent of {proc.spec.instance_id} not ready (the test's)")

    monkeypatch.setattr(c, "_wait_ready", never_ready)
    outcomes = c.wake_many(ids)
    monkeypatch.undo()
    assert [(o.status, "the test's" in o.detail) for o in outcomes] == [("failed", True)] * len(ids)
    assert {i: _leftovers(c, i) for i in ids} == {i: [] for i in ids}
    assert {i: c.platform.current.standing(i) for i in ids} == dict.fromkeys(ids)
    assert [o.status for o in c.wake_many(ids)] == ["woke"] * len(ids)


def test_a_second_wake_of_the_same_instance_while_one_is_in_progress_is_refused(platform_controller):
    c = platform_controller
    rec = c.provision("org1", "alice")
    outcomes = c.wake_many([rec.id, rec.id])
    statuses = sorted(o.status for o in outcomes)
    # Either the second waited for nothing (the first had finished: it found the instance awake) or it was
    # told a wake is in progress; never two sandboxes.
    assert statuses in (["woke", "woke"], ["failed", "woke"])
    assert all("already in progress" in o.detail for o in outcomes if o.status == "failed")
    [(_, mounts)] = [(run, dirs) for run, dirs in c.hierarchy.run_dirs() if run == c.run]
    assert [len(list(d.glob(f"{rec.id}-g*"))) for d in mounts] == [1] * len(mounts)  # one cgroup, one sandbox


@pytest.mark.parametrize("n", [0])
def test_waking_nothing_is_nothing(platform_controller, n):
    assert platform_controller.wake_many([]) == []
