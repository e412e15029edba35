"""Benchmarks: snapshot and restore of a 50 MB volume, and waking an instance from each depth.

Each benchmark times the operation it names with ``benchmark.pedantic`` (its preparation in ``setup``, outside
the timing), so pytest-benchmark's table, its JSON export and ``--benchmark-compare`` carry the real figures.

A wake is timed to the same readiness condition whatever its depth: the first permitted request answered
(``GET /v1/runs/run_none`` through the broker's platform side, answered 404 by the agent itself).

- *cold*: the first wake of a just-provisioned instance (new cgroup, the agent's Python and its imports read
  for the first time in that instance);
- *frozen*: a thaw after ``sleep(id, "frozen")`` (processes kept by the cgroup freezer): admission, the
  authority re-check and lease renewal, the thaw, the broker let through again;
- *stopped*: a wake after ``sleep(id, "stopped")`` (processes gone, volume kept): a second cold start, on
  warm caches;
- *snapshotted*: a wake after ``sleep(id, "snapshotted")`` of a 50 MB volume (sealed into the store, local
  copy gone): restore, then a cold start;
- *restore*: a 50 MB snapshot restored into the instance (decrypt + decompress + unpack + swap, then a
  recreate under a new generation: a wake).

The wake benchmarks share ``group="wake"`` so one run's table shows them side by side. Simultaneous wakes of
ten (``wake_many``, admission on) are their own group: the batch's time, and each instance's p50 and p99 to
ready and the number refused in ``extra_info`` (``--benchmark-json`` carries it).

Snapshot = tar + zstandard + AES-GCM of the volume.
"""

from __future__ import annotations

import math
import os
import statistics

import pytest

from runtime import capacity

ROUNDS = 5
SIMULTANEOUS = 10
FROZEN_ROUNDS = 50  # a thaw is short: more rounds for a stable median


def _answered(controller, instance_id: str) -> None:
    """The readiness condition every wake benchmark stops at: the agent answered a permitted request."""
    status, _ = controller.agent_api(instance_id, "GET", "/v1/runs/run_none")
    if status != 404:  # answered by the agent itself (no such run); anything else is not ready
        raise RuntimeError(f"the agent of {instance_id} answered {status}, not its own 404")


def _with_50mb_volume(controller):
    rec = controller.provision("org1", "alice")
    volume = controller.volume_path(rec.id)
    # Half incompressible, half text: 50 MB that neither compresses to nothing nor not at all.
    (volume / "blob.bin").write_bytes(os.urandom(25 << 20))
    (volume / "notes.txt").write_text(("private memory line\n" * 1_400_000)[: 25 << 20])
    for p in volume.iterdir():
        os.chown(p, rec.uid, rec.uid)
    controller.wake(rec.id)
    return rec


def test_snapshot_50mb(benchmark, controller):
    rec = _with_50mb_volume(controller)
    taken = []

    def drop_previous() -> None:
        for ref in taken:
            ref.path.unlink(missing_ok=True)  # keep the store at one snapshot, as the first round had it

    def take() -> None:
        taken.append(controller.snapshot(rec.id))

    benchmark.pedantic(take, setup=drop_previous, rounds=ROUNDS, iterations=1)
    benchmark.extra_info["stored_mb"] = round(taken[-1].path.stat().st_size / 2**20, 1)


def test_restore_50mb_to_first_answer(benchmark, controller):
    rec = _with_50mb_volume(controller)

    def take_snapshot():
        return (controller.snapshot(rec.id).id,), {}

    def restore_and_ask(snapshot_id: str) -> None:
        controller.restore(snapshot_id, rec.id)
        _answered(controller, rec.id)

    benchmark.group = "wake"
    benchmark.pedantic(restore_and_ask, setup=take_snapshot, rounds=ROUNDS, iterations=1)


def test_cold_wake_to_first_answer(benchmark, controller):
    users = iter(range(ROUNDS + 1))

    def provision():
        return (controller.provision("org1", f"user{next(users)}").id,), {}

    def wake_and_ask(instance_id: str) -> None:
        controller.wake(instance_id)
        _answered(controller, instance_id)

    benchmark.group = "wake"
    benchmark.pedantic(wake_and_ask, setup=provision, rounds=ROUNDS, iterations=1)


def test_stopped_wake_to_first_answer(benchmark, controller):
    rec = controller.provision("org1", "alice")
    controller.wake(rec.id)

    def stop() -> None:
        controller.sleep(rec.id)

    def wake_and_ask() -> None:
        controller.wake(rec.id)
        _answered(controller, rec.id)

    benchmark.group = "wake"
    benchmark.pedantic(wake_and_ask, setup=stop, rounds=ROUNDS, iterations=1, warmup_rounds=1)


def test_frozen_wake_to_first_answer(benchmark, controller):
    rec = controller.provision("org1", "alice")
    controller.wake(rec.id)

    def freeze() -> None:
        controller.sleep(rec.id, "frozen")

    def thaw_and_ask() -> None:
        if controller.wake(rec.id).woke_from != "frozen":
            raise RuntimeError(f"{rec.id} did not wake from frozen: the benchmark would time another depth")
        _answered(controller, rec.id)

    benchmark.group = "wake"
    benchmark.pedantic(thaw_and_ask, setup=freeze, rounds=FROZEN_ROUNDS, iterations=1, warmup_rounds=2)


def test_snapshotted_wake_50mb_to_first_answer(benchmark, controller):
    rec = _with_50mb_volume(controller)

    def park() -> None:
        controller.sleep(rec.id, "snapshotted")

    def wake_and_ask() -> None:
        if controller.wake(rec.id).woke_from != "snapshotted":
            raise RuntimeError(f"{rec.id} did not wake from snapshotted: the benchmark would time another depth")
        _answered(controller, rec.id)

    benchmark.group = "wake"
    benchmark.pedantic(wake_and_ask, setup=park, rounds=ROUNDS, iterations=1)


@pytest.mark.parametrize("host", ["measured", "tight"])
def test_simultaneous_wake_of_10(benchmark, controller, host):
    """Ten stopped instances woken at once (``wake_many``) with admission on, against the host as measured or
    a tight one (memory for one waking instance beside four idle ones: while they wake all ten count as
    active, so two are admitted and eight refused). The timing is the whole batch,
    to the last woken agent's first answer; extra_info has each instance's p50 and p99 to ready and how many
    admission refused per round."""
    ids = [controller.provision("org1", f"user{i}").id for i in range(SIMULTANEOUS)]
    if host == "tight":
        b = controller.budget
        controller.host = capacity.Host(
            memory_mb=b.shared_memory_mb + b.memory_headroom_mb + b.active_instance_mb + b.broker_mb
            + 4 * (b.idle_instance_mb + b.broker_mb), disk_mb=controller.host.disk_mb)
    rounds: list[list] = []

    def stop_all() -> None:
        for instance_id in ids:
            controller.sleep(instance_id)

    def wake_all() -> None:
        outcomes = controller.wake_many(ids)
        failed = [o for o in outcomes if o.status == "failed"]
        if failed:
            raise RuntimeError(f"wakes failed (not refused): {failed}")
        for o in outcomes:
            if o.status == "woke":
                _answered(controller, o.instance)
        rounds.append(outcomes)

    benchmark.group = "simultaneous wake of 10"
    benchmark.pedantic(wake_all, setup=stop_all, rounds=3, iterations=1)
    ready = sorted(o.seconds for outcomes in rounds for o in outcomes if o.status == "woke")
    p99 = ready[min(len(ready) - 1, math.ceil(0.99 * len(ready)) - 1)]
    benchmark.extra_info.update({
        "ready_p50_ms": round(statistics.median(ready) * 1000, 1), "ready_p99_ms": round(p99 * 1000, 1),
        "refused_per_round": [sum(o.status == "refused" for o in outcomes) for outcomes in rounds],
        "host_memory_mb": controller.host.memory_mb,
    })
