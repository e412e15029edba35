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


# -- the suite's shell (issue 28 items 4 and 5) -------------------------------------------------------------------
# One shell probe's command (``stat -c %s /data``), run the two ways a shell probe can run: the suite's busybox by
# descriptor beside the running instance (``hold=False, by_name=True``), and the sandbox's own /bin/sh through
# ``exec`` (before). ``group="probe-shell"``: the ratio of medians is the figure to read.
COMMAND = ["-c", "stat -c %s /data >/dev/null"]


def _shell_once(controller, proc) -> None:
    from acceptance.harness.probes import shell_binary

    done = controller.run_binary_inside(proc, str(shell_binary()), COMMAND, timeout=30, hold=False, by_name=True)
    if done.rc != 0:
        raise RuntimeError(f"the suite's shell answered {done.rc}: {done.stderr[-200:]!r}")


def _sandbox_sh_once(controller, proc) -> None:
    done = controller.run_inside(proc, ["/bin/sh", *COMMAND], timeout=30)
    if done.rc != 0:
        raise RuntimeError(f"the sandbox's sh answered {done.rc}: {done.stderr[-200:]!r}")


@pytest.mark.benchmark(group="probe-shell")
def test_shell_probe_suites_busybox_by_descriptor(benchmark, running):
    controller, proc = running
    benchmark.pedantic(_shell_once, args=(controller, proc), rounds=ROUNDS, warmup_rounds=2)


@pytest.mark.benchmark(group="probe-shell")
def test_shell_probe_sandbox_sh_through_exec(benchmark, running):
    controller, proc = running
    benchmark.pedantic(_sandbox_sh_once, args=(controller, proc), rounds=ROUNDS, warmup_rounds=2)
