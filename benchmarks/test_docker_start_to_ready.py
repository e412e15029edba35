"""Benchmark: a Docker instance's start to ready (container created and started with every guard, broker
listening inside its network namespace, the agent's port accepting), side by side with a bare
``docker run --network none`` of a trivial image (the slim image's ``/bin/true``, created, started, waited
for and removed) in the same run. Goal (issue 15): the instance within 1.5x of the bare run, p50 to p50.

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

from runtime import cleanup

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support.stack import platform_controller  # noqa: E402

ROUNDS = 15


def _p50(samples: list[float]) -> float:
    return statistics.median(samples)


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
def docker_controller(images):
    root = Path(tempfile.mkdtemp(prefix="pairproof-bench-", dir="/var/tmp"))
    os.chmod(root, 0o711)
    try:
        with platform_controller(root, f"bench-{os.getpid()}", engine_image=images[0]) as c:
            yield c
    finally:
        cleanup.clean(root, include_live=True)
        shutil.rmtree(root, ignore_errors=True)


def test_docker_instance_start_to_ready_against_a_bare_run(benchmark, docker_controller, images):
    from runtime.containers import LABEL_RUN

    client = docker_controller.engine.client
    bare = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        container = client.containers.run(images[1], ["/bin/true"], network_mode="none", detach=True,
                                          labels={LABEL_RUN: docker_controller.run})
        container.wait()
        container.remove(force=True)
        bare.append(time.perf_counter() - start)
    rec = docker_controller.provision("org1", "alice")

    def put_to_sleep() -> None:
        docker_controller.sleep(rec.id)

    benchmark.pedantic(docker_controller.wake, args=(rec.id,), setup=put_to_sleep,
                       rounds=ROUNDS, iterations=1, warmup_rounds=2)
    instance = _p50(sorted(benchmark.stats.stats.data))
    ratio = instance / _p50(bare)
    benchmark.extra_info.update({"instance_p50_ms": round(instance * 1000, 1), "bare_p50_ms": round(_p50(bare) * 1000, 1),
                                 "ratio": round(ratio, 2)})
    print(f"\ndocker instance start to ready p50 {instance * 1000:.0f} ms; bare docker run --network none p50 "
          f"{_p50(bare) * 1000:.0f} ms; ratio {ratio:.2f} (goal 1.5)")
