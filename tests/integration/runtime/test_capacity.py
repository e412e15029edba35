"""The capacity model's arithmetic and the controller's admission, on real sandboxes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runtime import capacity
from runtime.capacity import SEED_EXAMPLE, Budget, Fleet, Host, admit, need
from runtime.controller import Controller
from runtime.errors import CapacityRefused, ConfigError

SEED_BUDGET, SEED_FLEET = SEED_EXAMPLE
B = capacity.REFERENCE_BUDGET


def test_seed_example_needs_11536_mb_memory_and_77000_mb_disk():
    assert need(SEED_BUDGET, SEED_FLEET) == capacity.Need(memory_mb=11536, disk_mb=77000)


def test_each_term_counts_once():
    """One more idle instance costs idle + broker; turning it active costs active - idle; a stored user a volume."""
    base = need(SEED_BUDGET, SEED_FLEET)
    idle = need(SEED_BUDGET, Fleet(11, 4, 20, 32000))
    active = need(SEED_BUDGET, Fleet(11, 5, 20, 32000))
    stored = need(SEED_BUDGET, Fleet(10, 4, 21, 32000))
    assert idle.memory_mb - base.memory_mb == 640 + 60
    assert active.memory_mb - idle.memory_mb == 1024 - 640
    assert (stored.memory_mb, stored.disk_mb - base.disk_mb) == (base.memory_mb, 2000)


def test_a_host_of_exactly_the_need_admits_and_one_mb_less_refuses_naming_the_resource():
    assert admit(SEED_BUDGET, SEED_FLEET, Host(11536, 77000)).ok
    memory = admit(SEED_BUDGET, SEED_FLEET, Host(11535, 77000))
    assert (memory.ok, memory.reason) == (False, "memory: 11536 MB needed for 10 resident (4 active), host has 11535 MB")
    disk = admit(SEED_BUDGET, SEED_FLEET, Host(11536, 76999))
    assert (disk.ok, disk.reason) == (False, "disk: 77000 MB needed for 20 stored users (32000 MB snapshots), "
                                             "host has 76999 MB")
    both = admit(SEED_BUDGET, SEED_FLEET, Host(0, 0))
    assert not both.ok and both.reason.startswith("memory: ") and "; disk: " in both.reason


@pytest.mark.parametrize(("build", "message"), [
    (lambda: Fleet(3, 4, 0, 0), "fleet.active is 4 but fleet.resident is 3"),
    (lambda: Fleet(-1, 0, 0, 0), "fleet.resident is -1: give a number >= 0"),
    (lambda: Fleet(1, 0, 1.5, 0), "fleet.stored_users is 1.5 \\(float\\): give a whole number"),
    (lambda: Fleet(True, 0, 0, 0), "fleet.resident is True \\(bool\\)"),
    (lambda: Host(-5, 0), "host.memory_mb is -5"),
    (lambda: Budget(1, 1, 1, 1, "60", 1, 1), "budget.broker_mb is '60' \\(str\\)"),
    (lambda: Budget.of({"broker_mb": 1}), "budget has missing shared_memory_mb.*: give exactly"),
    (lambda: Host.of({"memory_mb": 1, "disk_mb": 1, "cpu": 2}), "host has unknown cpu"),
])
def test_bad_input_is_refused_naming_the_field_and_the_fix(build, message):
    with pytest.raises(ConfigError, match=message):
        build()


def test_host_measurement_reads_memtotal_and_free_disk(tmp_path: Path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemFree:  1000 kB\nMemTotal:       2097152 kB\n")
    host = capacity.measure_host(tmp_path, meminfo)
    assert host.memory_mb == 2048 and host.disk_mb > 0


# -- the controller's admission -----------------------------------------------------------------------

def _run() -> str:
    return f"cap-{os.getpid()}"


def _cgroups(controller: Controller) -> list[str]:
    """The run's instance cgroups, in every hierarchy."""
    dirs = dict(controller.hierarchy.run_dirs()).get(controller.run, [])
    return sorted(str(cg) for d in dirs for cg in d.iterdir() if cg.is_dir())


@pytest.fixture
def roomy(root):
    c = Controller(root, _run(), host=Host(1 << 20, 1 << 20))
    yield c
    c.close()


def test_a_refused_wake_starts_nothing_and_changes_nothing(roomy):
    """With memory for exactly one woken instance, the second wake is refused naming memory; the instance
    stays asleep with no sandbox and no cgroup, and its registry record is as it was."""
    a = roomy.provision("org1", "alice")
    b = roomy.provision("org1", "bob")
    roomy.wake(a.id)
    assert roomy.fleet() == Fleet(resident=1, active=0, stored_users=2, snapshots_mb=0)
    one_more = need(B, Fleet(2, 1, 2, 0))
    roomy.host = Host(one_more.memory_mb - 1, 1 << 20)
    before = roomy.get(b.id)
    cgroups_before = _cgroups(roomy)
    with pytest.raises(CapacityRefused) as refused:
        roomy.wake(b.id)
    assert refused.value.reason == (f"memory: {one_more.memory_mb} MB needed for 2 resident (1 active), "
                                    f"host has {one_more.memory_mb - 1} MB")
    assert f"wake of {b.id} refused by the capacity model" in str(refused.value)
    assert roomy.get(b.id) == before
    assert b.id not in roomy._sandboxes
    assert _cgroups(roomy) == cgroups_before
    assert roomy.fleet().resident == 1
    roomy.host = Host(one_more.memory_mb, 1 << 20)
    assert roomy.wake(b.id).state == "running"


def test_waking_a_running_instance_and_recreating_it_are_not_refused_at_a_full_host(roomy):
    """A wake of a running instance admits nothing new; recreate releases its share before waking again."""
    a = roomy.provision("org1", "alice")
    roomy.wake(a.id)
    roomy.host = Host(need(B, Fleet(1, 1, 1, 0)).memory_mb, need(B, Fleet(1, 1, 1, 0)).disk_mb)
    assert roomy.wake(a.id).state == "running"
    assert roomy.recreate(a.id).generation == a.generation + 1
    roomy.sleep(a.id)
    assert roomy.wake(a.id).state == "running"


def test_a_refused_provision_writes_nothing(roomy):
    roomy.provision("org1", "alice")
    full = need(B, Fleet(0, 0, 1, 0)).disk_mb
    roomy.host = Host(1 << 20, full)
    with pytest.raises(CapacityRefused, match="disk: .* needed for 2 stored users"):
        roomy.provision("org1", "bob")
    assert [r.user for r in roomy.instances()] == ["alice"]
    roomy.host = Host(1 << 20, full + B.volume_mb)
    assert roomy.provision("org1", "bob").user == "bob"


def test_a_turn_in_progress_counts_as_active(roomy):
    """While the agent works on a turn the instance is active; afterwards it is idle again."""
    a = roomy.provision("org1", "alice")
    roomy.wake(a.id)
    seen = []
    real = roomy.agent_api

    def spying(instance_id, method, path, body=None, **options):
        if method == "POST":  # the turn's start
            seen.append(roomy.fleet().active)
        return real(instance_id, method, path, body, **options)

    roomy.agent_api = spying
    roomy.turn(a.id, "hello")
    assert seen == [1]
    assert roomy.fleet().active == 0


def test_the_default_host_is_measured(root):
    c = Controller(root, _run())
    try:
        now = capacity.measure_host(c.state)
        assert c.host.memory_mb == now.memory_mb
        # Free disk moves with whatever else writes to this file system meanwhile.
        assert abs(c.host.disk_mb - now.disk_mb) < 1024, (c.host, now)
        assert c.budget == capacity.REFERENCE_BUDGET
    finally:
        c.close()
