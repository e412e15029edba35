"""The docker target: an agent image qualified under a real Docker engine, the reference platform around it.

Every instance is a container of the image (``PAIRPROOF_IMAGE``, set by ``pairproof qualify --image``; the
reference agent image, built locally, when unset), created through docker-py by the runtime's container
engine (``runtime/isolation/containers.py``), which gives it every guard the platform decides: no network but
loopback, its own host uid, read-only root, the private volume, memory and pids limits, no capabilities,
no new privileges, the default seccomp profile, private IPC and /dev/shm. The controller, brokers (bound
inside each container's network namespace), model proxy, product server, provider mock, snapshots and
journal are the reference platform's (``PlatformTarget``), unchanged.

Probes run through ``docker exec`` as the instance's uid; the static probe, a host file, runs by
descriptor with ``nsenter`` from the host, so nothing of ours is written into the container.

The broken arrangements the controls need are built in Docker's terms (``breakers.py``). Not yet here:
the Docker mutants (run-configuration mistakes, each killed by a named case).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from acceptance.errors import SetupError, TargetError
from acceptance.targets import TargetOptions
from acceptance.targets.docker import image as images
from acceptance.targets.docker.breakers import DockerBreakers
from acceptance.targets.docker.engine import network_problems
from acceptance.targets.reference import driver as reference
from acceptance.targets.reference.helpers import contract_errors, reports_contract_errors
from runtime.errors import RuntimeFault
from runtime.isolation import cleanup as runtime_cleanup
from runtime.isolation import containers

IMAGE_ENV = "PAIRPROOF_IMAGE"


def create(options: TargetOptions) -> DockerTarget:
    return DockerTarget(options)


def image_id() -> str | None:
    """The id of the image this run's containers are made from (``--image``, else the reference agent image of
    this source), for the verdict and the gate; None when it is not in the engine (nothing is built here)."""
    import docker

    wanted = os.environ.get(IMAGE_ENV, "") or images.plan("reference").tag
    try:
        made = containers.client(timeout=30)
    except RuntimeFault as exc:
        raise SetupError(f"docker target: the image's id cannot be read: {exc}") from exc
    try:
        return made.images.get(wanted).id
    except docker.errors.ImageNotFound:
        return None
    finally:
        made.close()


def pin_image() -> None:
    """Before a qualification: the image to qualify (``--image``, else the reference agent image, built now if
    this source's is not there) resolved to its id, which every process of the run then uses (``IMAGE_ENV``)."""
    wanted = os.environ.get(IMAGE_ENV, "")
    try:
        tag = wanted or images.ensure("reference")
        made = containers.client(timeout=30)
    except RuntimeFault as exc:
        raise SetupError(f"docker target: {exc}") from exc
    try:
        found = made.images.get(tag)
    except Exception as exc:  # (docker.errors.ImageNotFound, an engine gone: docker is imported lazily here)
        made.close()
        raise SetupError(f"docker target: image {tag!r} cannot be resolved to its id ({exc}): `docker load` or "
                         "build it first, or leave out --image for the reference agent image") from exc
    made.close()
    refused = containers.image_refusals(found.attrs)
    if refused:
        raise SetupError(f"docker target: image {tag!r} declares what the platform does not run: {'; '.join(refused)}: "
                         "build it without them (its ENTRYPOINT, HEALTHCHECK and STOPSIGNAL are overridden)")
    os.environ[IMAGE_ENV] = found.id


def preflight() -> list[str]:
    """What this machine lacks for the docker target, one fix-naming line each."""
    problems = list(reference.preflight())  # the platform around the containers is the reference one
    try:
        import docker
    except ImportError:
        return [*problems, "docker-py is not installed: pip install docker (tools/setup-machine does)"]
    if shutil.which("nsenter") is None:
        problems.append("nsenter (util-linux) is missing: it runs the static probe in a container")
    try:
        made = containers.client(timeout=10)
    except RuntimeFault as exc:
        return [*problems, str(exc)]
    try:
        bridges = made.networks.list(filters={"driver": "bridge"})
        wanted = os.environ.get(IMAGE_ENV, "")
        if wanted:
            try:
                made.images.get(wanted)
            except docker.errors.ImageNotFound:
                problems.append(f"image {wanted!r} is not in the local Docker engine, and nothing is pulled: "
                                "`docker load` or build it first, or leave out --image for the reference agent image")
    finally:
        made.close()
    if bridges:
        problems.append("the Docker engine has a bridge network (a path off the machine for a container): run an "
                        "engine with --bridge=none --iptables=false (tools/setup-docker starts one)")
    # A container with network_mode="host" (a mutant, a broken control) gets the engine's network namespace:
    # it must be one of lo alone, or the run could reach off the machine.
    return problems + network_problems()


def clean(state_dir: Path, *, include_live: bool = False) -> list[str]:
    """``pairproof clean --target docker``: for every run kept under ``state_dir`` whose owner process is gone
    (every run there, with ``include_live``), its labelled containers, volumes and networks and the cgroup
    folders Docker left, then the reference platform's leftovers. Containers of runs kept elsewhere (another
    state root, another CI job) are none of this root's business, as for the reference target."""
    lines = []
    with contract_errors():
        runs = runtime_cleanup.find(Path(state_dir))
        made = containers.client(timeout=30)
        try:
            on_engine = containers.runs_on_engine(docker_client=made)
            for leftover in runs:
                if leftover.run not in on_engine:
                    continue
                if leftover.live and not include_live:
                    lines.append(f"left the containers of run {leftover.run} alone: its owner process is still "
                                 "running (use --all to remove them anyway)")
                    continue
                removed = containers.remove_run_containers(leftover.run, docker_client=made)
                containers.remove_parent_cgroups(leftover.run)
                lines.append(f"removed {len(removed)} containers of run {leftover.run}")
        finally:
            made.close()
    return lines + reference.clean(state_dir, include_live=include_live)


@reports_contract_errors
class DockerTarget(DockerBreakers, reference.PlatformTarget):
    """The reference platform with Docker as its sandbox engine, and the broken arrangements in Docker's terms."""

    name = "docker"

    def _engine(self, options: TargetOptions) -> containers.DockerEngine:
        # Here too, not only in preflight(): a run that skips it (pytest --target docker, the mutants'
        # runner) must not get an engine whose namespace has a path off the machine either (a few ms).
        problems = network_problems()
        if problems:
            raise SetupError(f"docker target: {problems[0]}")
        wanted = os.environ.get(IMAGE_ENV, "")
        try:
            tag = wanted or images.ensure("reference")
            engine = containers.DockerEngine(tag, options.run)
            # Every container by the image's id, not its tag: a tag moved while the run goes on (another build,
            # a :latest retagged) changes none of them, and the verdict names the id (``pin_image``).
            engine.image = engine.client.images.get(tag).id
            return engine
        except SetupError:
            raise
        except RuntimeFault as exc:
            raise TargetError(f"docker target: {exc}") from exc
