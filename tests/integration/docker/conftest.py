"""The Docker engine's own tests need a running engine (tools/setup-docker starts one). Without it they are
skipped, saying why, when run by hand (the reference target does not need Docker). Under tox
(``PAIRPROOF_REQUIRE_DOCKER=1``, after tools/setup-machine started the engine) a missing engine stops the run
with one line instead: a skip there would read as a pass."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from runtime.isolation import cleanup


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
        if "tests/integration/docker/" not in str(item.path):
            continue
        if problem is None:
            problem = _engine_problem()
        if problem and os.environ.get("PAIRPROOF_REQUIRE_DOCKER"):
            raise pytest.UsageError(f"tests/integration/docker: {problem} (PAIRPROOF_REQUIRE_DOCKER is set: they must run)")
        if problem:
            item.add_marker(pytest.mark.skip(reason=problem))


@pytest.fixture
def root():
    """A state root of the test's own under /var/tmp (instance uids traverse it), cleaned after: whatever the test's
    runs left there, live or not, then the folder."""
    path = Path(tempfile.mkdtemp(prefix="pairproof-docker-test-", dir="/var/tmp"))
    os.chmod(path, 0o711)
    yield path
    cleanup.clean(path, include_live=True)
    shutil.rmtree(path, ignore_errors=True)
