"""The sandbox: one agent process in its own namespaces, as its own host uid, inside its own cgroup.

Built with the tools made for it rather than raw syscalls:

- ``setpriv`` drops to the instance's host uid/gid (no supplementary groups) before anything runs, so
  bubblewrap runs unprivileged and the user namespace it creates maps exactly one uid: the instance's
  own (host ``/proc/<pid>/uid_map`` reads ``U U 1``).
- ``bwrap`` unshares user, mount, pid, ipc, uts, network and cgroup namespaces and builds the root from a
  tmpfs: the system folders bound read-only, a synthetic ``/etc/passwd``, a private ``/tmp``, the private
  volume at ``/data`` and the instance's run folder at ``/run/agent``. No ``--dev`` (a devpts mount the
  agent does not need); the few device nodes an agent needs are bound one by one. Once every mount is in
  place the root is remounted read-only (``--remount-ro /``): the agent writes only where it was given a
  place (the volume, its run folder, its /tmp).
- ``--disable-userns``: nothing in the sandbox can create a user namespace (nor, without one, any other
  namespace): a nested user namespace would hand the agent every capability inside it, and with them the
  kernel's namespace, mount and netfilter code. bwrap sets the sandbox namespace's
  ``user.max_user_namespaces`` to 1 and uses that one itself: the sandbox's processes live in a second
  user namespace nested in the first (which owns the other namespaces), and ``unshare(CLONE_NEWUSER)``
  from anywhere inside answers ``ENOSPC``.
- a seccomp filter (``seccomp.py``: keyctl, add_key, bpf, perf_event_open, userfaultfd, io_uring, unshare
  refused), given to bwrap as a descriptor (``--seccomp FD``, opened for each launch by ``launch``) and installed
  before ``nsenter`` on every command run inside a sandbox that has it (``run_inside``).
- the process is placed in its cgroup *before* it runs anything: ``spawn_gated`` starts a shell that waits
  on a pipe, the controller writes its pid into the cgroup, then releases it to ``exec`` the real command.
- ``nsenter`` runs a command inside a running sandbox (the same namespaces, root, uid, cgroup), as the
  agent itself would run it; the suite's probes go through this path.

The environment is emptied twice (``env=`` for the launcher, ``--clearenv`` for the sandbox): a secret
the controller holds in its own environment must not reach an instance.
"""

from __future__ import annotations

import json
import os
import select
import selectors
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from runtime.errors import SandboxError
from runtime.isolation import seccomp
from runtime.isolation.cgroups import Cgroup

SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
NAMESPACES = ("user", "mnt", "pid", "net", "ipc", "uts", "cgroup")
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
# Host files the dynamic loader and Python need; the rest of /etc (host config, keys) stays out.
ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/nsswitch.conf", "/etc/localtime")
ETC_DIRS = ("/etc/ld.so.conf.d", "/etc/alternatives", "/etc/ssl/certs")
# The gate (bash: dash takes single-digit fds only) reads a line from the pipe whose fd number is
# substituted in, closes it, then execs.
GATE = 'read -r _ <&{fd} || exit 111; exec {fd}<&-; exec "$@"'
# A command run inside a running sandbox (a probe, or a command run as the agent's own would be) is the memory
# limit's first choice over the agent: one that overruns the instance's limit is killed and the instance keeps
# answering, even for an agent that is itself large (hermes-agent holds ~130 MB of a 256 MB limit, and was the
# victim of RS-1's 400 MB allocation). Raised on the command, since lowering the agent's needs a privilege
# (CAP_SYS_RESOURCE) a platform may not have.
COMMAND_OOM_SCORE_ADJ = 500
# The seccomp filter's descriptor ``launch`` opened for the launch whose info descriptor is the key (descriptor
# numbers are unique among open ones, so concurrent launches never mix them up); ``bwrap_argv`` names it.
_SECCOMP_FDS: dict[int, int] = {}
# What seals the root read-only once every mount is in place (``bwrap_argv``); ``add_mounts`` puts a mount before it.
ROOT_SEAL = ["--remount-ro", "/"]
SECCOMP_APPLY = (sys.executable, "-I", "-S", str(Path(seccomp.__file__)), "--")


@dataclass(frozen=True)
class SandboxSpec:
    """Everything that makes one instance's sandbox; built by the controller, never by the agent."""

    instance_id: str
    uid: int
    gid: int
    volume: Path
    control_dir: Path
    etc_dir: Path
    image_dir: Path
    hostname: str
    env: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    # The operator's managed configuration (checked by the controller), read-only at ``managed_inside`` (a
    # file of its own folder under /etc: the agent's managed file, ``AgentLaunch.managed``).
    managed_config: Path | None = None
    managed_inside: str = "/etc/pairproof/managed.json"
    # The agent's installed software (host folder, path inside), read-only (``AgentLaunch.binds``).
    binds: tuple[tuple[Path, str], ...] = field(default_factory=tuple)
    # Start-up inputs on the volume the platform wrote for this start (host path, path inside under /data), bound
    # read-only over the volume: the agent reads them, and can neither change, replace nor remove them.
    pinned: tuple[tuple[Path, str], ...] = field(default_factory=tuple)


def _usr_merged_links() -> list[str]:
    args: list[str] = []
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/", name)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    return args


def bwrap_argv(spec: SandboxSpec, command: Sequence[str], *, info_fd: int, seccomp_fd: int | None = None) -> list[str]:
    """The full launcher command for one sandbox running ``command``. ``seccomp_fd``: the filter's descriptor
    (by default the one ``launch`` opened beside ``info_fd``)."""
    if seccomp_fd is None:
        seccomp_fd = _SECCOMP_FDS.get(info_fd)
    if seccomp_fd is None:
        raise SandboxError("no seccomp filter descriptor for this launch (bwrap_argv outside sandbox.launch)")
    argv = [
        "setpriv", f"--reuid={spec.uid}", f"--regid={spec.gid}", "--clear-groups", "--no-new-privs",
        "bwrap",
        "--unshare-user", "--disable-userns", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
        "--unshare-cgroup",
        "--die-with-parent", "--new-session", "--info-fd", str(info_fd), "--seccomp", str(seccomp_fd),
        "--hostname", spec.hostname,
        "--clearenv", "--setenv", "PATH", SANDBOX_PATH, "--setenv", "HOME", "/data",
        "--setenv", "LANG", "C.UTF-8",
        "--tmpfs", "/",
        "--ro-bind", "/usr", "/usr",
        *_usr_merged_links(),
        "--dir", "/etc",
    ]
    for path in ETC_FILES:
        if os.path.exists(path):
            argv += ["--ro-bind", path, path]
    for path in ETC_DIRS:
        if os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    argv += [
        "--ro-bind", str(spec.etc_dir / "passwd"), "/etc/passwd",
        "--ro-bind", str(spec.etc_dir / "group"), "/etc/group",
    ]
    if spec.managed_config is not None:
        # The file's folder is a tmpfs of its own, made read-only once the file is bound in: nobody inside adds a
        # file beside it (hermes-agent reads a managed .env from the same folder, and it would win).
        folder = os.path.dirname(spec.managed_inside)
        argv += ["--tmpfs", folder, "--ro-bind", str(spec.managed_config), spec.managed_inside, "--remount-ro", folder]
    argv += [
        "--proc", "/proc",
        "--dir", "/dev",
    ]
    for dev in DEVICES:
        argv += ["--dev-bind", dev, dev]
    argv += [
        "--tmpfs", "/tmp",
        "--dir", "/run",
        "--bind", str(spec.volume), "/data",
    ]
    for host, inside in spec.pinned:
        argv += ["--ro-bind", str(host), inside]
    argv += [
        "--bind", str(spec.control_dir), "/run/agent",
        "--ro-bind", str(spec.image_dir), "/opt/pairproof",
    ]
    for host, inside in spec.binds:
        argv += ["--ro-bind", str(host), inside]
    argv += [
        "--remount-ro", "/",
        "--chdir", "/data",
    ]
    for key, value in spec.env:
        argv += ["--setenv", key, value]
    argv += ["--", *command]
    return argv


def add_mounts(argv: list[str], mounts: Sequence[str]) -> list[str]:
    """``argv`` (``bwrap_argv``'s, as ``launch_extra``'s edit sees it) with the bwrap mount options ``mounts``
    added last among its mounts: before the root is remounted read-only (``ROOT_SEAL``), where bwrap can still
    create their mount points (after it: "Read-only file system"); before the command in a launcher without it."""
    for at in range(len(argv) - 1):
        if argv[at:at + 2] == ROOT_SEAL:
            break
    else:
        at = argv.index("--")
    return [*argv[:at], *mounts, *argv[at:]]


def spawn_gated(argv: Sequence[str], cgroup: Cgroup, *, pass_fds: Sequence[int] = (),
                env: Mapping[str, str] | None = None, oom_score_adj: int = 0,
                on_gate: Callable[[int], None] | None = None, **popen) -> subprocess.Popen:
    """Start ``argv`` as a member of ``cgroup`` from its first instruction.

    A shell waits on a pipe until the controller has written its pid into the cgroup (and, if given, its
    ``oom_score_adj``), then ``exec``s the command; if the controller dies first, the read fails and the shell
    exits without running anything. ``on_gate(pid)``, if given, runs while the shell waits: an observer attached
    to it from the host (a trace of a start) sees everything the command does from its first instruction.

    It starts in a session of its own: a terminal's Ctrl-C (SIGINT to the foreground process group) and
    ``timeout`` (SIGTERM to its group) reach the controller's process alone, which stops the command by pid.
    """
    popen.setdefault("start_new_session", True)
    gate_r, gate_w = os.pipe()
    try:
        proc = subprocess.Popen(
            ["/bin/bash", "-c", GATE.format(fd=gate_r), "pairproof-gate", *argv],
            pass_fds=(gate_r, *pass_fds),
            env=dict(env) if env is not None else {"PATH": SANDBOX_PATH},
            **popen,
        )
    except OSError as exc:
        os.close(gate_r)
        os.close(gate_w)
        raise SandboxError(f"cannot start {argv[0]}: {exc.strerror}") from exc
    os.close(gate_r)
    try:
        cgroup.add(proc.pid)
        if oom_score_adj:  # raised before anything runs, inherited by all it starts (raising needs no privilege)
            Path(f"/proc/{proc.pid}/oom_score_adj").write_text(str(oom_score_adj))
        if on_gate is not None:
            on_gate(proc.pid)
        os.write(gate_w, b"go\n")
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        os.close(gate_w)
    return proc


def _read_info(fd: int, proc: subprocess.Popen, deadline: float) -> dict:
    buf = b""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        ready, _, _ = select.select([fd], [], [], 0.05)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            buf += chunk
            try:
                return json.loads(buf)
            except ValueError:
                continue
        elif proc.poll() is not None:
            break
    stderr = proc.stderr.read().decode(errors="replace").strip() if proc.stderr and proc.poll() is not None else ""
    raise SandboxError(f"bwrap reported no sandbox pid within {deadline}s (exit {proc.poll()}): {stderr}")


@dataclass
class SandboxProcess:
    """A running sandbox: the launcher we own and the host pid of the sandbox's pid 1."""

    spec: SandboxSpec
    popen: subprocess.Popen
    host_pid: int
    cgroup: Cgroup
    seccomp: bool = True  # launched with the seccomp filter: commands entered are given it too

    def alive(self) -> bool:
        return self.popen.poll() is None

    def namespaces(self) -> dict[str, str]:
        """The namespace identities (``mnt:[4026...]``) of the sandbox, read from the host."""
        try:
            return {ns: os.readlink(f"/proc/{self.host_pid}/ns/{ns}") for ns in NAMESPACES}
        except OSError as exc:
            raise SandboxError(f"sandbox {self.spec.instance_id} (pid {self.host_pid}) is gone: {exc.strerror}") from exc

    def exit_report(self) -> str:
        """How the launcher ended, for a message: its exit code and what it said."""
        err = self.popen.stderr.read().decode(errors="replace").strip() if self.popen.stderr else ""
        return f"exit {self.popen.returncode}: {err}"

    def crash(self) -> None:
        """SIGKILL the launcher, as a host failure would (bwrap --die-with-parent takes the sandbox down)."""
        self.popen.kill()
        self.popen.wait()

    def stop(self, deadline: float = 5.0) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
        try:
            self.popen.wait(deadline)
        except subprocess.TimeoutExpired as exc:
            raise SandboxError(f"sandbox launcher {self.popen.pid} did not exit after SIGKILL") from exc
        if self.popen.stderr:
            self.popen.stderr.close()
        # bwrap --die-with-parent and the pid namespace take everything else down with pid 1; the
        # cgroup sweep catches a process that was mid-fork.
        self.cgroup.kill_all(deadline)


def start(spec: SandboxSpec, cgroup: Cgroup, command: Sequence[str], *, deadline: float = 10.0,
          on_gate: Callable[[int], None] | None = None) -> SandboxProcess:
    """Start ``command`` in a new sandbox and return once bwrap has reported the sandbox's pid."""
    return launch(spec, cgroup, lambda info_fd: bwrap_argv(spec, command, info_fd=info_fd), deadline=deadline,
                  on_gate=on_gate)


def launch(spec: SandboxSpec, cgroup: Cgroup, make_argv: Callable[[int], list[str]], *,
           deadline: float = 10.0, on_gate: Callable[[int], None] | None = None) -> SandboxProcess:
    """Start the launcher ``make_argv(info_fd)`` gated into ``cgroup``; wait for bwrap's pid report.

    ``start`` launches instances with the argv ``bwrap_argv`` makes, which carries every guard;
    ``Controller.launch_extra`` lets its caller edit that argv for a one-off sandbox (and answer for it).
    """
    info_r, info_w = os.pipe()
    filter_fd = seccomp.program_fd()
    _SECCOMP_FDS[info_w] = filter_fd
    try:
        popen = spawn_gated(
            make_argv(info_w), cgroup,
            pass_fds=(info_w, filter_fd), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            on_gate=on_gate,
        )
        os.close(info_w)
        _SECCOMP_FDS.pop(info_w, None)
        info_w = -1
        info = _read_info(info_r, popen, deadline)
    finally:
        os.close(info_r)
        if info_w >= 0:
            _SECCOMP_FDS.pop(info_w, None)
            os.close(info_w)
        os.close(filter_fd)
    # Commands entered later get the filter the sandbox was launched with (a launcher edited to run without one,
    # a deliberately broken arrangement, gets none).
    filtered = "--seccomp" in popen.args
    return SandboxProcess(spec=spec, popen=popen, host_pid=int(info["child-pid"]), cgroup=cgroup, seccomp=filtered)


def namespace_flags(host_pid: int) -> list[str]:
    """``nsenter``'s flags for each namespace ``host_pid`` has of its own (user, mount, pid, net, ipc, uts,
    cgroup); one it shares with this process (a container in the host's user namespace; a deliberately broken
    arrangement) needs no entering."""
    return [flag for ns, flag in (("user", "--user"), ("mnt", "--mount"), ("pid", "--pid"), ("net", "--net"),
                                  ("ipc", "--ipc"), ("uts", "--uts"), ("cgroup", "--cgroup"))
            if os.readlink(f"/proc/{host_pid}/ns/{ns}") != os.readlink(f"/proc/self/ns/{ns}")]


def enter_argv(host_pid: int, uid: int, gid: int, argv: Sequence[str]) -> list[str]:
    """A command that runs ``argv`` inside the sandbox whose pid 1 is ``host_pid``, as its uid.

    The sandbox's processes live in a user namespace nested in the one that owns its other namespaces
    (``--disable-userns``), so an unprivileged uid that entered the inner one first could enter nothing
    else. ``nsenter`` runs as root from the host (``setpriv`` clears its supplementary groups and sets
    ``no_new_privs`` first), enters the sandbox's mount, pid, net, ipc, uts and cgroup namespaces, then its
    user namespace, then drops to the instance's uid and gid (``-S``/``-G``; every capability goes with
    uid 0) before it executes anything: the probe gets no privilege the agent does not have.
    """
    return [
        "setpriv", "--clear-groups", "--no-new-privs",
        "nsenter", "-t", str(host_pid), *namespace_flags(host_pid), "-S", str(uid), "-G", str(gid), "--root", "--wd",
        "--", "/usr/bin/env", "-i", f"PATH={SANDBOX_PATH}", "HOME=/data", "LANG=C.UTF-8", *argv,
    ]


def enter_fd_argv(host_pid: int, uid: int, gid: int, fd: int, args: Sequence[str], *, name: str = "") -> list[str]:
    """Like ``enter_argv``, but what runs is the file open on the host as descriptor ``fd`` (inherited):
    ``nsenter`` executes ``/proc/self/fd/<fd>`` after entering the sandbox's root, a magic link to the
    host's open file, so nothing of the sandbox's image runs (no ``env``, no shell, no interpreter) and
    nothing is written into it. The environment is the launcher's (``run_binary_inside`` sets it).

    With ``name``, ``fd`` is the host folder that holds the file and ``nsenter`` executes ``/proc/self/fd/<fd>/
    <name>``: the program's argv[0] then ends in its own name (``nsenter`` cannot set it otherwise), which a
    multi-call binary such as busybox needs to know which program it is."""
    argv = enter_argv(host_pid, uid, gid, [])
    cut = argv.index("/usr/bin/env")
    return [*argv[:cut], f"/proc/self/fd/{fd}" + (f"/{name}" if name else ""), *args]


def open_to_run(host_path: str, instance_id: str, *, by_name: bool) -> tuple[int, str]:
    """The host descriptor a sandbox executes ``host_path`` through, and the name to run it by: the file itself
    (``by_name`` false: ``""``), or the folder holding it and the file's name (``enter_fd_argv``), looked up in
    that folder at exec time (a folder of the platform's, root's). Only a regular file is run."""
    path = Path(host_path)
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise SandboxError(f"cannot run {host_path} in {instance_id}: not a regular file")
        if not by_name:
            return os.open(path, os.O_RDONLY | os.O_CLOEXEC), ""
        return os.open(path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC), path.name
    except OSError as exc:
        raise SandboxError(f"cannot open {host_path} to run it in {instance_id}: {exc.strerror}") from exc


def filtered(proc: SandboxProcess, argv: list[str]) -> list[str]:
    """``argv`` (an ``nsenter`` command line) run under the sandbox's seccomp filter when the sandbox has one: the
    filter is installed first (by ``seccomp.py``, from the host), then ``setpriv`` and ``nsenter`` run under it."""
    return [*SECCOMP_APPLY, *argv] if proc.seccomp else argv


def run_binary_inside(proc: SandboxProcess, host_path: str, args: Sequence[str], *,
                      env: Mapping[str, str] | None = None, stdin: bytes | None = None,
                      timeout: float = 60.0, cgroup: Cgroup | None = None, by_name: bool = False) -> ExecOutcome:
    """Run the host file ``host_path`` in a running sandbox by descriptor, in its cgroup (or ``cgroup``: one
    beside it, for a run while the sandbox is frozen), and wait for it.

    The file is opened here, on the host (the sandbox's uid needs only its execute bit, not a path to it);
    the descriptor is handed down through ``setpriv`` and ``nsenter`` and executed in the sandbox's
    namespaces with its root and working directory, as its uid. ``by_name``: run under its own file name
    (``open_to_run``)."""
    if not proc.alive():
        raise SandboxError(f"sandbox {proc.spec.instance_id} is not running")
    fd, name = open_to_run(host_path, proc.spec.instance_id, by_name=by_name)
    try:
        child = spawn_gated(
            filtered(proc, enter_fd_argv(proc.host_pid, proc.spec.uid, proc.spec.gid, fd, args, name=name)),
            cgroup or proc.cgroup,
            pass_fds=(fd,),
            oom_score_adj=COMMAND_OOM_SCORE_ADJ,
            env={"PATH": SANDBOX_PATH, "HOME": "/data", "LANG": "C.UTF-8", **(env or {})},
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        )
    finally:
        os.close(fd)
    return _finish(child, stdin, timeout, f"{host_path} in {proc.spec.instance_id}")


@dataclass(frozen=True)
class ExecOutcome:
    rc: int
    stdout: bytes
    stderr: bytes


def run_inside(proc: SandboxProcess, argv: Sequence[str], *, stdin: bytes | None = None, timeout: float = 60.0) -> ExecOutcome:
    """Run ``argv`` in a running sandbox, in its cgroup, and wait for it."""
    if not proc.alive():
        raise SandboxError(f"sandbox {proc.spec.instance_id} is not running")
    child = spawn_gated(
        filtered(proc, enter_argv(proc.host_pid, proc.spec.uid, proc.spec.gid, argv)), proc.cgroup,
        oom_score_adj=COMMAND_OOM_SCORE_ADJ,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )
    return _finish(child, stdin, timeout, f"{list(argv)!r} in {proc.spec.instance_id}")


# After a command is killed: how long what it printed may take to drain. A process of the sandbox that left the
# command's session (setsid) can hold its output open for ever; past this the pipes are closed on it.
DRAIN_AFTER_KILL = 5.0
# What one command may print, stdout and stderr together, before it is killed: its output is held in the
# platform's memory (outside every cgroup), and ``yes`` inside a sandbox would otherwise fill it within its
# timeout. The same bound as a container's exec (``containers.EXEC_OUTPUT_MAX``).
OUTPUT_MAX = 1 << 30
_CHUNK = 1 << 16


class _Overflow(SandboxError):
    """A command printed more than ``OUTPUT_MAX`` (caught in ``_finish``, which kills it and says so)."""


def _collect(child: subprocess.Popen, stdin: bytes | None, deadline: float, limit: int | None
             ) -> tuple[bytes, bytes]:
    """Feed ``stdin`` and read stdout and stderr to their end, by ``deadline`` (``subprocess.TimeoutExpired``)
    and within ``limit`` bytes together (``_Overflow``; ``None``: read and discard, for a drain)."""
    outs = {child.stdout: bytearray(), child.stderr: bytearray()}
    total = 0
    pending = memoryview(stdin or b"")
    with selectors.DefaultSelector() as selector:
        for stream in outs:
            if stream is not None:
                selector.register(stream, selectors.EVENT_READ)
        if child.stdin is not None:
            if pending:
                os.set_blocking(child.stdin.fileno(), False)
                selector.register(child.stdin, selectors.EVENT_WRITE)
            else:
                child.stdin.close()
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(child.args, 0)
            for key, _ in selector.select(left):
                if key.fileobj is child.stdin:
                    try:
                        pending = pending[os.write(key.fd, pending[:_CHUNK]):]
                    except BrokenPipeError:
                        pending = pending[len(pending):]
                    if not pending:
                        selector.unregister(key.fileobj)
                        child.stdin.close()
                    continue
                chunk = os.read(key.fd, _CHUNK)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                if limit is not None:
                    total += len(chunk)
                    if total > limit:
                        raise _Overflow()
                    outs[key.fileobj] += chunk
    return bytes(outs[child.stdout]), bytes(outs[child.stderr])


def _finish(child: subprocess.Popen, stdin: bytes | None, timeout: float, what: str) -> ExecOutcome:
    """Feed ``stdin``, wait for the command; past ``timeout``, or past ``OUTPUT_MAX`` bytes of output, its whole
    session is killed, and whatever still holds its output (a process that left the session) is given
    ``DRAIN_AFTER_KILL`` seconds, then cut off."""
    deadline = time.monotonic() + timeout
    try:
        out, err = _collect(child, stdin, deadline, OUTPUT_MAX)
        child.wait(timeout=max(0.0, deadline - time.monotonic()))
    except (subprocess.TimeoutExpired, _Overflow) as exc:
        os.killpg(child.pid, signal.SIGKILL)
        try:
            _collect(child, None, time.monotonic() + DRAIN_AFTER_KILL, None)
        except subprocess.TimeoutExpired:
            pass
        for stream in (child.stdin, child.stdout, child.stderr):
            if stream is not None:
                stream.close()
        child.wait()  # the command itself was the session's leader: killed above
        why = f"ran past {timeout}s" if isinstance(exc, subprocess.TimeoutExpired) else \
            f"printed more than {OUTPUT_MAX} bytes"
        raise SandboxError(f"{what} {why} and was killed") from None
    for stream in (child.stdout, child.stderr):
        if stream is not None:
            stream.close()
    return ExecOutcome(child.returncode, out, err)
