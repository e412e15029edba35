"""A target with next to no isolation: each instance is a root process in fresh pid, net and mount
namespaces (util-linux ``unshare``), and probes run there as root through ``nsenter``.

It exists to test the plugin's rules quickly and for real (probes really run, proof lines are really
checked against the instance's namespaces and cross-checked on the host); it must never be used to
qualify anything, and its ``broken`` arrangements are just another such instance.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

from acceptance.contract import Artifacts, ExecResult, Identity, InstanceRef

NAMESPACES = ("user", "mnt", "pid", "net", "ipc", "uts", "cgroup")


def create(options):
    return LocalTarget(options)


class LocalTarget:
    name = "local"

    def __init__(self, options) -> None:
        self.options = options
        self._outer: dict[str, subprocess.Popen] = {}
        self._inner: dict[str, int] = {}

    def provision(self, principal, **_):
        return self._start(InstanceRef(principal, f"local-{principal.name}"))

    def _start(self, ref):
        if ref.key in self._inner:
            return ref
        outer = subprocess.Popen(["unshare", "--pid", "--net", "--mount", "--fork", "--mount-proc", "--kill-child",
                                  "sleep", "infinity"], start_new_session=True)
        self._outer[ref.key] = outer
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            children = Path(f"/proc/{outer.pid}/task/{outer.pid}/children").read_text().split()
            if children and os.readlink(f"/proc/{children[0]}/ns/pid") != os.readlink("/proc/self/ns/pid"):
                self._inner[ref.key] = int(children[0])
                return ref
            time.sleep(0.01)
        raise RuntimeError("the local instance did not start within 10 s")

    def exec(self, ref, argv, *, stdin=None, timeout=60.0):
        pid = self._inner[ref.key]
        r = subprocess.run(["nsenter", "-t", str(pid), "-p", "-n", "-m", "--", *argv], input=stdin,
                           capture_output=True, timeout=timeout)
        return ExecResult(r.returncode, r.stdout, r.stderr)

    def identity(self, ref):
        pid = self._inner[ref.key]
        return Identity(host_pid=pid, uid=os.getuid(), gid=os.getgid(), uid_map="",
                        namespaces={ns: os.readlink(f"/proc/{pid}/ns/{ns}") for ns in NAMESPACES})

    def turn(self, ref, message):
        return "ok"

    def plant(self, ref, location, token):
        pass

    def read_back(self, ref, location):
        return ""

    def platform_secrets(self):
        return dict(self.options.secrets)

    def artifacts(self):
        return Artifacts(state_dir=Path("/nonexistent"))

    @contextmanager
    def broken(self, control, **context):
        yield self._start(InstanceRef(context.get("principal") or context.get("intruder"), "local-broken"))

    def close(self):
        for outer in self._outer.values():
            os.killpg(outer.pid, signal.SIGKILL)
            outer.wait()

    wake = recreate = lambda self, ref: ref
    sleep = destroy = crash = lambda self, ref: None
