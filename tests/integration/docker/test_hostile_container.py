"""The hostile agent under Docker (issue 28): an image derived from the reference agent image with the hostile
agent added (``tests/support/hostile_agent.py``), qualified with its killer on, as the reference run is
(``tests/integration/profiles/test_hostile_profile.py``): a verdict within the budget, no case passed on a killed
probe, the static probe's scans completed (the container frozen while it runs). The image is made by committing
a created, never started, container of the reference image with the two files put in, and removed after."""

from __future__ import annotations

import io
import secrets
import shutil
import tarfile
from pathlib import Path

import pytest
from support import hostile

from acceptance.targets.docker import image as images
from runtime.isolation import containers

pytestmark = pytest.mark.slow


@pytest.fixture
def hostile_image():
    client = containers.client()
    base = client.api.create_container(images.ensure("reference"), command=["/bin/true"])["Id"]
    try:
        packed = io.BytesIO()
        with tarfile.open(fileobj=packed, mode="w") as tar:
            for name in ("hostile_agent.py", "tiny_agent.py"):
                data = (hostile.ROOT / "tests" / "support" / name).read_bytes()
                info = tarfile.TarInfo(name)
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
        assert client.api.put_archive(base, "/opt/pairproof", packed.getvalue())
        image = client.api.commit(base, repository="pairproof-test-hostile", tag=secrets.token_hex(4))["Id"]
    finally:
        client.api.remove_container(base, force=True)
    yield image
    client.api.remove_image(image, force=True)
    client.close()


@pytest.fixture
def state_dir(tmp_path):
    from runtime.isolation import cleanup

    path = Path(__import__("tempfile").mkdtemp(prefix="pairproof-hostile-docker-", dir="/var/tmp"))
    yield path
    cleanup.clean(path, include_live=True)
    shutil.rmtree(path, ignore_errors=True)


def test_a_qualification_of_a_hostile_image_ends_with_a_verdict_and_no_false_pass(hostile_image, state_dir, tmp_path):
    secret, _token = hostile.outside_folder()
    try:
        hostile.qualify_with_killer(tmp_path, state_dir, secret, "--target", "docker", "--image", hostile_image)
    finally:
        shutil.rmtree(secret.parent, ignore_errors=True)
