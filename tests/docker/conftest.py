"""The Docker engine's own tests need a running engine (tools/setup-docker starts one). Without it they are
skipped, saying why: the reference target does not need Docker, and a machine where docker.io could not be
installed still runs the rest of the project's tests."""

from __future__ import annotations

import pytest


def _engine_problem() -> str:
    try:
        import docker
    except ImportError:
        return "docker-py is not installed (pip install docker)"
    try:
        client = docker.from_env(timeout=10)
        client.ping()
        client.close()
    except docker.errors.DockerException as exc:
        return f"no Docker engine answers ({exc}): tools/setup-docker starts one"
    return ""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    problem = None
    for item in items:
        if "tests/docker/" not in str(item.path):
            continue
        if problem is None:
            problem = _engine_problem()
        if problem:
            item.add_marker(pytest.mark.skip(reason=problem))
