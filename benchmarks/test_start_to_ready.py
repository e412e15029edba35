"""Benchmark: instance start to ready (sandbox up, the agent's readiness rule holding: for the reference agent,
its run-control port accepting connections inside its network namespace, checked from the host).

Run with ``tox -e bench`` (or ``pytest benchmarks --benchmark-only``). Each round wakes a sleeping
instance: cgroup created, launcher gated into it, bwrap namespaces and root built, a new lease and
capabilities issued, the broker listening inside the sandbox's network namespace, the agent's Python
started (managed config read, tool servers listed through the broker), its port accepting. p50 and p95
are printed and stored in the benchmark's extra_info. The second benchmark goes on until the agent's API
has answered a first request through the broker (what ready leaves for the first turn to wait for).
"""

from __future__ import annotations

import statistics

ROUNDS = 20


def _report(benchmark, what: str) -> None:
    data = sorted(benchmark.stats.stats.data)
    p50 = statistics.median(data)
    p95 = data[min(len(data) - 1, round(0.95 * (len(data) - 1)))]
    benchmark.extra_info.update({"p50_ms": round(p50 * 1000, 1), "p95_ms": round(p95 * 1000, 1)})
    print(f"\ninstance start to {what} over {len(data)} starts: p50 {p50 * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms")


def test_instance_start_to_ready(benchmark, controller):
    rec = controller.provision("org1", "alice")

    def put_to_sleep() -> None:
        controller.sleep(rec.id)

    benchmark.pedantic(controller.wake, args=(rec.id,), setup=put_to_sleep,
                       rounds=ROUNDS, iterations=1, warmup_rounds=2)
    _report(benchmark, "ready")


def test_instance_start_to_first_answer(benchmark, controller):
    rec = controller.provision("org1", "alice")

    def put_to_sleep() -> None:
        controller.sleep(rec.id)

    def wake_and_ask() -> None:
        controller.wake(rec.id)
        status, _ = controller.agent_api(rec.id, "GET", "/v1/runs/run_none")
        assert status == 404, status  # answered by the agent itself (no such run)

    benchmark.pedantic(wake_and_ask, setup=put_to_sleep, rounds=ROUNDS, iterations=1, warmup_rounds=2)
    _report(benchmark, "first answer")
