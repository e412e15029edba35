"""nsbox: a tiny platform of our own, the thing the example driver (``nsbox_driver.py``) qualifies.

It is not part of pairproof: it stands for "your company's platform". An instance is a sandbox in fresh
user, pid, net, mount, ipc and uts namespaces (util-linux ``unshare``): its user namespace maps its own
unprivileged host uid and nothing else; its root is a tmpfs holding the host's /usr, its volume at /data,
a private /tmp, a few /etc files and devices, and its agent's files read-only at /opt/pairproof; it sits
in its own memory and pids cgroups (v1 or v2). Its agent is resident (pid 1 of the sandbox) and serves
turns on a port inside the sandbox's own network namespace; the platform delivers a turn from inside.
There is no broker, model, product server, snapshot or credential of any kind, which is the point: the
driver has the core and the broken arrangements this platform can honestly build, and nothing else.

Needs root, util-linux (unshare, nsenter, setpriv, pivot_root), iproute2 and python3 on the host.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

DEVICES = ("null", "zero", "full", "random", "urandom")

# A turn's client, run inside the sandbox: the message on stdin, POSTed as {input_field: message}; the
# answer's reply_field on stdout.
CLIENT = r"""
import json, sys, urllib.request
method, url, input_field, reply_field = sys.argv[1:]
request = urllib.request.Request(url, method=method, data=json.dumps({input_field: sys.stdin.read()}).encode(),
                                 headers={"Content-Type": "application/json"})
with urllib.request.urlopen(request, timeout=20) as answer:
    sys.stdout.write(json.loads(answer.read())[reply_field])
"""


@dataclass(frozen=True)
class Agent:
    """The resident agent a sandbox runs: its command, the files it needs (at /opt/pairproof), its
    environment, and its turn API (a port inside the sandbox, a route, the message and reply fields)."""

    command: tuple[str, ...]
    files: tuple[Path, ...]
    env: dict
    port: int
    start_route: str
    input_field: str
    reply_field: str


def _listening(pid: int, port: int) -> bool:
    """Whether something listens on ``port`` in ``pid``'s network namespace (the host's view of it)."""
    try:
        lines = Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return False
    return any(f":{port:04X}" == line.split()[1][-5:] and line.split()[3] == "0A" for line in lines)




class NsBoxError(Exception):
    """Anything the platform could not do."""


@dataclass
class Sandbox:
    name: str
    uid: int
    gid: int
    volume: Path
    tmp: Path
    outer: subprocess.Popen
    init_pid: int
    cgroups: list[Path]
    agent: Agent
    share_host_pids: bool


class NsBox:
    """The platform's control plane: start, exec in, stop sandboxes under ``root``."""

    def __init__(self, root: Path, *, first_uid: int = 61000) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o711)
        self._next_uid = first_uid
        self.sandboxes: dict[str, Sandbox] = {}
        self.log = self.root / "platform.log"

    def record(self, line: str) -> None:
        with open(self.log, "a") as f:
            f.write(f"{time.time():.3f} {line}\n")

    def new_uid(self) -> int:
        uid = self._next_uid
        self._next_uid += 1
        return uid

    def volume_for(self, name: str, uid: int) -> Path:
        volume = self.root / "volumes" / name
        volume.mkdir(parents=True, exist_ok=True)
        os.chown(volume, uid, uid)
        os.chmod(volume, 0o700)
        return volume

    # -- cgroups: v1 (one folder per controller) or v2 (one unified folder) --

    def _make_cgroups(self, name: str, memory_mb: int, pids_max: int) -> list[Path]:
        group = f"nsbox-{self.root.name}-{name}"
        if (CGROUP_ROOT / "cgroup.controllers").exists():  # v2
            path = CGROUP_ROOT / group
            path.mkdir(exist_ok=True)
            (path / "memory.max").write_text(str(memory_mb << 20))
            if (path / "memory.swap.max").exists():
                (path / "memory.swap.max").write_text("0")
            (path / "pids.max").write_text(str(pids_max))
            return [path]
        memory, pids = CGROUP_ROOT / "memory" / group, CGROUP_ROOT / "pids" / group
        for path in (memory, pids):
            path.mkdir(exist_ok=True)
        (memory / "memory.limit_in_bytes").write_text(str(memory_mb << 20))
        if (memory / "memory.memsw.limit_in_bytes").exists():
            (memory / "memory.memsw.limit_in_bytes").write_text(str(memory_mb << 20))
        (pids / "pids.max").write_text(str(pids_max))
        return [memory, pids]

    @staticmethod
    def _join(cgroups: list[Path]):
        def join() -> None:  # runs in the child before exec: the child and all it starts are in the cgroups
            for path in cgroups:
                (path / "cgroup.procs").write_text(str(os.getpid()))
        return join

    # -- sandboxes --

    def start(self, name: str, *, uid: int, volume: Path, agent: Agent, tmp: Path | None = None,
              memory_mb: int = 256, pids_max: int = 128, share_host_pids: bool = False) -> Sandbox:
        """Start sandbox ``name`` and its resident agent: ``volume`` at /data, ``tmp`` (its own by default)
        at /tmp, the agent's files read-only at /opt/pairproof, the host's /usr read-only, nothing else."""
        if name in self.sandboxes:
            raise NsBoxError(f"sandbox {name} is already running")
        if tmp is None:
            tmp = self.root / "tmp" / name
            tmp.mkdir(parents=True, exist_ok=True)
            os.chown(tmp, uid, uid)
            os.chmod(tmp, 0o700)
        etc = self.root / "etc" / name
        etc.mkdir(parents=True, exist_ok=True)
        os.chmod(etc.parent, 0o711)
        accounts = {0: "root", 65534: "nobody", uid: "agent" if uid not in (0, 65534) else None}
        (etc / "passwd").write_text("".join(f"{n}:x:{u}:{u}::/data:/bin/sh\n" for u, n in accounts.items() if n))
        (etc / "group").write_text("".join(f"{n}:x:{u}:\n" for u, n in accounts.items() if n))
        image = self.root / "image" / name
        image.mkdir(parents=True, exist_ok=True)
        os.chmod(image.parent, 0o711)
        for source in agent.files:
            shutil.copyfile(source, image / Path(source).name)
            os.chmod(image / Path(source).name, 0o644)
        cgroups = self._make_cgroups(name, memory_mb, pids_max)
        q = shlex.quote
        binds = "".join(f"touch etc/{f}; mount --bind {q(str(etc / f))} etc/{f}; " for f in ("passwd", "group"))
        binds += "".join(f"[ -e /etc/{f} ] && touch etc/{f} && mount --bind /etc/{f} etc/{f}; "
                         for f in ("ld.so.cache", "nsswitch.conf"))
        devices = "".join(f"touch dev/{d}; mount --bind /dev/{d} dev/{d}; " for d in DEVICES)
        proc = "mount --rbind /proc proc" if share_host_pids else "mount -t proc proc proc"
        command = " ".join(q(a) for a in agent.command)
        environment = " ".join(q(f"{k}={v}") for k, v in {"PATH": PATH, "HOME": "/data", **agent.env}.items())
        # Runs as the instance's uid inside its own user namespace (uid -> the same host uid, nothing else
        # mapped), with that namespace's capabilities: build a root of its own, pivot into it, drop every
        # capability, exec the agent.
        script = ("set -e; mount --make-rprivate /; ip link set lo up; "
                  "mount -t tmpfs -o mode=755 nsbox /mnt; cd /mnt; "
                  "mkdir usr data tmp proc dev etc opt opt/pairproof run .old; "
                  "ln -s usr/bin bin; ln -s usr/sbin sbin; ln -s usr/lib lib; ln -s usr/lib64 lib64; "
                  f"mount --rbind /usr usr; mount --bind {q(str(volume))} data; mount --bind {q(str(tmp))} tmp; "
                  f"mount --bind {q(str(image))} opt/pairproof; mount -o remount,bind,ro opt/pairproof; "
                  f"{binds}{devices}{proc}; "
                  "pivot_root . .old; cd /; umount -n -c -l /.old; rmdir /.old; cd /data; "
                  "exec setpriv --ambient-caps=-all --inh-caps=-all --bounding-set=-all --no-new-privs -- "
                  f"env -i {environment} {command}")
        # With a pid namespace, unshare forks the agent (pid 1 inside) and waits outside it; sharing the
        # host's, it execs the script itself, so no other process is left in the sandbox's namespaces.
        spaces = ["--net", "--mount", "--ipc", "--uts"]
        if not share_host_pids:
            spaces += ["--pid", "--fork", "--kill-child"]
        outer = subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                                  "unshare", "--user", f"--map-user={uid}", f"--map-group={uid}", "--keep-caps",
                                  *spaces, "sh", "-c", script],
                                 cwd="/", start_new_session=True, env={"PATH": PATH},
                                 preexec_fn=self._join(cgroups), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if outer.poll() is not None:
                self._remove_cgroups(cgroups)
                raise NsBoxError(f"sandbox {name} did not start: {outer.stderr.read().decode(errors='replace')}")
            children = ([str(outer.pid)] if share_host_pids else
                        Path(f"/proc/{outer.pid}/task/{outer.pid}/children").read_text().split())
            if children and _listening(int(children[0]), agent.port):
                box = Sandbox(name, uid, uid, volume, tmp, outer, int(children[0]), cgroups, agent,
                              share_host_pids)
                self.sandboxes[name] = box
                self.record(f"start {name} uid={uid} pid={box.init_pid}")
                return box
            time.sleep(0.02)
        self._kill(outer)
        self._remove_cgroups(cgroups)
        raise NsBoxError(f"sandbox {name}: its agent did not listen on port {agent.port} within 10 s: "
                         f"{outer.stderr.read1().decode(errors='replace') if outer.stderr else ''}")

    def exec(self, name: str, argv: list[str], *, stdin: bytes | None = None, timeout: float = 60.0
             ) -> subprocess.CompletedProcess:
        """Run ``argv`` in the sandbox as its agent: its namespaces, root, uid, cgroups, a clean env."""
        box = self.sandboxes.get(name)
        if box is None:
            raise NsBoxError(f"no running sandbox {name}")
        spaces = ["-U", "-n", "-m", "-i", "-u"] + ([] if box.share_host_pids else ["-p"])
        return subprocess.run(["nsenter", "-t", str(box.init_pid), *spaces, "-r", "-w", "-S", str(box.uid),
                               "-G", str(box.gid), "--", "env", "-i", f"PATH={PATH}", "HOME=/data", *argv],
                              input=stdin, capture_output=True, timeout=timeout, cwd="/",
                              preexec_fn=self._join(box.cgroups))

    def agent_turn(self, name: str, message: str, request_id: str = "") -> str:
        """Deliver one turn to the sandbox's resident agent, from inside its network namespace."""
        box = self.sandboxes.get(name)
        if box is None:
            raise NsBoxError(f"no running sandbox {name}")
        self.record(f"turn {name} request_id={request_id or '-'}")
        method, path = box.agent.start_route.split(" ", 1)
        done = self.exec(name, ["python3", "-I", "-S", "-c", CLIENT, method, f"http://127.0.0.1:{box.agent.port}{path}",
                                box.agent.input_field, box.agent.reply_field], stdin=message.encode(), timeout=30)
        if done.returncode != 0:
            raise NsBoxError(f"the agent of {name} did not answer the turn: {done.stderr.decode(errors='replace')[-500:]}")
        return done.stdout.decode()

    def stop(self, name: str) -> None:
        box = self.sandboxes.pop(name, None)
        if box is None:
            return
        self._kill(box.outer)
        for path in box.cgroups:  # what was started beside the init (a shared-pid sandbox's exec) goes too
            for pid in (path / "cgroup.procs").read_text().split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 10
        while Path(f"/proc/{box.init_pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        self._remove_cgroups(box.cgroups)
        self.record(f"stop {name}")

    @staticmethod
    def _kill(outer: subprocess.Popen) -> None:
        try:
            os.killpg(outer.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        outer.wait()

    @staticmethod
    def _remove_cgroups(cgroups: list[Path]) -> None:
        for path in cgroups:
            deadline = time.monotonic() + 5
            while path.exists():
                try:
                    path.rmdir()
                except OSError:  # busy until its last process is reaped
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.02)

    def shutdown(self) -> None:
        for name in list(self.sandboxes):
            self.stop(name)
        shutil.rmtree(self.root, ignore_errors=True)
