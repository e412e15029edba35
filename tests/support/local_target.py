"""A target with no isolation at all: probes run on the host as the test process.

It exists to test the plugin's rules quickly and for real (probes really run, proof lines are really
checked against this process's namespaces); it must never be used to qualify anything, and its
``broken`` arrangements are just the host itself.
"""

from __future__ import annotations

import os
import subprocess
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

    def provision(self, principal, **_):
        return InstanceRef(principal, f"local-{principal.name}")

    def exec(self, ref, argv, *, stdin=None, timeout=60.0):
        r = subprocess.run(list(argv), input=stdin, capture_output=True, timeout=timeout)
        return ExecResult(r.returncode, r.stdout, r.stderr)

    def identity(self, ref):
        # The probe is a child of this process: same namespaces, same uid.
        return Identity(host_pid=os.getpid(), uid=os.getuid(), gid=os.getgid(), uid_map="",
                        namespaces={ns: os.readlink(f"/proc/self/ns/{ns}") for ns in NAMESPACES})

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
        yield InstanceRef(context.get("principal") or context.get("intruder"), "local-broken")

    def close(self):
        pass

    wake = recreate = lambda self, ref: ref
    sleep = destroy = crash = lambda self, ref: None
