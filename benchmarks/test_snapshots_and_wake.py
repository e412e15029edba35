"""Benchmarks: snapshot and restore of a 50 MB volume (p50), and cold vs warm wake.

A *cold* wake is the first one of a just-provisioned instance (new cgroup, the agent's Python and its
imports read for the first time in that instance); a *warm* wake is a wake after a sleep of the same
instance. Snapshot = tar + zstandard + AES-GCM of the volume; restore = decrypt + decompress + unpack +
swap, then a recreate under a new generation (a wake).
"""

from __future__ import annotations

import os
import statistics
import time

ROUNDS = 5


def _p50(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def test_snapshot_and_restore_50mb(benchmark, controller):
    rec = controller.provision("org1", "alice")
    volume = controller.state / "instances" / rec.id / "volume"
    # Half incompressible, half text: 50 MB that neither compresses to nothing nor not at all.
    (volume / "blob.bin").write_bytes(os.urandom(25 << 20))
    (volume / "notes.txt").write_text(("private memory line\n" * 1_400_000)[: 25 << 20])
    for p in volume.iterdir():
        os.chown(p, rec.uid, rec.uid)
    controller.wake(rec.id)
    takes, restores = [], []
    for _ in range(ROUNDS):
        t = time.perf_counter()
        ref = controller.snapshot(rec.id)
        takes.append(time.perf_counter() - t)
        t = time.perf_counter()
        controller.restore(ref.id, rec.id)
        restores.append(time.perf_counter() - t)
    benchmark.pedantic(lambda: None, rounds=1)
    size = ref.path.stat().st_size
    benchmark.extra_info.update({"snapshot_p50_ms": round(_p50(takes)), "restore_p50_ms": round(_p50(restores)),
                                 "stored_mb": round(size / 2**20, 1)})
    print(f"\n50 MB volume over {ROUNDS}: snapshot p50 {_p50(takes):.0f} ms, restore (with re-wake) p50 "
          f"{_p50(restores):.0f} ms, stored {size / 2**20:.1f} MB")


def test_cold_vs_warm_wake(benchmark, controller):
    colds, warms = [], []
    for i in range(ROUNDS):
        rec = controller.provision("org1", f"user{i}")
        t = time.perf_counter()
        controller.wake(rec.id)
        colds.append(time.perf_counter() - t)
        controller.sleep(rec.id)
        t = time.perf_counter()
        controller.wake(rec.id)
        warms.append(time.perf_counter() - t)
    benchmark.pedantic(lambda: None, rounds=1)
    benchmark.extra_info.update({"cold_p50_ms": round(_p50(colds), 1), "warm_p50_ms": round(_p50(warms), 1)})
    print(f"\nwake over {ROUNDS}: cold p50 {_p50(colds):.1f} ms, warm p50 {_p50(warms):.1f} ms "
          f"(ratio {statistics.median(colds) / statistics.median(warms):.2f})")
