"""Benchmark: a Docker instance's start to ready, side by side with a bare ``docker run --network none`` of a
trivial image in the same run. Goal (issue 15): the instance within 1.5x of the bare run, p50 to p50.

Both sides are timed the same way, from the first call to the engine until the process inside says it is
ready, polled from the host at the same pause; neither includes the removal of the previous container.

- instance: ``Controller.wake`` of a stopped instance: admission, the managed configuration checked, a fresh
  run-control key, the container created and started with every guard (``containers.container_config``),
  its pid read, a lease, capabilities and the broker listening inside its network namespace, then the
  agent's Python started (managed configuration read, tool servers listed through the broker) until its
  run-control port accepts a connection (checked from the host inside the namespace).
- bare: docker-py's create and start of the slim image (a shell and coreutils, no Python) with
  ``network_mode="none"`` and nothing else but one bind-mounted host folder, running
  ``sh -c ': > /ready/ready; exec sleep 60'``, until that marker file is there. The image is created the
  same way, so the two differ by what the platform adds: its guards, its broker and the agent's start.

The rounds alternate (a bare run, then an instance wake) so both see the same load on a shared machine.
Needs the Docker engine (tools/setup-docker). Run with ``tox -e bench`` or ``pytest benchmarks --benchmark-only``.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pytest

from runtime.isolation import cleanup

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support.stack import platform_controller  # noqa: E402

ROUNDS = 15
WARMUP = 2
POLL = 0.002  # the controller's own pause between readiness checks (Controller._wait_ready)
GOAL = 1.5


def _p95(samples: list[float]) -> float:
    data = sorted(samples)
    return data[min(len(data) - 1, round(0.95 * (len(data) - 1)))]


@pytest.fixture
def images():
    docker = pytest.importorskip("docker")
    try:
        docker.from_env(timeout=10).ping()
    except docker.errors.DockerException as exc:
        pytest.skip(f"no Docker engine answers ({exc}): tools/setup-docker starts one")
    from acceptance.targets.docker import image

    return image.ensure("reference"), image.ensure("slim")


@pytest.fixture
def root():
    # Instance uids must traverse the state root's parents, so not under pytest's 0700 tmp_path.
    path = Path(tempfile.mkdtemp(prefix="pairproof-bench-", dir="/var/tmp"))
    os.chmod(path, 0o711)
    yield path
    cleanup.clean(path, include_live=True)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def docker_controller(images, root):
    with platform_controller(root, f"bench-{os.getpid()}", engine_image=images[0]) as c:
        yield c


def _bare_run(client, image: str, run: str, folder: Path) -> float:
    """One bare run, timed from create to its marker; the container is removed after, untimed."""
    from docker.types import Mount

    from runtime.isolation.containers import LABEL_RUN

    marker = folder / "ready"
    marker.unlink(missing_ok=True)
    start = time.perf_counter()
    # create + start (not containers.run, which would pull an image the engine lacks: nothing is pulled)
    container = client.containers.create(image, ["/bin/sh", "-c", ": > /ready/ready; exec sleep 60"],
                                         network_mode="none", labels={LABEL_RUN: run},
                                         mounts=[Mount("/ready", str(folder), type="bind")])
    try:
        container.start()
        end = time.monotonic() + 10
        while not marker.exists():
            if time.monotonic() > end:
                raise AssertionError(f"the bare container wrote no ready marker within 10 s: {container.logs()!r}")
            time.sleep(POLL)
        return time.perf_counter() - start
    finally:
        container.remove(force=True)


def test_docker_instance_start_to_ready_against_a_bare_run(benchmark, docker_controller, images, root):
    client = docker_controller.engine.client
    folder = root / "bare"
    folder.mkdir()
    rec = docker_controller.provision("org1", "alice")
    bare: list[float] = []
    load_before = os.getloadavg()[0]

    def a_bare_run_then_put_to_sleep() -> None:
        docker_controller.sleep(rec.id)
        bare.append(_bare_run(client, images[1], docker_controller.run, folder))

    def wake() -> None:
        assert docker_controller.wake(rec.id).state == "running"

    benchmark.pedantic(wake, setup=a_bare_run_then_put_to_sleep, rounds=ROUNDS, iterations=1, warmup_rounds=WARMUP)
    instance = benchmark.stats.stats.data
    assert len(instance) == ROUNDS and len(bare) == ROUNDS + WARMUP
    bare = bare[WARMUP:]
    ratio = statistics.median(instance) / statistics.median(bare)
    figures = {"instance_p50_ms": statistics.median(instance) * 1000, "instance_p95_ms": _p95(instance) * 1000,
               "bare_p50_ms": statistics.median(bare) * 1000, "bare_p95_ms": _p95(bare) * 1000}
    load = (load_before, os.getloadavg()[0])  # the machine is shared: the ratio grows with its load (docs/docker-target.md)
    benchmark.extra_info.update({k: round(v, 1) for k, v in figures.items()} | {"ratio": round(ratio, 2), "goal": GOAL,
                                "loadavg_1min": [round(x, 2) for x in load]})
    print(f"\ndocker instance start to ready p50 {figures['instance_p50_ms']:.0f} ms (p95 "
          f"{figures['instance_p95_ms']:.0f}); bare docker run --network none to its ready marker p50 "
          f"{figures['bare_p50_ms']:.0f} ms (p95 {figures['bare_p95_ms']:.0f}); ratio {ratio:.2f} (goal {GOAL}), "
          f"{ROUNDS} rounds each, alternating; load average {load[0]:.1f} -> {load[1]:.1f} on {os.cpu_count()} cores")
