"""nsbox: a tiny platform of our own, the thing the example driver (``nsbox_driver.py``) qualifies.

It is not part of pairproof: it stands for "your company's platform". An instance is a process tree in
fresh pid, net and mount namespaces (util-linux ``unshare``), running under its own unprivileged host uid,
in its own memory and pids cgroups (cgroup v1 or v2), with its volume bound at ``/mnt/data``, a private
``/tmp`` and the platform's state folder hidden under a tmpfs. Its "agent" is a few lines of Python run
inside the sandbox for each turn: it keeps memory, transcript and task notes in its volume. There is no
broker, model, product server, snapshot or credential of any kind, which is the point: the driver has
the core and the broken arrangements this platform can honestly build, and nothing else.

Needs root, util-linux (unshare, nsenter, setpriv) and python3 on the host.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# The agent: one turn, run inside the sandbox as the instance's uid. The message arrives on stdin.
AGENT = r"""
import sys, pathlib
data = pathlib.Path("/mnt/data")
message = sys.stdin.read()
files = {"memory": "memory.txt", "transcript": "transcript.txt", "task": "tasks.txt"}
if message.startswith("show "):
    what = message[5:].strip()
    path = data / files.get(what, "notes.txt")
    sys.stdout.write(path.read_text() if path.exists() else "")
    sys.exit(0)
with open(data / "transcript.txt", "a") as f:
    f.write(message + "\n")
if message.startswith("remember: "):
    with open(data / "memory.txt", "a") as f:
        f.write(message[len("remember: "):] + "\n")
    print("I will remember that.")
elif message.startswith("task: "):
    with open(data / "tasks.txt", "a") as f:
        f.write(message[len("task: "):] + "\n")
    print("Task added.")
elif message.startswith("save notes.txt: "):
    (data / "notes.txt").write_text(message[len("save notes.txt: "):] + "\n")
    print("Saved notes.txt.")
else:
    print("ok")
"""


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

    def start(self, name: str, *, uid: int, volume: Path, tmp: Path | None = None, memory_mb: int = 256,
              pids_max: int = 128, share_host_pids: bool = False, env: dict[str, str] | None = None) -> Sandbox:
        """Start sandbox ``name``: ``volume`` at /mnt/data, ``tmp`` (its own by default) at /tmp."""
        if name in self.sandboxes:
            raise NsBoxError(f"sandbox {name} is already running")
        if tmp is None:
            tmp = self.root / "tmp" / name
            tmp.mkdir(parents=True, exist_ok=True)
            os.chown(tmp, uid, uid)
            os.chmod(tmp, 0o700)
        cgroups = self._make_cgroups(name, memory_mb, pids_max)
        # As root in the new mount namespace: /data and /tmp bound, the platform's folder hidden, then the
        # sandbox's init drops to the instance's uid with no capabilities.
        # (/tmp is moved into place last: the platform's folder may itself be under the host's /tmp.)
        script = (f"set -e; mount --make-rprivate /; mount -t tmpfs -o mode=755 nsbox /mnt; mkdir /mnt/data /mnt/.tmp; "
                  f"mount --bind '{volume}' /mnt/data; mount --bind '{tmp}' /mnt/.tmp; "
                  f"mount -t tmpfs -o mode=700 nsbox '{self.root}'; mount --move /mnt/.tmp /tmp; rmdir /mnt/.tmp; "
                  f"exec setpriv --reuid={uid} --regid={uid} --clear-groups --inh-caps=-all --bounding-set=-all "
                  f"--no-new-privs sleep infinity")
        # With a pid namespace, unshare forks the init (pid 1 inside) and stays outside it; sharing the host's,
        # it execs the script itself, so no root process is left in the sandbox's mount and net namespaces.
        flags = ["--net", "--mount"] if share_host_pids else ["--pid", "--mount-proc", "--net", "--mount", "--fork",
                                                               "--kill-child"]
        outer = subprocess.Popen(["unshare", *flags, "sh", "-c", script], cwd="/", start_new_session=True,
                                 env={"PATH": PATH, **(env or {})}, preexec_fn=self._join(cgroups),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if outer.poll() is not None:
                self._remove_cgroups(cgroups)
                raise NsBoxError(f"sandbox {name} did not start: {outer.stderr.read().decode(errors='replace')}")
            children = ([str(outer.pid)] if share_host_pids else
                        Path(f"/proc/{outer.pid}/task/{outer.pid}/children").read_text().split())
            if children:
                init = int(children[0])
                try:
                    ready = (os.stat(f"/proc/{init}").st_uid == uid
                             and Path(f"/proc/{init}/comm").read_text().strip() == "sleep")
                except OSError:
                    ready = False
                if ready:
                    box = Sandbox(name, uid, uid, volume, tmp, outer, init, cgroups)
                    self.sandboxes[name] = box
                    self.record(f"start {name} uid={uid} pid={init}")
                    return box
            time.sleep(0.01)
        self._kill(outer)
        self._remove_cgroups(cgroups)
        raise NsBoxError(f"sandbox {name} did not start within 10 s")

    def exec(self, name: str, argv: list[str], *, stdin: bytes | None = None, timeout: float = 60.0
             ) -> subprocess.CompletedProcess:
        """Run ``argv`` in the sandbox as its agent: its namespaces, its uid, its cgroups, a clean env."""
        box = self.sandboxes.get(name)
        if box is None:
            raise NsBoxError(f"no running sandbox {name}")
        ns = ["-p", "-n", "-m"] if box.outer.args[1] == "--pid" else ["-n", "-m"]
        return subprocess.run(["nsenter", "-t", str(box.init_pid), *ns, "-S", str(box.uid), "-G", str(box.gid),
                               "-w", "--", *argv], input=stdin, capture_output=True, timeout=timeout, cwd="/",
                              env={"PATH": PATH, "HOME": "/mnt/data"}, preexec_fn=self._join(box.cgroups))

    def agent_turn(self, name: str, message: str, request_id: str = "") -> str:
        self.record(f"turn {name} request_id={request_id or '-'}")
        done = self.exec(name, ["python3", "-c", AGENT], stdin=message.encode(), timeout=30)
        if done.returncode != 0:
            raise NsBoxError(f"the agent of {name} failed: {done.stderr.decode(errors='replace')[-500:]}")
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
