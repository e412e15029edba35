"""An image runs on the platform's terms, not its own (issue 28 item 6): an image's ENTRYPOINT wrapped the
profile's command, its ENV reached every process (LD_PRELOAD among them) and its VOLUME gave a writable volume
beside the read-only root. Now the platform sets the entrypoint, healthcheck and stop signal itself, and an
image declaring ENV beyond PATH and LANG, a VOLUME or ONBUILD is refused before a container is made.

Derived images are committed from a created (never started) container of the locally built slim image, with
the instructions as ``changes``; each is removed after."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest

from acceptance.targets.docker import image as images
from runtime.isolation import containers
from runtime.isolation.cgroups import Limits
from runtime.isolation.sandbox import SandboxError, SandboxSpec

WRAPPER = 'ENTRYPOINT ["/bin/sh", "-c", "echo wrapped > /run/agent/wrapped; exec \\"$@\\"", "wrapper"]'


@pytest.fixture
def derived():
    """derived(*changes) -> the id of an image of slim with ``changes`` applied; removed after the test."""
    client = containers.client()
    made: list[str] = []

    def build(*changes: str) -> str:
        base = client.api.create_container(images.ensure("slim"), command=["/bin/true"])["Id"]
        try:
            image = client.api.commit(base, repository="pairproof-test-derived", tag=secrets.token_hex(4),
                                      changes=list(changes))["Id"]
        finally:
            client.api.remove_container(base, force=True)
        made.append(image)
        return image

    yield build
    for image in made:
        client.api.remove_image(image, force=True)
    client.close()


def _spec(home: Path) -> SandboxSpec:
    uid = 3_910_000 + os.getpid() % 1000
    for sub, owner in (("volume", uid), ("control", uid), ("etc", 0)):
        (home / sub).mkdir(parents=True)
        os.chown(home / sub, owner, owner)
    (home / "etc" / "passwd").write_text(f"agent:x:{uid}:{uid}::/data:/bin/sh\n")
    (home / "etc" / "group").write_text(f"agent:x:{uid}:\n")
    return SandboxSpec(instance_id="terms", uid=uid, gid=uid, volume=home / "volume", control_dir=home / "control",
                       etc_dir=home / "etc", image_dir=home, hostname="terms")


def test_an_image_s_env_volume_and_onbuild_are_refused_before_a_container_is_made(derived):
    image = derived("ENV LD_PRELOAD=/data/hook.so", "VOLUME /var/cache/agent", "ONBUILD RUN true")
    client = containers.client()
    try:
        # What the engine does with them when asked (the old way): the image's ENV is merged into the container's.
        made = client.api.create_container(image, command=["/bin/true"], environment={"PATH": "/usr/bin"})["Id"]
        try:
            assert "LD_PRELOAD=/data/hook.so" in client.api.inspect_container(made)["Config"]["Env"]
        finally:
            client.api.remove_container(made, force=True)
        refused = containers.image_refusals(client.images.get(image).attrs)
    finally:
        client.close()
    assert [line.split(" (")[0] for line in refused] == ["ENV LD_PRELOAD", "VOLUME /var/cache/agent",
                                                         "ONBUILD 1 instructions"]
    with pytest.raises(SandboxError, match="declares what the platform does not run: ENV LD_PRELOAD"):
        containers.DockerEngine(image, f"dt{secrets.token_hex(4)}")


def test_an_image_s_entrypoint_does_not_wrap_the_profile_s_command(derived, root):
    image = derived(WRAPPER, 'HEALTHCHECK CMD ["/bin/false"]')  # (commit takes no STOPSIGNAL)
    client = containers.client()
    try:
        config = client.images.get(image).attrs["Config"]
        assert config["Entrypoint"][0] == "/bin/sh"  # what the engine would have run first
    finally:
        client.close()
    run = f"dt{secrets.token_hex(4)}"
    engine = containers.DockerEngine(image, run)
    spec = _spec(root)
    proc = engine.start(spec, Limits(64 << 20, 16), ["/bin/sleep", "infinity"])
    try:
        inspected = engine.client.api.inspect_container(proc.container_id)["Config"]
        assert inspected["Entrypoint"] == ["/bin/sleep"] and inspected["Cmd"] == ["infinity"]
        assert inspected["Healthcheck"]["Test"] == ["NONE"] and inspected["StopSignal"] == "SIGTERM"
        assert Path(f"/proc/{proc.host_pid}/cmdline").read_bytes().split(b"\0")[:2] == [b"/bin/sleep", b"infinity"]
        assert not (spec.control_dir / "wrapped").exists()
    finally:
        proc.stop()
        engine.close()
    assert containers.run_containers(run) == []
