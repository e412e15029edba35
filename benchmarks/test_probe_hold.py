"""Benchmark: what holding the instance frozen costs a probe run (issue 28 item 4).

``Controller.run_binary_inside`` freezes every process of the instance (the cgroup freezer), runs the host file
by descriptor in a cgroup beside it, and thaws; the engine's own call (``sandbox.run_binary_inside``) runs the
same file with the instance left running. Both time one run of the host's ``true`` by descriptor in a running
reference instance, so the difference is the hold: freeze, wait for the kernel to say frozen, the beside cgroup,
thaw. ``group="probe-hold"`` puts the two side by side; the ratio of medians is the figure to read.
"""

from __future__ import annotations

import shutil

import pytest

from runtime.isolation import sandbox

ROUNDS = 30


@pytest.fixture
def running(controller):
    rec = controller.provision("org1", "alice")
    controller.wake(rec.id)
    return controller, controller.sandbox(rec.id)


def _once(run, proc) -> None:
    done = run(proc, shutil.which("true"), [], timeout=30)
    if done.rc != 0:
        raise RuntimeError(f"true by descriptor answered {done.rc}: {done.stderr[-200:]!r}")


@pytest.mark.benchmark(group="probe-hold")
def test_probe_run_held(benchmark, running):
    controller, proc = running
    benchmark.pedantic(_once, args=(controller.run_binary_inside, proc), rounds=ROUNDS, warmup_rounds=2)


@pytest.mark.benchmark(group="probe-hold")
def test_probe_run_unheld_engine_call(benchmark, running):
    _, proc = running
    benchmark.pedantic(_once, args=(sandbox.run_binary_inside, proc), rounds=ROUNDS, warmup_rounds=2)
