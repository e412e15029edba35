"""A pairproof driver for nsbox (``nsbox.py``), written by following docs/writing-a-driver.md.

    PYTHONPATH=examples/local-driver pairproof check-driver nsbox_driver:create
    PYTHONPATH=examples/local-driver pairproof qualify --target nsbox_driver:create --reports-dir reports-nsbox

It implements the core and the broken arrangements nsbox can really build (a shared volume, a shared /tmp,
the host's pid namespace, the owner's uid, a host account's uid): the filesystem, process, identity and
resource cases run. nsbox has no broker, model path, product server, snapshots, credentials, lifecycle
API or tool surface, so the driver offers none of those facets, and the cases that need them are reported
"not covered: target lacks <facet>".
"""

from __future__ import annotations

import os
import pwd
from contextlib import contextmanager
from pathlib import Path

from acceptance.contract import Artifacts, ExecResult, Identity, InstanceRef
from acceptance.errors import TargetError

from nsbox import NsBox, NsBoxError

NAMESPACES = ("user", "pid", "mnt", "net", "uts", "ipc", "cgroup")
ASK = {"memory": "remember: my locker code is {}", "transcript": "the code on my badge reads {}",
       "task": "task: renew the parking permit, reference {}", "volume": "save notes.txt: {}"}


def create(options):
    return NsBoxDriver(options)


class NsBoxDriver:
    name = "nsbox"

    def __init__(self, options) -> None:
        self.options = options
        # everything this run makes lives under one folder named by the run, so two runs never meet
        self.box = NsBox(Path(options.state_dir) / f"nsbox-{options.run}")
        self._uids: dict[str, int] = {}  # one host uid per (org, user), kept across its sandboxes

    def _guard(self, what, *args, **kwargs):
        try:
            return what(*args, **kwargs)
        except (NsBoxError, OSError) as exc:  # every platform failure is the contract's error, never an assert
            raise TargetError(f"nsbox: {exc}") from exc

    def _key(self, principal, suffix=""):
        return f"{principal.org}-{principal.user}{suffix}"

    def _uid(self, principal):
        pair = self._key(principal)
        if pair not in self._uids:
            self._uids[pair] = self.box.new_uid()
        return self._uids[pair]

    # -- the core --

    def provision(self, principal, *, memory_limit_mb=None, request_id=""):
        key = self._key(principal)
        uid = self._uid(principal)
        self.box.record(f"provision {key} request_id={request_id or '-'}")
        self._guard(self.box.start, key, uid=uid, volume=self._guard(self.box.volume_for, key, uid),
                    memory_mb=memory_limit_mb or 256)
        return InstanceRef(principal, key)

    def destroy(self, ref):
        self._guard(self.box.stop, ref.key)
        volume = self.box.root / "volumes" / ref.key
        if volume.exists() and not any(b.volume == volume for b in self.box.sandboxes.values()):
            self._guard(_rmtree, volume)

    def exec(self, ref, argv, *, stdin=None, timeout=60.0):
        done = self._guard(self.box.exec, ref.key, list(argv), stdin=stdin, timeout=timeout)
        return ExecResult(done.returncode, done.stdout, done.stderr)

    def identity(self, ref):
        box = self.box.sandboxes.get(ref.key)
        if box is None:
            raise TargetError(f"nsbox: no running sandbox {ref.key}")
        pid = box.init_pid
        try:
            return Identity(host_pid=pid, uid=box.uid, gid=box.gid,
                            uid_map=Path(f"/proc/{pid}/uid_map").read_text().strip(),
                            namespaces={ns: os.readlink(f"/proc/{pid}/ns/{ns}") for ns in NAMESPACES})
        except OSError as exc:
            raise TargetError(f"nsbox: sandbox {ref.key} ({pid}) is gone: {exc}") from exc

    def turn(self, ref, message, *, request_id=""):
        return self._guard(self.box.agent_turn, ref.key, message, request_id)

    def plant(self, ref, location, token):
        if location not in ASK:
            raise TargetError(f"nsbox: no such location {location!r}")
        self.turn(ref, ASK[location].format(token))  # through the agent, as a user would ask

    def read_back(self, ref, location):
        return self.turn(ref, f"show {location}")

    def platform_secrets(self):
        return dict(self.options.secrets)  # nsbox is given none of them: no sandbox ever holds one

    def artifacts(self):
        volumes = {key: box.volume for key, box in self.box.sandboxes.items()}
        return Artifacts(state_dir=self.box.root, volumes=volumes, logs=(self.box.log,))

    def close(self):
        self._guard(self.box.shutdown)

    # -- broken arrangements (X controls): each builds the arrangement, yields it, undoes it on exit --

    @contextmanager
    def _broken(self, name, **start):
        self._guard(self.box.start, name, **start)
        try:
            yield name
        finally:
            self._guard(self.box.stop, name)

    @contextmanager
    def broken_shared_volume(self, owner, intruder):
        owner_box = self.box.sandboxes[owner.key]
        with self._broken(self._key(intruder, "-x-shared-volume"), uid=owner_box.uid, volume=owner_box.volume) as k:
            yield InstanceRef(intruder, k)

    @contextmanager
    def broken_shared_tmp(self, owner, intruder):
        tmp = self.box.root / "tmp" / "x-shared"
        tmp.mkdir(parents=True, exist_ok=True)
        os.chmod(tmp, 0o1777)
        refs = []
        try:
            for who in (owner, intruder):
                key = self._key(who, "-x-shared-tmp")
                uid = self._uid(who)
                with_volume = self._guard(self.box.volume_for, key, uid)
                self._guard(self.box.start, key, uid=uid, volume=with_volume, tmp=tmp)
                refs.append(InstanceRef(who, key))
            yield refs[0], refs[1]
        finally:
            for ref in refs:
                self.destroy(ref)
            self._guard(_rmtree, tmp)

    @contextmanager
    def broken_shared_pid_ns(self, intruder):
        key = self._key(intruder, "-x-host-pids")
        uid = self._uid(intruder)
        volume = self._guard(self.box.volume_for, key, uid)
        with self._broken(key, uid=uid, volume=volume, share_host_pids=True) as k:
            yield InstanceRef(intruder, k)
        self._guard(_rmtree, volume)

    @contextmanager
    def broken_same_uid(self, owner, intruder):
        owner_uid = self.box.sandboxes[owner.key].uid
        key = self._key(intruder, "-x-same-uid")
        volume = self._guard(self.box.volume_for, key, owner_uid)
        with self._broken(key, uid=owner_uid, volume=volume) as k:
            yield InstanceRef(intruder, k)
        self._guard(_rmtree, volume)

    @contextmanager
    def broken_host_account_uid(self, intruder, account="nobody"):
        uid = pwd.getpwnam(account).pw_uid
        key = self._key(intruder, "-x-host-account")
        volume = self._guard(self.box.volume_for, key, uid)
        with self._broken(key, uid=uid, volume=volume) as k:
            yield InstanceRef(intruder, k)
        self._guard(_rmtree, volume)


def _rmtree(path):
    import shutil
    shutil.rmtree(path)
