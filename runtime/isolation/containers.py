"""Docker as the sandbox engine: one agent instance per container, beside bubblewrap (``sandbox.py``).

The platform around the container is the reference platform (controller, broker, proxy, product server,
snapshots, journal); only the sandbox is Docker's. The platform, not the image, decides the guards, and
every container is created with all of them (``container_config``):

- ``network_mode="none"``: loopback only. The broker listens inside the container's network namespace,
  bound there from the host exactly as for a bubblewrap sandbox (``netns.socket_in`` on its pid 1).
- ``user="U:U"``: the instance's own host uid (no user namespace: Docker's remapping is one map for the
  whole daemon, so the uid the host sees is the uid inside).
- read-only root; the private volume bind-mounted at /data, the run folder at /run/agent, the synthetic
  /etc/passwd and /etc/group and the managed configuration read-only; a private tmpfs /tmp.
- memory (swap included), pids and CPU limits, in a cgroup under ``pairproof/<run>/`` (cgroupfs driver), so
  the run's cgroup sweep covers containers too, and a cgroup namespace of its own.
- ``cap_drop=ALL``, ``no-new-privileges``, the platform's seccomp profile (``seccomp.docker_profile``: what the
  bubblewrap sandbox's filter refuses, io_uring among them, and every call Docker documents its default profile
  as refusing by name, clone with a namespace flag included: PR-3, PS-1), not the engine's default (an engine
  before 25.0 lets io_uring through it), private IPC and /dev/shm.
- every object labelled ``pairproof.run=<run>`` (and the instance), so ``remove_run_containers`` finds
  what a killed run left.

What a container writes to its stdout and stderr is the engine's log of it (``docker logs``: json-file on the
host while the container exists). The engine keeps that log only as long as the container; the platform reads
it just before it removes one, and keeps it for the run (``DockerEngine.engine_logs``): a log that existed was
readable by anyone with the engine's socket, and LG-1 judges every one.

Commands run inside through the engine (``docker exec``, as the agent's user, in the container's cgroup);
a host file (the static probe) runs by descriptor with ``nsenter`` from the host (``run_binary_inside``):
``docker exec`` can only run a path of the container's filesystem, and nothing of ours is written there.

docker-py is imported here only, when a Docker engine is made: the bubblewrap path never needs it.
"""

from __future__ import annotations

import errno
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from runtime.errors import SandboxError
from runtime.isolation import cgroups, seccomp
from runtime.isolation.cgroups import Limits
from runtime.isolation.cleanup import process_start_time
from runtime.isolation.sandbox import NAMESPACES, SANDBOX_PATH, ExecOutcome, SandboxSpec
from runtime.wait import until

LABEL_RUN = "pairproof.run"
LABEL_INSTANCE = "pairproof.instance"
CGROUP_PARENT = cgroups.ROOT_NAME  # the same parent folder as the bubblewrap sandboxes' cgroups
TMP_SIZE = "64m"
RESOLV_CONF = "resolv.conf"  # empty, in the instance's synthetic /etc folder (written by ``DockerEngine.start``)
SHM_SIZE = 16 << 20
# The most of one container's engine log the platform reads (its stdout and stderr as the engine kept them):
# past it the read stops and says so (``EngineLog.complete`` is False), never a silent cut.
ENGINE_LOG_MAX = 16 << 20


def _docker():
    try:
        import docker
    except ImportError as exc:
        raise SandboxError("the Docker engine needs docker-py: pip install docker (tools/setup-machine does)") from exc
    return docker


def client(timeout: float = 60.0):
    """A docker-py client of the local engine (``DOCKER_HOST`` or /var/run/docker.sock)."""
    docker = _docker()
    try:
        made = docker.from_env(timeout=int(timeout))
        made.ping()
    except docker.errors.DockerException as exc:
        raise SandboxError(f"no Docker engine answers ({exc}): start one with tools/setup-docker") from exc
    return made


def container_config(spec: SandboxSpec, limits: Limits, command: Sequence[str], *, image: str, run: str,
                     name: str) -> dict:
    """The keyword arguments of ``containers.create`` for one instance: every guard of the module docstring.
    Kept as data so a test can read what a container is made with, and a broken arrangement can start from
    it (and answer for what it changes)."""
    mounts = [
        {"Type": "bind", "Source": str(spec.volume), "Target": "/data", "ReadOnly": False},
        {"Type": "bind", "Source": str(spec.control_dir), "Target": "/run/agent", "ReadOnly": False},
        {"Type": "bind", "Source": str(spec.etc_dir / "passwd"), "Target": "/etc/passwd", "ReadOnly": True},
        {"Type": "bind", "Source": str(spec.etc_dir / "group"), "Target": "/etc/group", "ReadOnly": True},
        # An empty resolv.conf of ours: Docker would otherwise copy the host's in (its resolvers, unreachable
        # from here, and the host's configuration); with none, the sandbox names no resolver, as in bubblewrap.
        {"Type": "bind", "Source": str(spec.etc_dir / RESOLV_CONF), "Target": "/etc/resolv.conf", "ReadOnly": True},
    ]
    if spec.managed_config is not None:
        mounts.append({"Type": "bind", "Source": str(spec.managed_config), "Target": spec.managed_inside,
                       "ReadOnly": True})
    env = {"PATH": SANDBOX_PATH, "HOME": "/data", "LANG": "C.UTF-8", **dict(spec.env)}
    return {
        "image": image,
        # The platform's terms, not the image's: its own entrypoint (the image's ENTRYPOINT would wrap the
        # profile's command), no healthcheck of the image's, its stop signal (``image_refusals``: what cannot be
        # overridden here is refused before a container is made).
        "entrypoint": list(command[:1]),
        "command": list(command[1:]),
        "healthcheck": {"test": ["NONE"]},
        "stop_signal": "SIGTERM",
        "name": name,
        "hostname": spec.hostname,
        "user": f"{spec.uid}:{spec.gid}",
        "environment": env,
        "working_dir": "/data",
        "labels": {LABEL_RUN: run, LABEL_INSTANCE: spec.instance_id},
        "network_mode": "none",
        "read_only": True,
        "tmpfs": {"/tmp": f"rw,nosuid,nodev,size={TMP_SIZE},mode=1777"},
        "mounts": mounts,
        "mem_limit": limits.memory_bytes,
        "memswap_limit": limits.memory_bytes,  # without it the allocation would be swapped out, not killed
        "pids_limit": limits.pids_max,
        "nano_cpus": limits.cpu_millis * 1_000_000,  # the CPU quota, as the bubblewrap sandboxes' cgroups have it
        "cap_drop": ["ALL"],
        # no_new_privs, and the platform's seccomp profile instead of the engine's default (``seccomp.py``: the
        # default of this machine's engine lets io_uring through; the platform's refuses it and what the default
        # refuses by name)
        "security_opt": ["no-new-privileges", f"seccomp={seccomp.docker_profile()}"],
        # Loopback only, of both families as in a bubblewrap sandbox: Docker turns IPv6 off in the namespace,
        # and a connect to an IPv6 address would then fail "address not available" instead of "unreachable".
        "sysctls": {"net.ipv6.conf.all.disable_ipv6": "0", "net.ipv6.conf.default.disable_ipv6": "0"},
        "ipc_mode": "private",
        "cgroupns": "private",  # Docker's default on a cgroup v1 host is the host's cgroup namespace
        "shm_size": SHM_SIZE,
        "cgroup_parent": f"/{CGROUP_PARENT}/{run}",
        "init": False,  # the agent is pid 1 and the only process of its uid: no root docker-init beside it
        "stdin_open": False,
        "detach": True,
    }


@dataclass(frozen=True)
class EngineLog:
    """What the engine kept of one container's stdout and stderr: ``data`` is all of it when ``complete``,
    else its first ``ENGINE_LOG_MAX`` bytes (the container wrote more)."""

    instance: str
    container: str
    data: bytes
    complete: bool
    removed: bool  # read just before the container's removal (the engine's copy went with it)


def read_engine_log(api, container_id: str, limit: int = ENGINE_LOG_MAX) -> tuple[bytes, bool]:
    """The engine's log of a container, stdout and stderr in the order written, at most ``limit`` bytes; and
    whether that is all of it. Read as a stream so a container that wrote gigabytes costs ``limit``."""
    out = bytearray()
    stream = api.logs(container_id, stdout=True, stderr=True, stream=True, follow=False)
    try:
        for chunk in stream:
            out.extend(chunk)
            if len(out) > limit:
                return bytes(out[:limit]), False
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()
    return bytes(out), True


@dataclass
class ContainerSandbox:
    """A running instance container: its id, the host pid of its pid 1 (and that process's start time, so a
    reused pid is never taken for it), and its cgroup (Docker's, under ``pairproof/<run>/``)."""

    spec: SandboxSpec
    engine: DockerEngine
    container_id: str
    host_pid: int
    start_time: int
    cgroup: cgroups.Cgroup
    seccomp_filters: tuple[bytes, ...] = ()  # its pid 1's, oldest first (``seccomp.filters_of``); none: unconfined

    def alive(self) -> bool:
        return process_start_time(self.host_pid) == self.start_time

    def namespaces(self) -> dict[str, str]:
        try:
            return {ns: os.readlink(f"/proc/{self.host_pid}/ns/{ns}") for ns in NAMESPACES}
        except OSError as exc:
            raise SandboxError(f"container of {self.spec.instance_id} (pid {self.host_pid}) is gone: "
                               f"{exc.strerror}") from exc

    def exit_report(self) -> str:
        """How the container ended, for a message: its exit code and the tail of its output."""
        try:
            container = self.engine.client.containers.get(self.container_id)
            logs = container.logs(tail=20).decode(errors="replace").strip()
            return f"exit {container.attrs['State'].get('ExitCode')}: {logs}"
        except Exception as exc:  # the message is best effort; the caller raises anyway
            return f"(its state could not be read: {exc})"

    def crash(self) -> None:
        """SIGKILL the container's pid 1 from the host, as a host failure would; the container stays."""
        try:
            os.kill(self.host_pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        until(lambda: not self.alive(), 10, f"container {self.container_id[:12]} survived SIGKILL of its pid 1")

    def stop(self, deadline: float = 10.0) -> None:
        """Remove the container (killed first) and wait until no process of it is left."""
        self.engine.remove(self.container_id)
        until(lambda: not self.alive(), deadline, f"container {self.container_id[:12]} still runs after its removal")


GATE_INSIDE = "/run/pairproof-gate"
# pid 1 waits on a fifo of the host's (read-only mount) until the host writes to it, then execs the image's
# entrypoint and command; with the host gone, the read fails and nothing runs. dash's `read` is a builtin:
# the wait opens nothing but the fifo.
GATE_SCRIPT = f'read _ < {GATE_INSIDE}/go && exec "$@"'


# What an image may declare in its configuration: its ENV only these (the platform sets them itself, and an
# image's ENV is merged into every container's environment, LD_PRELOAD as well as anything else); no VOLUME (the
# engine would give it a writable, unlabelled volume beside the read-only root) and no ONBUILD. Its ENTRYPOINT,
# HEALTHCHECK and STOPSIGNAL are overridden by ``container_config``.
IMAGE_ENV_ALLOWED = frozenset({"PATH", "LANG"})


def image_refusals(attrs: Mapping) -> list[str]:
    """Why an image (its ``docker inspect`` attributes) cannot run on the platform's terms: one line each."""
    config = attrs.get("Config") or {}
    env = [entry.split("=", 1)[0] for entry in config.get("Env") or []]
    refused = []
    extra = sorted(set(env) - IMAGE_ENV_ALLOWED)
    if extra:
        refused.append(f"ENV {', '.join(extra)} (an image's environment reaches every process of the container; "
                       f"only {', '.join(sorted(IMAGE_ENV_ALLOWED))} may be set)")
    if config.get("Volumes"):
        refused.append(f"VOLUME {', '.join(sorted(config['Volumes']))} (a writable volume beside the read-only root)")
    if config.get("OnBuild"):
        refused.append(f"ONBUILD {len(config['OnBuild'])} instructions")
    return refused


class _Gate:
    """A gate before a container's first instruction: a fifo in a host folder mounted read-only at
    ``GATE_INSIDE``, pid 1 a ``/bin/sh`` (the suite's probes need one in the image anyway) reading it, then
    ``exec``ing what the container would have run (the platform's entrypoint, then the command)."""

    def __init__(self) -> None:
        import tempfile

        self.folder = Path(tempfile.mkdtemp(prefix="pairproof-gate-"))
        self.folder.chmod(0o755)
        self.fifo = self.folder / "go"
        os.mkfifo(self.fifo, 0o644)

    def wrap(self, config: dict) -> dict:
        return {**config, "entrypoint": ["/bin/sh", "-c", GATE_SCRIPT, "pairproof-gate"],
                "command": [*config.get("entrypoint", []), *config["command"]],
                "mounts": [*config["mounts"], {"Type": "bind", "Source": str(self.folder), "Target": GATE_INSIDE,
                                               "ReadOnly": True}]}

    def open(self, deadline: float) -> None:
        """Let pid 1 go: write once it has the fifo open for reading (no reader yet: ENXIO, polled). The fd is
        returned as fd + 1: 0 is a descriptor, and ``until`` waits for something truthy."""
        def writer() -> int:
            try:
                return os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK) + 1
            except OSError as exc:
                if exc.errno == errno.ENXIO:
                    return 0
                raise SandboxError(f"the container's gate could not be opened: {exc.strerror}") from None

        fd = until(writer, deadline, "the container's pid 1 never read its gate (does the image have /bin/sh?)",
                   every=0.005) - 1
        try:
            os.write(fd, b"go\n")
        finally:
            os.close(fd)

    def remove(self) -> None:
        import shutil

        shutil.rmtree(self.folder, ignore_errors=True)


class DockerEngine:
    """Starts instance containers of one image for one run, and removes them."""

    def __init__(self, image: str, run: str, *, docker_client=None) -> None:
        self.image, self.run = image, run
        self.client = docker_client or client()
        docker = _docker()
        try:
            attrs = self.client.images.get(image).attrs
        except docker.errors.ImageNotFound:
            raise SandboxError(f"image {image!r} is not in the local engine (nothing is pulled): build or load it "
                               "first (the reference agent image: acceptance.targets.docker.image)") from None
        refused = image_refusals(attrs)
        if refused:
            raise SandboxError(f"image {image!r} declares what the platform does not run: {'; '.join(refused)}")
        self.hierarchy = cgroups.detect()
        # The engine's log of every container removed so far (read just before its removal), for the run.
        self.removed_logs: dict[str, EngineLog] = {}

    def start(self, spec: SandboxSpec, limits: Limits, command: Sequence[str], *, deadline: float = 10.0,
              edit=None, on_gate: Callable[[int], None] | None = None) -> ContainerSandbox:
        """Create and start the instance's container; return once it has a pid 1. ``edit`` sees the
        configuration (``container_config``) and returns the one to use: whatever it changes, its caller
        answers for (broken arrangements only). ``on_gate(pid)``, if given, runs while the container's pid 1
        waits at a gate, before the image's entrypoint and command run (``_gated``): an observer attached from
        the host (a traced start) sees everything the agent does from its first instruction."""
        docker = _docker()
        name = f"pairproof-{self.run}-{spec.instance_id}-{os.urandom(3).hex()}"
        resolv = spec.etc_dir / RESOLV_CONF
        if not resolv.exists():
            resolv.write_text("")
            os.chmod(resolv, 0o644)
        config = container_config(spec, limits, command, image=self.image, run=self.run, name=name)
        if edit is not None:
            config = edit(config)
        gate = _Gate() if on_gate is not None else None
        if gate is not None:
            config = gate.wrap(config)
        # Three calls to the engine, the fewest there are: create, start, inspect (for the pid of the started
        # container). ``containers.run`` would make four (its create inspects the container not yet started),
        # and pull the image when the engine lacks it: nothing is pulled here, a missing image is an error.
        from docker.models.containers import _create_container_args

        api = self.client.api
        container_id = None
        try:
            container_id = api.create_container(**_create_container_args({**config, "version": api._version}))["Id"]
            api.start(container_id)
            state = api.inspect_container(container_id)["State"]
            pid = int(state.get("Pid") or 0)
            start_time = process_start_time(pid) if pid else None
            if not state.get("Running") or start_time is None:
                logs = api.logs(container_id, tail=20).decode(errors="replace").strip()
                raise SandboxError(f"container of {spec.instance_id} exited at once ({state.get('ExitCode')}): {logs}")
            # The filters its processes run under, read once from its pid 1 (at its gate, before the agent runs):
            # what the platform enters into it from the host runs under them too (``run_binary_inside``).
            try:
                filters = tuple(seccomp.filters_of(pid))
            except OSError as exc:
                raise SandboxError(f"container of {spec.instance_id}: {exc}") from exc
            if gate is not None:
                on_gate(pid)
                gate.open(deadline)
        except docker.errors.DockerException as exc:
            if container_id is not None:
                self.remove(container_id)
            raise SandboxError(f"cannot start a container of {self.image} for {spec.instance_id}: {exc}") from exc
        except BaseException:
            if container_id is not None:
                self.remove(container_id)
            raise
        finally:
            if gate is not None:
                gate.remove()
        cg = self.hierarchy.open(self.run, container_id)
        return ContainerSandbox(spec=spec, engine=self, container_id=container_id, host_pid=pid,
                                start_time=start_time, cgroup=cg, seccomp_filters=filters)

    def remove(self, container_id: str) -> None:
        docker = _docker()
        self._keep_log(container_id)
        try:
            self.client.api.remove_container(container_id, force=True, v=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if "already in progress" not in str(exc):
                raise SandboxError(f"cannot remove container {container_id[:12]}: {exc}") from exc

    def _keep_log(self, container_id: str) -> None:
        """Read the engine's log of a container about to be removed (it goes with the container), once."""
        docker = _docker()
        if container_id in self.removed_logs:
            return
        try:
            info = self.client.api.inspect_container(container_id)
            data, complete = read_engine_log(self.client.api, container_id)
        except docker.errors.NotFound:
            return  # removed already: by whoever removed it, who read it first if it was ours
        except docker.errors.DockerException as exc:
            raise SandboxError(f"cannot read the engine's log of container {container_id[:12]} before its "
                               f"removal: {exc}") from exc
        labels = (info.get("Config") or {}).get("Labels") or {}
        self.removed_logs[container_id] = EngineLog(labels.get(LABEL_INSTANCE, ""), info.get("Name", "").lstrip("/"),
                                                    data, complete, removed=True)

    def engine_logs(self) -> list[EngineLog]:
        """The engine's log of every container of the run: those that exist (running or not) read now, and
        those removed, as read just before their removal."""
        docker = _docker()
        logs = list(self.removed_logs.values())
        for container in run_containers(self.run, docker_client=self.client):
            if container.id in self.removed_logs:
                continue
            try:
                data, complete = read_engine_log(self.client.api, container.id)
            except docker.errors.NotFound:
                kept = self.removed_logs.get(container.id)  # removed meanwhile: read just before
                if kept is not None:
                    logs.append(kept)
                continue
            except docker.errors.DockerException as exc:
                raise SandboxError(f"cannot read the engine's log of container {container.name}: {exc}") from exc
            logs.append(EngineLog(container.labels.get(LABEL_INSTANCE, ""), container.name, data, complete,
                                  removed=False))
        return logs

    def close(self) -> None:
        """Remove every container of the run (a crashed one included) and close the client."""
        try:
            remove_run_containers(self.run, docker_client=self.client)
        finally:
            self.client.close()
        remove_parent_cgroups(self.run)

    # -- running something inside ------------------------------------------------------------------

    def run_inside(self, proc: ContainerSandbox, argv: Sequence[str], *, stdin: bytes | None = None,
                   timeout: float = 60.0) -> ExecOutcome:
        """``docker exec`` of ``argv`` as the instance's uid, with the sandbox's environment; past
        ``timeout`` the exec's process is killed from the host (the engine has no exec kill)."""
        if not proc.alive():
            raise SandboxError(f"container of {proc.spec.instance_id} is not running")
        api = self.client.api
        docker = _docker()
        try:
            exec_id = api.exec_create(
                proc.container_id, list(argv), stdin=stdin is not None, stdout=True, stderr=True,
                user=f"{proc.spec.uid}:{proc.spec.gid}", workdir="/data",
                environment={"PATH": SANDBOX_PATH, "HOME": "/data", "LANG": "C.UTF-8"})["Id"]
            sock = api.exec_start(exec_id, socket=True, demux=False)
        except docker.errors.DockerException as exc:
            raise SandboxError(f"docker exec of {list(argv)!r} in {proc.spec.instance_id}: {exc}") from exc
        raw = getattr(sock, "_sock", sock)
        try:
            stdout, stderr = _pump(raw, stdin, timeout, lambda: self._kill_exec(exec_id),
                                   f"{list(argv)!r} in {proc.spec.instance_id}")
        finally:
            raw.close()
        rc = self._exit_code(exec_id)
        return ExecOutcome(rc, stdout, stderr)

    def _kill_exec(self, exec_id: str) -> None:
        pid = self.client.api.exec_inspect(exec_id).get("Pid") or 0
        if pid > 0:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _exit_code(self, exec_id: str) -> int:
        # The stream ends a moment before the engine records the exit code.
        def exited() -> dict | None:
            info = self.client.api.exec_inspect(exec_id)
            return info if not info.get("Running") and info.get("ExitCode") is not None else None

        info = until(exited, 10, f"docker exec {exec_id[:12]} has no exit code 10 s after its output ended", every=0.005)
        return int(info["ExitCode"])

    def run_binary_inside(self, proc: ContainerSandbox, host_path: str, args: Sequence[str], *,
                          env: Mapping[str, str] | None = None, stdin: bytes | None = None,
                          timeout: float = 60.0, cgroup: cgroups.Cgroup | None = None,
                          by_name: bool = False) -> ExecOutcome:
        """Run the host file ``host_path`` in the container by descriptor, in its cgroup, as its uid (``by_name``:
        under its own file name, ``sandbox.open_to_run``).

        ``docker exec`` runs only paths of the container's filesystem; copying the probe in would write into
        what is being qualified (and a read-only root refuses it anyway). So, as for a bubblewrap sandbox,
        the file is opened on the host and executed after entering: ``ENTER_AS`` (root, from the host) enters
        the container's mount, pid, net, ipc, uts and cgroup namespaces and its root and working directory,
        drops to the instance's uid and gid with the agent's own supplementary groups (read from its pid 1 on
        the host: ``nsenter -S/-G`` would clear them, and a probe without a group the agent holds misses what
        that group reaches; every capability goes with uid 0) under ``no_new_privs`` (``setpriv``), and
        executes ``/proc/self/fd/N``, resolved in the container's own /proc. The process is placed in the
        container's cgroup (or ``cgroup``, one beside it) before it runs anything (``sandbox.spawn_gated``), and
        under the container's own seccomp filters (read from its pid 1 when it started, ``seccomp.filters_of``), so a
        probe judges what the agent may do with the agent's refusals, whatever profile the container was given."""
        from runtime.isolation.sandbox import _finish, namespace_flags, open_to_run, spawn_gated

        if not proc.alive():
            raise SandboxError(f"container of {proc.spec.instance_id} is not running")
        fd, name = open_to_run(host_path, proc.spec.instance_id, by_name=by_name)
        spaces = [ns for ns, flag in ENTER_ORDER if flag in namespace_flags(proc.host_pid)]
        # Under the container's own seccomp filters (handed over in a memfd), installed by ``ENTER_AS`` last, once
        # inside and as the instance's uid: installed first, a profile refusing setns or chroot (the engine's
        # default, to a container without the capabilities) would stop the entering itself.
        filters_fd = None
        if proc.seccomp_filters:
            filters_fd = os.memfd_create("pairproof-container-seccomp", 0)
            os.write(filters_fd, seccomp.pack(list(proc.seccomp_filters)))
            os.lseek(filters_fd, 0, os.SEEK_SET)
        argv = ["setpriv", "--no-new-privs", sys.executable, "-I", "-S", "-c", ENTER_AS, str(proc.host_pid),
                str(proc.spec.uid), str(proc.spec.gid), ",".join(map(str, agent_groups(proc.host_pid))), str(fd),
                ",".join(spaces), name, "" if filters_fd is None else str(filters_fd), *args]
        try:
            child = spawn_gated(
                argv, cgroup or proc.cgroup, pass_fds=(fd,) if filters_fd is None else (fd, filters_fd),
                env={"PATH": SANDBOX_PATH, "HOME": "/data", "LANG": "C.UTF-8", **(env or {})},
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
            )
        finally:
            os.close(fd)
            if filters_fd is not None:
                os.close(filters_fd)
        return _finish(child, stdin, timeout, f"{host_path} in {proc.spec.instance_id}")


# nsenter's order of entering (user first; mount last, as it resets the root); the user namespace is the host's
# under Docker (no remapping), so it is never among those entered here.
ENTER_ORDER = (("cgroup", "--cgroup"), ("ipc", "--ipc"), ("uts", "--uts"), ("net", "--net"), ("pid", "--pid"),
               ("mnt", "--mount"))
# ``nsenter -t PID <namespaces> --root --wd -S U -G G``, but with the agent's supplementary groups: root from the
# host, it opens PID's namespaces, root and working directory, enters them, drops to uid U, gid G and the
# groups given, then forks (a pid namespace takes its children) and the child executes the inherited descriptor
# FD (or, given NAME, the file NAME in the folder FD is open on, ``sandbox.enter_fd_argv``). Nothing is imported
# once the container's mount namespace is entered (its files are the image's: a module found there would run as
# root); every failure is one line on stderr and exit 126.
ENTER_AS = r"""
import ctypes, os, sys
def fail(what):
    os.write(2, ("pairproof-enter: " + what + "\n").encode(errors="replace"))
    os._exit(126)
try:
    pid, uid, gid, groups, fd, spaces, name, filters_fd = sys.argv[1:9]
    uid, gid, groups = int(uid), int(gid), [int(g) for g in groups.split(",") if g]
    libc = ctypes.CDLL(None, use_errno=True)
    filters, blob = [], b""
    if filters_fd:
        while True:
            chunk = os.read(int(filters_fd), 65536)
            if not chunk:
                break
            blob += chunk
        os.close(int(filters_fd))
    while blob:
        size = int.from_bytes(blob[:4], "big")
        filters.append(blob[4:4 + size])
        blob = blob[4 + size:]
    opened = [os.open("/proc/%s/ns/%s" % (pid, ns), os.O_RDONLY | os.O_CLOEXEC) for ns in spaces.split(",") if ns]
    root = os.open("/proc/%s/root" % pid, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    wd = os.open("/proc/%s/cwd" % pid, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    for space in opened:
        if libc.setns(space, 0) != 0:
            fail("setns: " + os.strerror(ctypes.get_errno()))
    os.fchdir(root)
    os.chroot(".")
    os.fchdir(wd)
    os.setgroups(groups)
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
        fail("the uid and gid did not change")
    child = os.fork()
    if child == 0:
        path = "/proc/self/fd/" + fd + ("/" + name if name else "")
        class Prog(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
        for data in filters:  # oldest first, as the container's pid 1 got them; no_new_privs is set (setpriv)
            buf = ctypes.create_string_buffer(data, len(data))
            if libc.prctl(22, 2, ctypes.byref(Prog(len(data) // 8, ctypes.cast(buf, ctypes.c_void_p))), 0, 0) != 0:
                fail("seccomp: " + os.strerror(ctypes.get_errno()))
        try:
            os.execv(path, [path, *sys.argv[9:]])
        except OSError as exc:
            fail("exec: " + os.strerror(exc.errno or 0))
    _, status = os.waitpid(child, 0)
    if os.WIFSIGNALED(status):
        os.kill(os.getpid(), os.WTERMSIG(status))
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 126)
except SystemExit:
    raise
except BaseException as exc:
    fail(type(exc).__name__ + ": " + str(exc))
"""


def agent_groups(host_pid: int) -> list[int]:
    """The supplementary groups of the container's pid 1 (the agent), as the host sees them."""
    try:
        with open(f"/proc/{host_pid}/status", "rb") as status:
            line = next((raw for raw in status if raw.startswith(b"Groups:")), b"Groups:")
    except OSError as exc:
        raise SandboxError(f"cannot read the groups of the container's pid 1 ({host_pid}): {exc.strerror}") from exc
    return [int(g) for g in line[len(b"Groups:"):].split()]


# The most one command run in a container may print (stdout and stderr, with the engine's frame headers): what it
# prints is read into the platform's memory, and the container is what is being qualified.
EXEC_OUTPUT_MAX = 1 << 30


def _pump(sock: socket.socket, stdin: bytes | None, timeout: float, kill, what: str) -> tuple[bytes, bytes]:
    """Exchange one exec's attached stream: send ``stdin`` then half-close (the engine then closes the
    process's stdin), read the multiplexed stdout/stderr frames until the stream ends."""
    end = time.monotonic() + timeout
    if stdin is not None:
        sock.sendall(stdin)
    if stdin is not None:
        sock.shutdown(socket.SHUT_WR)
    buf = bytearray()  # (bytes += chunk copied the whole output at every chunk: quadratic in what the exec printed)
    while True:
        left = end - time.monotonic()
        if left <= 0:
            kill()
            raise SandboxError(f"{what} ran past {timeout}s and was killed")
        ready, _, _ = select.select([sock], [], [], min(left, 0.5))
        if not ready:
            continue
        chunk = sock.recv(1 << 20)
        if not chunk:
            break
        buf += chunk
        if len(buf) > EXEC_OUTPUT_MAX:
            kill()
            raise SandboxError(f"{what} printed more than {EXEC_OUTPUT_MAX} bytes and was killed")
    out, err = bytearray(), bytearray()
    offset = 0
    while offset + 8 <= len(buf):
        kind, size = buf[offset], int.from_bytes(buf[offset + 4:offset + 8], "big")
        payload = buf[offset + 8:offset + 8 + size]
        (err if kind == 2 else out).extend(payload)
        offset += 8 + size
    return bytes(out), bytes(err)


def run_containers(run: str, *, docker_client=None) -> list:
    """The containers (running or not) labelled with ``run``."""
    made = docker_client or client()
    return made.containers.list(all=True, filters={"label": f"{LABEL_RUN}={run}"}, ignore_removed=True)


def remove_run_containers(run: str | None = None, *, docker_client=None) -> list[str]:
    """Remove every container, volume and network labelled with ``run`` (with None: of any run); the ids
    of the containers removed. A container is killed first; its cgroup goes with it."""
    docker = _docker()
    made = docker_client or client()
    selector = f"{LABEL_RUN}={run}" if run else LABEL_RUN
    removed = []
    for container in made.containers.list(all=True, filters={"label": selector}, ignore_removed=True):
        try:
            made.api.remove_container(container.id, force=True, v=True)
            removed.append(container.id)
        except docker.errors.NotFound:
            pass
    # (the engine is shared: a container, volume or network listed may be removed by its own run's teardown
    # before it is looked at or removed here; ``ignore_removed`` and NotFound let it go)
    for volume in made.volumes.list(filters={"label": selector}):
        try:
            volume.remove(force=True)
        except docker.errors.NotFound:
            pass
    for network in made.networks.list(filters={"label": selector}):
        try:
            network.remove()
        except docker.errors.NotFound:
            pass
    return removed


def remove_parent_cgroups(run: str, mount: Path = Path("/sys/fs/cgroup")) -> list[Path]:
    """Remove the empty ``pairproof/<run>`` folders Docker made as the containers' cgroup parent in every
    mounted hierarchy (it creates them, and never removes them); the folders removed. One that still holds a
    cgroup (a container not yet gone) is left, as rmdir refuses it."""
    removed = []
    for folder in [mount / CGROUP_PARENT / run, *mount.glob(f"*/{CGROUP_PARENT}/{run}")]:
        try:
            folder.rmdir()
            removed.append(folder)
        except OSError:
            continue
    for parent in [mount / CGROUP_PARENT, *mount.glob(f"*/{CGROUP_PARENT}")]:
        try:
            parent.rmdir()  # the shared parent goes with the last run (another run's folder keeps it)
        except OSError:
            pass
    return removed


def runs_with_containers(*, docker_client=None) -> set[str]:
    """The run ids that have a labelled container on the engine."""
    made = docker_client or client()
    return {c.labels.get(LABEL_RUN, "") for c in made.containers.list(all=True, filters={"label": LABEL_RUN},
                                                                ignore_removed=True)} - {""}


def runs_on_engine(*, docker_client=None) -> set[str]:
    """The run ids that have anything labelled on the engine: a container, a volume or a network (a run killed
    between creating a volume or network and its first container leaves only those)."""
    made = docker_client or client()
    selector = {"label": LABEL_RUN}
    labels = [v.attrs.get("Labels") or {} for v in made.volumes.list(filters=selector)]
    labels += [n.attrs.get("Labels") or {} for n in made.networks.list(filters=selector)]
    return runs_with_containers(docker_client=made) | ({lab.get(LABEL_RUN, "") for lab in labels} - {""})

