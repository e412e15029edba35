"""A pairproof driver for nsbox (``nsbox.py``), written by following docs/writing-a-driver.md.

    export PYTHONPATH=examples/local-driver
    pairproof check-driver nsbox_driver:create --profile examples/local-driver/nsbox-agent.toml
    pairproof qualify --target nsbox_driver:create --profile examples/local-driver/nsbox-agent.toml \
        --reports-dir reports-nsbox

It implements the core and the broken arrangements nsbox can really build (a shared volume, a shared /tmp,
the host's pid namespace, the owner's uid, a host account's uid): the filesystem, process, identity and
resource cases run. nsbox has no broker, model path, product server, snapshots, credentials, lifecycle
API, tool surface or platform log a probe could confirm against, so the driver offers none of those
facets, and the cases that need them are reported "not covered: target lacks <facet>".

The agent each sandbox runs is the run's profile (``options.profile``): nsbox starts its command, copies its
files to /opt/pairproof and delivers turns to its API the way the profile says; it can deliver only
``sync`` turns and has no broker to give the agent, so a profile that needs either is refused up front.
"""

from __future__ import annotations

import os
import pwd
import shutil
from contextlib import contextmanager
from pathlib import Path

from nsbox import Agent, NsBox, NsBoxError

from acceptance.contract import Artifacts, ExecResult, Identity, InstanceRef
from acceptance.errors import SetupError, TargetError

NAMESPACES = ("user", "pid", "mnt", "net", "uts", "ipc", "cgroup")
HERE = Path(__file__).resolve().parent


def create(options):
    return NsBoxDriver(options)


def agent_of(profile) -> Agent:
    """nsbox's launch spec for the profile's agent; SetupError (exit 2, one line) for what nsbox cannot run."""
    fix = f"use a sync profile without a broker, e.g. --profile {HERE / 'nsbox-agent.toml'}"
    if profile.turn["style"] != "sync":
        raise SetupError(f"nsbox delivers only sync turns; profile {profile.name!r} is {profile.turn['style']!r}: {fix}")
    if profile.turn.get("key_file"):
        raise SetupError(f"nsbox has no broker to present profile {profile.name!r}'s run-control key: {fix}")
    if any("{broker}" in value for value in profile.env.values()):
        raise SetupError(f"nsbox has no broker for profile {profile.name!r}'s environment: {fix}")
    return Agent(command=tuple(profile.command), files=tuple(profile.files), env=dict(profile.env),
                 port=int(profile.turn["port"]), start_route=str(profile.turn["start"]),
                 input_field=str(profile.turn["input_field"]), reply_field=str(profile.turn["reply_field"]))


class NsBoxDriver:
    name = "nsbox"

    def __init__(self, options) -> None:
        self.options = options
        self.profile = options.profile
        self.agent = agent_of(options.profile)
        # everything this run makes lives under one folder named by the run, so two runs never meet
        self.box = NsBox(Path(options.state_dir) / f"nsbox-{options.run}")
        self._uids: dict[str, int] = {}  # one host uid per (org, user), kept across its sandboxes

    def _guard(self, what, *args, **kwargs):
        try:
            return what(*args, **kwargs)
        except (NsBoxError, OSError, KeyError) as exc:  # a platform failure is the contract's error, never an assert
            raise TargetError(f"nsbox: {type(exc).__name__}: {exc}") from exc

    def _key(self, principal, suffix=""):
        return f"{principal.org}-{principal.user}{suffix}"

    def _uid(self, principal):
        pair = self._key(principal)
        if pair not in self._uids:
            self._uids[pair] = self.box.new_uid()
        return self._uids[pair]

    def _start(self, key, uid, volume=None, **start):
        volume = volume or self._guard(self.box.volume_for, key, uid)
        self._guard(self.box.start, key, uid=uid, volume=volume, agent=self.agent, **start)
        return key

    # -- the core --

    def provision(self, principal, *, memory_limit_mb=None, settings=None, request_id=""):
        if settings is not None:  # the contract: refuse rather than start the agent under other settings
            raise TargetError("nsbox's agent takes no user settings: it cannot start with the ones given")
        key = self._key(principal)
        self.box.record(f"provision {key} request_id={request_id or '-'}")
        self._start(key, self._uid(principal), memory_mb=memory_limit_mb or 256)
        return InstanceRef(principal, key)

    def destroy(self, ref):
        self._guard(self.box.stop, ref.key)
        volume = self.box.root / "volumes" / ref.key
        if volume.exists() and not any(b.volume == volume for b in self.box.sandboxes.values()):
            self._guard(shutil.rmtree, volume)

    def exec(self, ref, argv, *, stdin=None, timeout=60.0):
        done = self._guard(self.box.exec, ref.key, list(argv), stdin=stdin, timeout=timeout)
        return ExecResult(done.returncode, done.stdout, done.stderr)

    def identity(self, ref):
        box = self._guard(self.box.sandboxes.__getitem__, ref.key)
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
        self.turn(ref, self.profile.plant_message(location, token))  # through the agent, as a user would ask

    def read_back(self, ref, location):
        """The owner's view: the file the agent keeps ``location`` in, read inside the owner's own sandbox."""
        done = self.exec(ref, ["cat", self.profile.state[location]], timeout=30)
        if done.rc != 0 and b"No such file" not in done.stderr:
            raise TargetError(f"nsbox: reading back {location} in {ref.key}: {done.stderr.decode(errors='replace')}")
        return done.stdout.decode(errors="replace")

    def platform_secrets(self):
        return dict(self.options.secrets)  # nsbox is given none of them: no sandbox ever holds one

    def artifacts(self):
        volumes = {key: box.volume for key, box in self.box.sandboxes.items()}
        return Artifacts(state_dir=self.box.root, volumes=volumes, logs=(self.box.log,))

    def close(self):
        self._guard(self.box.shutdown)

    # -- broken arrangements (X controls): each builds the arrangement, yields it, undoes it on exit --

    @contextmanager
    def _broken(self, principal, key, uid, **start):
        made = self.box.root / "volumes" / key
        self._start(key, uid, **start)
        try:
            yield InstanceRef(principal, key)
        finally:
            self._guard(self.box.stop, key)
            if made.exists():
                self._guard(shutil.rmtree, made)

    @contextmanager
    def broken_shared_volume(self, owner, intruder):
        box = self._guard(self.box.sandboxes.__getitem__, owner.key)
        with self._broken(intruder, self._key(intruder, "-x-shared-volume"), box.uid, volume=box.volume) as ref:
            yield ref

    @contextmanager
    def broken_shared_tmp(self, owner, intruder):
        tmp = self.box.root / "tmp" / "x-shared"
        tmp.mkdir(parents=True, exist_ok=True)
        os.chmod(tmp, 0o1777)
        try:
            with self._broken(owner, self._key(owner, "-x-shared-tmp"), self._uid(owner), tmp=tmp) as first, \
                 self._broken(intruder, self._key(intruder, "-x-shared-tmp"), self._uid(intruder), tmp=tmp) as second:
                yield first, second
        finally:
            self._guard(shutil.rmtree, tmp)

    @contextmanager
    def broken_shared_pid_ns(self, intruder):
        with self._broken(intruder, self._key(intruder, "-x-host-pids"), self._uid(intruder),
                          share_host_pids=True) as ref:
            yield ref

    @contextmanager
    def broken_same_uid(self, owner, intruder):
        box = self._guard(self.box.sandboxes.__getitem__, owner.key)
        with self._broken(intruder, self._key(intruder, "-x-same-uid"), box.uid) as ref:
            yield ref

    @contextmanager
    def broken_host_account_uid(self, intruder, account="nobody"):
        uid = self._guard(lambda: pwd.getpwnam(account).pw_uid)
        with self._broken(intruder, self._key(intruder, "-x-host-account"), uid) as ref:
            yield ref
