"""Benchmarks: each agent profile's provision + wake to ready, and its memory idle and during a turn.

For each shipped profile, ``reference`` (runtime/agents/reference.py) and ``hermes`` (hermes-agent 0.19.0 from
``$PAIRPROOF_TOOLS/hermes-venv``), on a controller whose launch is the profile's (``launch_of``, as the
reference target's driver runs it):

- *provision + wake to ready*: pytest-benchmark times exactly ``controller.wake(controller.provision(org,
  user).id)``, a fresh user each round (the profile's readiness rule: the reference agent's port accepting,
  hermes's ``/health`` answering); the instance is destroyed in ``teardown``, outside the timing.
- *first turn, the model's answer held 2 s*: a fresh instance is provisioned and woken in ``setup``, its idle
  memory read there (the instance's cgroup charge, page cache included, polled until two readings a second
  apart agree within 1 MB, or IDLE_DEADLINE), its peak reset; the turn is timed, and the cgroup's peak over
  it read in ``teardown`` (then the instance destroyed). The memory figures are the benchmark's
  ``extra_info`` (MB, median over the rounds, and each round's): measurements, not assertions.

The machine is shared: the 1-minute load average before and after each benchmark is in its ``extra_info``.

hermes not installed fails its parameter with the loader's message (``bash tools/setup-machine`` installs it);
deselect it explicitly with ``-k reference``.
"""

from __future__ import annotations

import itertools
import os
import statistics
import time

import pytest

from acceptance.targets import profiles
from acceptance.targets.reference.driver import _ready_deadline, launch_of

MB = 1 << 20
# hermes takes seconds per start (README: 2-6 s and more under load): fewer rounds than the reference agent.
WAKE_ROUNDS = {"reference": 20, "hermes": 7}
TURN_ROUNDS = {"reference": 5, "hermes": 3}
HOLD_SECONDS = 2.0
HELD_REPLY = "held answer, released"
IDLE_DEADLINE = 30.0  # seconds for the idle charge to settle; past it the last reading is kept and flagged
IDLE_AGREE = 1 * MB
TURN_TIMEOUT = 120.0  # hermes's first turn is several seconds on an idle machine, more under load


@pytest.fixture(params=["reference", "hermes"])
def agent(request, stack_of):
    """(profile name, controller running that profile, its provider mock)."""
    try:
        profile = profiles.load(request.param)
        launch = launch_of(profile)
    except Exception as exc:  # not installed: a failure naming the fix, never a skip
        pytest.fail(f"profile {request.param} cannot run here: {exc}. Install it with `bash tools/setup-machine` "
                    f"(PAIRPROOF_TOOLS names where), or deselect it with -k 'not {request.param}'", pytrace=False)
    controller, provider = stack_of(agent=launch, **_ready_deadline(profile))
    return request.param, controller, provider


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _settled_charge(cgroup) -> tuple[int, bool]:
    """The cgroup's memory charge once two readings a second apart agree within IDLE_AGREE (or the last
    reading at IDLE_DEADLINE), and whether it settled."""
    deadline = time.monotonic() + IDLE_DEADLINE
    last = cgroup.memory_current()
    while time.monotonic() < deadline:
        time.sleep(1.0)  # the poll's period: the condition is the readings agreeing, bounded by the deadline
        now = cgroup.memory_current()
        if abs(now - last) <= IDLE_AGREE:
            return now, True
        last = now
    return last, False


def _mb(values: list[int]) -> float:
    return round(statistics.median(values) / MB, 1)


def test_provision_and_wake_to_ready(benchmark, agent):
    name, controller, _ = agent
    users = itertools.count()
    woken: list[str] = []

    def fresh_user():
        return (f"wake{next(users)}",), {}

    def provision_and_wake(user: str) -> None:
        woken.append(controller.wake(controller.provision("org1", user).id).id)

    def destroy(user: str) -> None:
        controller.destroy(woken.pop())

    benchmark.group = "agent: provision + wake to ready"
    load_before = _load()
    benchmark.pedantic(provision_and_wake, setup=fresh_user, teardown=destroy,
                       rounds=WAKE_ROUNDS[name], iterations=1, warmup_rounds=1)
    data = sorted(benchmark.stats.stats.data)
    benchmark.extra_info.update({"agent": name, "p50_s": round(statistics.median(data), 3),
                                 "min_s": round(data[0], 3), "max_s": round(data[-1], 3),
                                 "loadavg_1min": [load_before, _load()]})
    print(f"\n{name}: provision + wake to ready over {len(data)} rounds: p50 {statistics.median(data):.3f} s "
          f"({data[0]:.3f}-{data[-1]:.3f}), load {load_before} -> {_load()}")


def test_first_turn_held_memory(benchmark, agent):
    """The first turn of a fresh instance, its model answer held HOLD_SECONDS by the provider; the instance's
    memory idle before it and at peak during it in extra_info."""
    name, controller, provider = agent
    users = itertools.count()
    rounds: list[dict] = []

    def ready_and_idle():
        user = f"turn{next(users)}"
        record = controller.wake(controller.provision("org1", user).id)
        cgroup = controller.sandbox(record.id).cgroup
        idle, settled = _settled_charge(cgroup)
        rounds.append({"instance": record.id, "user": f"org1:{user}", "idle": idle, "settled": settled})
        cgroup.reset_peak()
        provider.script(f"org1:{user}", [{"reply": HELD_REPLY, "delay": HOLD_SECONDS}])
        return (record.id,), {}

    def turn(instance_id: str) -> None:
        reply = controller.turn(instance_id, "what is on my list today?", timeout=TURN_TIMEOUT)
        if HELD_REPLY not in reply:
            raise RuntimeError(f"the turn of {instance_id} answered {reply!r}, not the held answer: "
                               "the benchmark would time another turn")

    def peak_and_destroy(instance_id: str) -> None:
        try:
            this = rounds[-1]
            this["peak"] = max(controller.sandbox(instance_id).cgroup.memory_peak(), this["idle"])
            held = [r for r in provider.records() if r["user"] == this["user"] and (r.get("step") or {}).get("delay")]
            if not held:
                raise RuntimeError(f"no model call of {this['user']} took the held answer: the turn was not held")
        finally:
            controller.destroy(instance_id)

    benchmark.group = "agent: first turn, answer held 2 s"
    load_before = _load()
    benchmark.pedantic(turn, setup=ready_and_idle, teardown=peak_and_destroy,
                       rounds=TURN_ROUNDS[name], iterations=1, warmup_rounds=0)
    data = sorted(benchmark.stats.stats.data)
    idle = [r["idle"] for r in rounds]
    peak = [r["peak"] for r in rounds]
    benchmark.extra_info.update({
        "agent": name, "turn_p50_s": round(statistics.median(data), 3),
        "turn_less_hold_p50_s": round(statistics.median(data) - HOLD_SECONDS, 3),
        "idle_mb_p50": _mb(idle), "turn_peak_mb_p50": _mb(peak),
        "idle_mb": [round(x / MB, 1) for x in idle], "turn_peak_mb": [round(x / MB, 1) for x in peak],
        "idle_settled": [r["settled"] for r in rounds], "loadavg_1min": [load_before, _load()]})
    print(f"\n{name}: first turn (answer held {HOLD_SECONDS:.0f} s) p50 {statistics.median(data):.3f} s; memory idle "
          f"{_mb(idle)} MB, peak during the turn {_mb(peak)} MB (medians over {len(rounds)} instances); "
          f"load {load_before} -> {_load()}")
