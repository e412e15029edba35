"""Benchmark: instance start to ready (sandbox up, agent answering its control socket).

Run with ``tox -e bench`` (or ``pytest benchmarks --benchmark-only``). Each round wakes a sleeping
instance: cgroup created, launcher gated into it, bwrap namespaces and root built, a new lease and
capabilities issued, the broker listening inside the sandbox's network namespace, the agent's Python
started, its socket answering a ping. p50 and p95 are printed and stored in the benchmark's extra_info.
"""

from __future__ import annotations

import statistics

ROUNDS = 20


def test_instance_start_to_ready(benchmark, controller):
    rec = controller.provision("org1", "alice")
    def put_to_sleep() -> None:
        controller.sleep(rec.id)

    benchmark.pedantic(controller.wake, args=(rec.id,), setup=put_to_sleep,
                       rounds=ROUNDS, iterations=1, warmup_rounds=2)
    data = sorted(benchmark.stats.stats.data)
    p50 = statistics.median(data)
    p95 = data[min(len(data) - 1, round(0.95 * (len(data) - 1)))]
    benchmark.extra_info.update({"p50_ms": round(p50 * 1000, 1), "p95_ms": round(p95 * 1000, 1)})
    print(f"\ninstance start to ready over {len(data)} starts: p50 {p50 * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms")
