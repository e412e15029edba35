"""The controller: lifecycle of one agent instance per (organization, user) pair.

It owns provision, wake, sleep, recreate and destroy; the instance's host uid and generation; its
private volume; and the running sandbox. State lives under ``<root>/runs/<run>/`` (the registry, the
agent image, each instance's volume, run folder and synthetic /etc) so a controller created again on the
same folder finds its instances, and ``cleanup`` can find what a killed run left.

Which agent runs, how it is known ready and how a turn reaches it is the controller's ``AgentLaunch``
(``agents.py``; the runtime's own agent unless given): a turn goes to the agent's own API inside its
sandbox, from the host, through the instance's broker.

Sleep has three depths, one lifecycle (``sleep(id, depth)``, or ``sleep_by_policy`` which picks one with
``SleepPolicy``): *frozen* (the sandbox's processes kept and stopped by the cgroup freezer, its memory still
charged, its broker suspended and its lease suspended), *stopped* (processes gone, volume kept; the registry
calls it ``sleeping``) and *snapshotted* (the volume sealed into the snapshot store and the local copy gone).
``wake`` brings an instance back from whichever depth it is at and says which (``InstanceRecord.woke_from``).
Authority is re-checked on every wake: a cold one admits a new lease; a thaw renews the suspended lease only
if it was not revoked meanwhile (``authority.Current.renew``), so a kill switch thrown on a frozen instance
still holds after it thaws.

Sandboxes die with the controller that started them (``bwrap --die-with-parent``): a restarted
controller finds its instances asleep, with their volumes and generations intact, and wakes them anew.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import os
import re
import secrets
import select
import shutil
import threading
import time
import urllib.error
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from runtime import capacity, httpjson
from runtime.agents import launch as agents
from runtime.agents import managed
from runtime.agents import settings as user_settings
from runtime.agents.launch import AgentLaunch
from runtime.authority import requestid
from runtime.authority.broker import AGENT_PORT, Broker, dispatch_effect
from runtime.authority.journal import Journal
from runtime.authority.mcp_filter import McpFilter
from runtime.errors import CapacityRefused, ConfigError, InstanceError, SandboxError
from runtime.isolation import cgroups, containers, quota, sandbox, uids
from runtime.isolation.cgroups import Limits
from runtime.isolation.cleanup import process_start_time, remove_run
from runtime.isolation.netns import socket_in
from runtime.platform import LEASE_TTL, MODEL_TTL, Platform
from runtime.registry import InstanceRecord, Registry
from runtime.snapshots import SnapshotStore
from runtime.wait import until
from runtime.walk import remove_quietly, remove_tree

DEFAULT_ROOT = Path("/var/lib/pairproof")
DEFAULT_LIMITS = Limits(memory_bytes=256 << 20, pids_max=64)
NAME = re.compile(r"^[a-z0-9][a-z0-9_]{0,31}$")
RUN = re.compile(r"^[a-z0-9][a-z0-9_-]{0,47}$")
# The agent's run-control key, fresh each wake: in the instance's control folder (its /run/agent), readable by
# its uid alone; the broker holds the same key and presents it on the platform side (``forward_runctl``).
RUNCTL_KEY_FILE = "runctl.key"
log = logging.getLogger("pairproof.controller")
DEPTHS = ("frozen", "stopped", "snapshotted")
PARKED = "parked.json"  # in a snapshotted instance's folder: which snapshot holds its volume


@dataclass(frozen=True)
class SleepPolicy:
    """Which depth an instance goes to sleep at, from how long it has been idle and how full memory is.

    A thaw takes milliseconds but a frozen instance keeps its memory charged; a stopped one frees memory
    and keeps its volume on disk; a snapshotted one frees its disk as well, and pays a restore on waking.
    So: frozen while recently used and memory is not under pressure, snapshotted after a long idle time,
    stopped in between. Memory pressure is the admission arithmetic's own figure (what the fleet needs
    under the budget, as a fraction of the host's memory), so the policy and admission never disagree."""

    freeze_below_s: float = 600.0
    stop_below_s: float = 6 * 3600.0
    pressure: float = 0.75

    def depth(self, idle_s: float, memory_used: float) -> str:
        if idle_s < self.freeze_below_s and memory_used < self.pressure:
            return "frozen"
        if idle_s < self.stop_below_s:
            return "stopped"
        return "snapshotted"


def logs_decision(method=None, *, named: int | None = None):
    """Log a controller operation's decision under the request id its caller bound (``requestid.bound``):
    done, or refused with the error's kind and reason. Without an id nothing is added to the log. ``named``: how
    many leading arguments the line names (a turn names its instance, never the user's message)."""
    if method is None:
        return functools.partial(logs_decision, named=named)

    @functools.wraps(method)
    def logged(self, *args, **kwargs):
        if not requestid.current():
            return method(self, *args, **kwargs)
        subject = " ".join(str(a) for a in args[:named] if isinstance(a, (str, int)))[:120]
        try:
            result = method(self, *args, **kwargs)
        except Exception as exc:
            reason = getattr(exc, "reason", "") or ""
            log.info("%s %s refused: %s %s", method.__name__, subject, type(exc).__name__, reason)
            raise
        log.info("%s %s done", method.__name__, subject)
        return result
    return logged


def _traversable(path: Path) -> None:
    """Instance uids reach their volume through ``path``; every ancestor must let others pass (o+x)."""
    for parent in path.resolve().parents:
        if not os.stat(parent).st_mode & 0o001:
            raise ConfigError(
                f"state folder {path} is below {parent}, which other users cannot enter (no o+x), so no instance "
                f"could reach its volume: choose a state folder elsewhere (default {DEFAULT_ROOT})"
            )


def _sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


# What an instance's control folder (/run/agent: its readiness mark, its sockets) may hold.
CONTROL_LIMIT = 8 << 20


def _owned_dir(path: Path, uid: int, mode: int = 0o700) -> None:
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, uid, uid)
    os.chmod(path, mode)


@dataclass(frozen=True)
class WakeOutcome:
    """One instance's part in a simultaneous wake: ``woke`` (``detail``: the depth it came from),
    ``refused`` by admission (``detail``: its reason) or ``failed`` (``detail``: the error); ``seconds``
    from the call to ready or to the answer."""

    instance: str
    status: str
    detail: str
    seconds: float


class Controller:
    """Lifecycle of the instances of one run."""

    def __init__(self, root: Path = DEFAULT_ROOT, run: str = "default", *, limits: Limits = DEFAULT_LIMITS,
                 hierarchy: cgroups.Hierarchy | None = None, ready_deadline: float = 10.0,
                 platform: Platform | None = None, budget: capacity.Budget = capacity.REFERENCE_BUDGET,
                 host: capacity.Host | None = None, managed_sha256: str | None = None,
                 agent: AgentLaunch = agents.REFERENCE, policy: SleepPolicy = SleepPolicy(),
                 engine: containers.DockerEngine | None = None) -> None:
        if not RUN.match(run):
            raise ConfigError(f"run name {run!r} is invalid: use 1-48 of a-z, 0-9, '_' and '-', starting alphanumeric")
        self.root, self.run, self.limits, self.ready_deadline = Path(root), run, limits, ready_deadline
        self.launch = agent
        # The agent's managed file (its own format, ``AgentLaunch.managed``); ``managed_sha256`` pins another file.
        self.managed_format = (agent.managed if managed_sha256 is None
                               else dataclasses.replace(agent.managed, pinned_sha256=managed_sha256))
        # The sandbox engine: bubblewrap (sandbox.py) unless a container engine is given (containers.py).
        self.engine = engine
        self.state = self.root / "runs" / run
        self.state.mkdir(parents=True, exist_ok=True)
        _traversable(self.root)
        # Admission (capacity.py) checks every wake and provision against this host, measured now unless given.
        self.budget, self.host = budget, host or capacity.measure_host(self.state)
        # Volumes are size-limited subvolumes where the state root allows it (quota.py); elsewhere plain folders,
        # said once here, and RS-3 finds a volume with no limit.
        self._unlimited = quota.unsupported(self.state)
        if self._unlimited is not None:
            log.warning("volumes without a size limit: %s", self._unlimited)
        self.policy = policy
        self._last_used: dict[str, float] = {}  # monotonic time each instance last woke or ended a turn
        # Frozen instances: "running" in the registry, "frozen" in every record the controller gives out. The
        # flip is kept in memory because a restarted controller treats both alike (their sandboxes died with
        # the old one), and a registry write is an fsync: 2.5 of the 3.6 ms a thaw took when it was stored.
        self._frozen: set[str] = set()
        self._admission = threading.Lock()  # one admission decision at a time
        self._reserved: set[str] = set()  # instances whose wake was admitted and is still in progress
        self._wakers: ThreadPoolExecutor | None = None  # wake_many's threads (see there why they are kept)
        self._retired: list[ThreadPoolExecutor] = []
        self._turns: dict[str, int] = {}
        self._turns_lock = threading.Lock()
        self._holds: dict[str, int] = {}  # instances held frozen for a snapshot or a probe (``_held``), by count
        self._holds_lock = threading.Lock()
        for d in (self.root, self.root / "runs", self.state):
            os.chmod(d, 0o711)  # instance uids must pass through to their own folders, list nothing
        self.hierarchy = hierarchy or cgroups.detect()
        self.uids = uids.UidBlock(self.root / "uid-claims", run)
        self._write_owner()
        self.registry = Registry(self.state / "registry.sqlite")
        self.image = self._build_image()
        self.snapshots = SnapshotStore(self.state)
        self._sandboxes: dict[str, sandbox.SandboxProcess] = {}
        self._extras: dict[str, sandbox.SandboxProcess] = {}
        # Without a platform an instance has no broker and no way out at all (the sandbox tests use that).
        self.platform = platform
        self._brokers: dict[str, Broker] = {}
        self._runctl_keys: dict[str, str] = {}  # each running instance's run-control key (for the no-broker path)
        self._journals: dict[str, Journal] = {}
        # An observer of cold starts from the host (the suite's trace of what an agent opens while starting):
        # called with the launcher's pid before it runs anything. None: nothing watches.
        self.start_observer: Callable[[int], None] | None = None
        # What the platform itself wrote for each instance's last cold start, where the agent reads it: path inside
        # the sandbox -> sha256 of the bytes (the run-control key, the user's settings): the record a judge of the
        # agent's start-up inputs compares what the agent opened against.
        self._start_inputs: dict[str, dict[str, str]] = {}
        for record in self.registry.all():
            if record.state == "running":  # its sandbox died with the controller that started it (frozen or not)
                self.registry.set_state(record.id, "sleeping")

    # -- set-up ------------------------------------------------------------------------------------

    def _write_owner(self) -> None:
        owner = {"pid": os.getpid(), "start": process_start_time(os.getpid()), "run": self.run}
        tmp = self.state / "owner.json.tmp"
        tmp.write_text(json.dumps(owner))
        tmp.replace(self.state / "owner.json")

    def _build_image(self) -> Path:
        """The read-only folder every sandbox sees at /opt/pairproof: the agent's files and nothing else."""
        image = self.state / "image"
        image.mkdir(exist_ok=True)
        os.chmod(image, 0o755)
        for source in self.launch.files:
            try:
                shutil.copyfile(source, image / source.name)
            except OSError as exc:
                raise ConfigError(f"agent image file {source}: {exc.strerror}") from exc
            os.chmod(image / source.name, 0o644)
        return image

    def _instance_dir(self, record: InstanceRecord) -> Path:
        return self.state / "instances" / record.id

    def _volume_folder(self, path: Path, uid: int, limit: int | None = None, mode: int = 0o700) -> None:
        """A folder the instance's uid writes (its volume by default, its control folder): a subvolume held to
        ``limit`` bytes (the budget's ``volume_mb``) where the state root allows it (``quota.make_volume``), else a
        plain folder; owned by ``uid``, ``mode``."""
        if self._unlimited is None:
            quota.make_volume(path, uid, self.budget.volume_mb << 20 if limit is None else limit, mode)
        _owned_dir(path, uid, mode)

    # -- lifecycle ---------------------------------------------------------------------------------

    @logs_decision
    def provision(self, org: str, user: str, *, limits: Limits | None = None,
                  managed_config: bytes | None = None) -> InstanceRecord:
        """Register the pair's instance with its own uid, volume and limits (the run's by default), and the
        managed configuration its agent will run under (the agent's reviewed file by default; it must be the
        pinned file, or nothing is registered)."""
        for what, value in (("org", org), ("user", user)):
            if not NAME.match(value):
                raise ConfigError(f"{what} name {value!r} is invalid: use 1-32 of a-z, 0-9 and '_', starting alphanumeric")
        self._admit(f"provision of {org}/{user}", stored=1)
        limits = limits or self.limits
        config = self.managed_format.read() if managed_config is None else managed_config
        self._check_managed(config, f"managed config for {org}/{user}")
        record = self.registry.add(org, user, self.uids.uid, limits.memory_bytes, limits.pids_max)
        home = self._instance_dir(record)
        home.mkdir(parents=True, exist_ok=True)
        os.chmod(home, 0o711)
        self._volume_folder(home / "volume", record.uid)
        self._volume_folder(home / "control", record.uid, CONTROL_LIMIT)
        etc = home / "etc"
        etc.mkdir(exist_ok=True)
        (etc / "passwd").write_text(f"agent:x:{record.uid}:{record.uid}:agent:/data:/bin/sh\n")
        (etc / "group").write_text(f"agent:x:{record.uid}:\n")
        stored = home / self.managed_format.stored_name
        stored.write_bytes(config)  # root's, 0644: the agent reads it, nobody inside writes it
        os.chmod(stored, 0o644)
        return record

    def _check_managed(self, raw: bytes, source: str) -> None:
        try:
            managed.check(raw, self.managed_format, source=source)
        except managed.ManagedConfigError as exc:
            log.warning("refused to start: %s", exc)
            raise

    def spec(self, record: InstanceRecord) -> sandbox.SandboxSpec:
        home = self._instance_dir(record)
        env = (("PAIRPROOF_BROKER", f"http://127.0.0.1:{AGENT_PORT}"),) if self.platform else ()
        # The agent's own variables; "{broker}" in a value is where it finds its broker.
        broker = dict(env).get("PAIRPROOF_BROKER", "")
        env += tuple((key, value.replace("{broker}", broker)) for key, value in self.launch.env)
        return sandbox.SandboxSpec(
            instance_id=record.id, uid=record.uid, gid=record.uid, volume=home / "volume",
            control_dir=home / "control", etc_dir=home / "etc", image_dir=self.image, hostname="agent", env=env,
            managed_config=home / self.managed_format.stored_name, managed_inside=self.managed_format.inside,
            binds=tuple((Path(host), inside) for inside, host in self.launch.binds),
            pinned=tuple((home / "pinned" / f"{i}", inside) for i, (inside, _) in enumerate(self.launch.pinned)),
        )

    @logs_decision
    def wake(self, instance_id: str) -> InstanceRecord:
        """Bring the instance back from whichever depth it sleeps at, to ready; the record says which
        (``woke_from``). Admission first, then authority: a cold wake admits a new lease, a thaw renews the
        suspended one only if it was not revoked meanwhile."""
        record = self.registry.get(instance_id)
        if record.state == "destroyed":
            raise InstanceError(f"instance {instance_id} was destroyed: provision a new one")
        proc = self._sandboxes.get(instance_id)
        if proc is not None and proc.alive():
            if instance_id in self._frozen:
                self._admit(f"thaw of {record.id}", reserve=instance_id)
                try:
                    return self._thaw(record, proc)
                finally:
                    self._release(instance_id)
            return dataclasses.replace(record, woke_from="running")
        if proc is not None:  # its sandbox died (frozen or not): what is left of it goes before a cold start
            self._stop(instance_id)
        # The file may have changed since provision: it is checked again, before anything starts.
        self._check_managed((self._instance_dir(record) / self.managed_format.stored_name).read_bytes(),
                            f"managed config of instance {record.id} ({record.org}/{record.user})")
        self._admit(f"wake of {instance_id}", reserve=instance_id)
        try:
            return self._cold_start(record)
        finally:
            self._release(instance_id)

    def _cold_start(self, record: InstanceRecord) -> InstanceRecord:
        instance_id = record.id
        depth = {"provisioned": "provisioned", "snapshotted": "snapshotted"}.get(record.state, "stopped")
        if record.state == "snapshotted":
            self._unpark(record)
            self.registry.set_state(instance_id, "sleeping")  # its volume is back: stopped, whatever follows
        written = self._place_settings(record)
        written.update(self._place_pinned(record))
        runctl_key = self._issue_runctl_key(record)
        self._runctl_keys[instance_id] = runctl_key
        written[self.launch.turn.key_file or f"/run/agent/{RUNCTL_KEY_FILE}"] = _sha256(runctl_key.encode())
        self._start_inputs[instance_id] = written
        limits = Limits(record.memory_bytes, record.pids_max)
        if self.engine is not None:
            proc = self.engine.start(self.spec(record), limits, self.launch.command, deadline=self.ready_deadline,
                                         on_gate=self.start_observer)
        else:
            cg = self.hierarchy.create(self.run, f"{record.id}-g{record.generation}", limits)
            try:
                proc = sandbox.start(self.spec(record), cg, self.launch.command, deadline=self.ready_deadline,
                                     on_gate=self.start_observer)
            except BaseException:
                cg.remove()
                raise
        self._sandboxes[instance_id] = proc
        try:
            if self.platform is not None:
                self._start_broker(record, proc, runctl_key)
            self._wait_ready(proc)
        except BaseException:
            self._stop(instance_id)
            raise
        self._last_used[instance_id] = time.monotonic()
        return dataclasses.replace(self.registry.set_state(instance_id, "running"), woke_from=depth)

    def _renew_model_capability(self, record: InstanceRecord, broker: Broker) -> str | None:
        """A fresh model capability for ``record``'s broker, under the lease current now, only while that lease
        stands for this generation, unrevoked, not frozen and unexpired, and only for the instance's current
        broker (a stopped one's straggling request gets nothing); else None."""
        assert self.platform is not None
        if self._brokers.get(record.id) is not broker:
            return None
        s = self.platform.current.standing(record.id)
        if s is None or s.revoked or s.suspended or s.generation != record.generation or s.lease_expires < time.time():
            return None
        return self.platform.models.issue(record.id, record.org, record.user, record.generation, s.lease, ttl=MODEL_TTL)

    def _thaw(self, record: InstanceRecord, proc: sandbox.SandboxProcess) -> InstanceRecord:
        """Wake from frozen: admitted (it was resident all along; now it is active too), its authority
        re-checked and renewed only if still good, then its processes and its broker run again."""
        broker = self._brokers.get(record.id)
        if self.platform is not None:
            lease = secrets.token_hex(8)
            if self.platform.current.renew(record.id, record.generation, lease, time.time() + LEASE_TTL):
                claims = (record.id, record.org, record.user, record.generation, lease)
                if broker is not None:
                    broker.rotate(grant=self.platform.grants.issue(*claims, ttl=LEASE_TTL),
                                  model_capability=self.platform.models.issue(*claims, ttl=MODEL_TTL))
            else:
                # Revoked (or ended) while frozen: it thaws, as a revoked running instance goes on running,
                # but with nothing renewed every capability it holds stays refused.
                log.warning("thaw of %s: its authority was revoked while frozen; no lease renewed", record.id)
        # Under the holds' lock: a probe or snapshot holding the instance frozen keeps it so, and the last hold to
        # end thaws it (``_held``); a wake never thaws an instance out from under a probe.
        with self._holds_lock:
            self._frozen.discard(record.id)
            if not self._holds.get(record.id):
                proc.cgroup.thaw()
        if broker is not None:
            broker.suspended = False
        self._last_used[record.id] = time.monotonic()
        return dataclasses.replace(record, woke_from="frozen")

    def wake_many(self, instance_ids: Sequence[str]) -> list[WakeOutcome]:
        """Wake every instance at once (one thread each), under admission: those that fit wake, the others
        are refused with admission's reason; a wake that fails is undone whole (``wake`` stops what it
        started). One outcome per instance, in the order given."""
        def one(instance_id: str) -> WakeOutcome:
            started = time.monotonic()
            try:
                record = self.wake(instance_id)
            except CapacityRefused as exc:
                return WakeOutcome(instance_id, "refused", exc.reason, time.monotonic() - started)
            except Exception as exc:  # reported with the others, never lost in a thread
                return WakeOutcome(instance_id, "failed", f"{type(exc).__name__}: {exc}", time.monotonic() - started)
            return WakeOutcome(instance_id, "woke", record.woke_from, time.monotonic() - started)

        if not instance_ids:
            return []
        # The threads outlive the call: a sandbox's launcher dies with the *thread* that started it (bwrap's
        # --die-with-parent is PR_SET_PDEATHSIG, which follows the thread), so they live as long as the
        # controller and end in ``close``, after the sandboxes.
        with self._admission:
            if self._wakers is None or self._wakers._max_workers < len(instance_ids):
                if self._wakers is not None:
                    self._retired.append(self._wakers)  # its threads still hold sandboxes: kept until close
                self._wakers = ThreadPoolExecutor(max(len(instance_ids), 10), thread_name_prefix="wake")
            pool = self._wakers
        return list(pool.map(one, instance_ids))

    # -- capacity admission ------------------------------------------------------------------------

    def fleet(self) -> capacity.Fleet:
        """The fleet as admission counts it: instances with a live sandbox are resident; those with a turn
        in progress (driven through ``agent``) are active; instances not destroyed are stored users; the
        snapshots are their stored size, rounded up to MB."""
        reserved = set(self._reserved)  # wakes admitted and in progress: each counts resident and active
        resident = [i for i, proc in list(self._sandboxes.items()) if proc.alive() and i not in reserved]
        with self._turns_lock:
            active = sum(1 for i in resident if self._turns.get(i))
        resident += reserved
        active += len(reserved)
        stored = sum(1 for r in self.registry.all() if r.state != "destroyed")
        snapshot_bytes = 0
        for path in self.snapshots.dir.glob("*.snap"):
            try:
                snapshot_bytes += path.stat().st_size
            except FileNotFoundError:  # removed while counting: it no longer takes disk
                pass
        return capacity.Fleet(len(resident), active, stored, capacity.megabytes(snapshot_bytes))

    def _admit(self, operation: str, *, stored: int = 0, reserve: str | None = None) -> None:
        """Refuse (CapacityRefused, logged) unless the fleet grown by the operation fits the host.

        A wake (``reserve``: its instance) counts its instance as resident *and* active, since it wakes to
        run a turn, from the moment it is admitted until it is done (``_release``): simultaneous wakes are
        admitted one at a time against each other's reservations, so they cannot all see the same free
        room. A provision counts one more stored user. Called before anything is started or written."""
        with self._admission:
            fleet = self.fleet()
            grown = fleet
            if reserve in self._reserved:
                raise InstanceError(f"a wake of {reserve} is already in progress: wait for it")
            if reserve is not None:
                already = 1 if reserve in self._sandboxes and self._sandboxes[reserve].alive() else 0
                with self._turns_lock:
                    busy = 1 if already and self._turns.get(reserve) else 0
                grown = capacity.Fleet(fleet.resident + 1 - already, fleet.active + 1 - busy, fleet.stored_users,
                                       fleet.snapshots_mb)
            grown = capacity.Fleet(grown.resident, grown.active, grown.stored_users + stored, grown.snapshots_mb)
            admission = capacity.admit(self.budget, grown, self.host)
            if not admission.ok:
                log.warning("capacity refused %s: %s", operation, admission.reason)
                raise CapacityRefused(admission.reason, operation)
            if reserve is not None:
                self._reserved.add(reserve)

    def _release(self, instance_id: str) -> None:
        """The wake is over (ready, or undone): the instance counts as what it now is."""
        with self._admission:
            self._reserved.discard(instance_id)

    def assess(self, budget: dict, fleet: dict, host: dict | None = None) -> tuple[capacity.Need, capacity.Admission | None]:
        """The platform's admission arithmetic for a planner: what ``fleet`` needs under ``budget`` and, given a
        ``host``, whether it would be admitted (the same ``capacity`` functions wake and provision use). Each
        assessment is logged with its answer, or with what was wrong with its input (``ConfigError``)."""
        try:
            checked_budget, checked_fleet = capacity.Budget.of(budget), capacity.Fleet.of(fleet)
            checked_host = capacity.Host.of(host) if host is not None else None
        except ConfigError as exc:
            log.info("capacity assessment refused its input: %s", exc)
            raise
        needed = capacity.need(checked_budget, checked_fleet)
        admission = capacity.admit(checked_budget, checked_fleet, checked_host) if checked_host is not None else None
        log.info("capacity assessment: need memory %d MB, disk %d MB%s", needed.memory_mb, needed.disk_mb,
                 "" if admission is None else f"; {'admitted' if admission.ok else 'refused'}: {admission.reason}")
        return needed, admission

    def _issue_runctl_key(self, record: InstanceRecord) -> str:
        """A fresh run-control key, written where only the instance's uid reads it. Its sandbox is not running
        (wake starts it next), and the file is created anew (never opened through a link the agent may have
        left in its own control folder) and renamed into place."""
        key = secrets.token_urlsafe(32)
        control = self._instance_dir(record) / "control"
        # Where the agent's profile says it reads it (under /run/agent, the instance's control folder).
        name = self.launch.turn.key_file.removeprefix("/run/agent/") or RUNCTL_KEY_FILE
        tmp = control / (name + ".new")
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o400)
        try:
            os.fchown(fd, record.uid, record.uid)
            os.fchmod(fd, 0o400)
            os.write(fd, key.encode())
        finally:
            os.close(fd)
        os.replace(tmp, control / name)
        return key

    def _start_broker(self, record: InstanceRecord, proc: sandbox.SandboxProcess, runctl_key: str = "") -> None:
        """A new lease for this generation, capabilities under it, and the broker that holds them."""
        assert self.platform is not None
        lease = secrets.token_hex(8)
        self.platform.current.admit(record.id, record.generation, lease, time.time() + LEASE_TTL)
        claims = (record.id, record.org, record.user, record.generation, lease)
        broker = Broker(instance=record.id, sandbox_pid=proc.host_pid,
                        grant=self.platform.grants.issue(*claims, ttl=LEASE_TTL),
                        model_capability=self.platform.models.issue(*claims, ttl=MODEL_TTL),
                        product_url=self.platform.product.url, proxy_url=self.platform.proxy.url,
                        mcp_filter=self.platform.mcp_filter, journal=self.journal(record.id), generation=record.generation,
                        runctl_key=runctl_key, agent_port=self.launch.turn.port,
                        renew_model=lambda: self._renew_model_capability(record, broker),
                        model_renew_after=MODEL_TTL / 2)
        self._brokers[record.id] = broker.start()
        self._fence_when_gone(record.id, proc)

    def _fence_when_gone(self, instance_id: str, proc: sandbox.SandboxProcess) -> None:
        """A sandbox that dies on its own (a crash, a host fault) takes its lease with it the moment it is gone,
        not at the recovery: until then its broker's grant and model capability would still buy effects and
        model calls for an instance that no longer runs. Watched by a pidfd (readable once the process has
        exited); a sandbox the controller stopped itself, or one already replaced, changes nothing here."""
        try:
            fd = os.pidfd_open(proc.host_pid)
        except (OSError, AttributeError):
            return  # already gone (the wake that follows ends its lease) or no pidfd: fenced at the recovery

        def watch() -> None:
            try:
                select.select([fd], [], [])
            finally:
                os.close(fd)
            if self._sandboxes.get(instance_id) is proc and self.platform is not None:
                self.platform.current.end(instance_id)
                log.warning("sandbox of %s is gone: its lease ended with it", instance_id)

        threading.Thread(target=watch, name=f"fence-{instance_id}", daemon=True).start()

    def pin_tool(self, instance_id: str, name: str, schema: dict) -> None:
        """Add one tool to this instance's pinned set (an operator's managed-configuration change)."""
        broker = self.broker(instance_id)
        broker.filter = McpFilter({**self.platform.pinned, **broker.pinned_extra, name: schema})
        broker.pinned_extra[name] = schema

    # -- lifecycle operations on authority and state -------------------------------------------------

    @logs_decision
    def configure(self, instance_id: str, settings: object) -> list[str]:
        """A user's own settings for this instance's agent, through the platform's allowlist (the agent's
        ``AgentLaunch.settings``): what it allows is kept, in the instance's folder, and written where the agent
        reads it at every cold start; the paths it refuses are returned (and logged). A running instance is
        stopped and woken, so its agent reads them as it starts (hermes-agent reads its tool servers only then).
        ConfigError, with nothing changed, for an agent that applies its user's settings itself."""
        spec = self.launch.settings
        if spec is None:
            raise ConfigError("this agent applies its user's settings itself (its launch names no settings file): "
                              "send them to the agent, as its user would")
        record = self.registry.get(instance_id)
        if record.state == "destroyed":
            raise InstanceError(f"instance {instance_id} was destroyed: provision a new one")
        kept, refused = user_settings.allowed(settings, spec)
        home = self._instance_dir(record)
        tmp = home / "settings.tmp"
        tmp.write_bytes(spec.dump(kept))
        os.chmod(tmp, 0o600)
        tmp.replace(home / "settings")
        if refused:
            log.warning("settings of %s/%s (%s): refused %s", record.org, record.user, instance_id,
                        ", ".join(refused)[:2000])
        proc = self._sandboxes.get(instance_id)
        if proc is not None and proc.alive():
            self.sleep(instance_id, "stopped")
            self.wake(instance_id)
        return refused

    def _place_settings(self, record: InstanceRecord) -> dict[str, str]:
        """Before a cold start: the user's settings the platform kept (none yet: an empty mapping) replace the
        file the agent reads them from on its volume, whatever was written there since. What was written, as
        ``start_inputs`` records it."""
        spec = self.launch.settings
        if spec is None:
            return {}
        kept = self._instance_dir(record) / "settings"
        data = kept.read_bytes() if kept.exists() else spec.dump({})
        user_settings.write_into(self._instance_dir(record) / "volume", spec.path, data, record.uid)
        return {spec.path: _sha256(data)}

    def _place_pinned(self, record: InstanceRecord) -> dict[str, str]:
        """Before a cold start: the agent's pinned start-up inputs (``AgentLaunch.pinned``) written anew in the
        instance's folder, root's and read-only (a folder: empty), for the sandbox to bind over the volume. What
        was written, as ``start_inputs`` records it (files only)."""
        folder = self._instance_dir(record) / "pinned"
        if folder.exists():
            shutil.rmtree(folder)
        if not self.launch.pinned:
            return {}
        folder.mkdir(mode=0o755)
        written = {}
        for i, (inside, data) in enumerate(self.launch.pinned):
            host = folder / str(i)
            if data is None:
                host.mkdir(mode=0o555)
                continue
            fd = os.open(host, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o444)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
            written[inside] = _sha256(data)
        return written

    def start_inputs(self, instance_id: str) -> dict[str, str]:
        """The files the platform wrote for this instance's last cold start, where its agent reads them: path
        inside the sandbox -> sha256 of the bytes written (empty before its first start)."""
        return dict(self._start_inputs.get(instance_id, {}))

    @logs_decision
    def rotate(self, instance_id: str) -> None:
        """New lease, grant and model capability for the running instance; the old ones stop working."""
        record = self.registry.get(instance_id)
        broker = self.broker(instance_id)
        lease = secrets.token_hex(8)
        self.platform.current.admit(record.id, record.generation, lease, time.time() + LEASE_TTL)
        claims = (record.id, record.org, record.user, record.generation, lease)
        broker.rotate(grant=self.platform.grants.issue(*claims, ttl=LEASE_TTL),
                      model_capability=self.platform.models.issue(*claims, ttl=MODEL_TTL))

    @logs_decision
    def revoke(self, instance_id: str) -> None:
        """Kill switch: nothing the instance holds is honoured any more, in flight or new."""
        self.platform.current.revoke(instance_id)

    @logs_decision
    def snapshot(self, instance_id: str):
        """Seal the instance's volume into the snapshot store. A running instance's processes are frozen (the
        cgroup freezer) while its volume is read and thawed after: what is packed is one moment of the volume,
        and nothing of the instance moves a name under the packer while it reads (a frozen instance stays so)."""
        record = self.registry.get(instance_id)
        proc = self._sandboxes.get(instance_id)
        with self._held(proc):
            return self.snapshots.take(self._instance_dir(record) / "volume", org=record.org, user=record.user,
                                       instance=record.id, generation=record.generation, uid=record.uid)

    @contextlib.contextmanager
    def _held(self, proc) -> Iterator[None]:
        """The running sandbox ``proc`` stopped by its cgroup freezer for the ``with`` body and thawed after
        (``None``: nothing running, nothing to hold). A sandbox frozen by a sleep stays frozen; holds may nest
        and overlap (from several threads): the first freezes, the last one out thaws."""
        if proc is None:
            yield
            return
        key = proc.spec.instance_id
        with self._holds_lock:
            first = self._holds.get(key, 0) == 0
            self._holds[key] = self._holds.get(key, 0) + 1
            try:
                if first and key not in self._frozen:
                    proc.cgroup.freeze()
            except BaseException:
                self._holds[key] -= 1
                raise
        try:
            yield
        finally:
            with self._holds_lock:
                self._holds[key] -= 1
                if self._holds[key] == 0:
                    del self._holds[key]
                    if key not in self._frozen and proc.alive():
                        proc.cgroup.thaw()

    @logs_decision
    def restore(self, snapshot_id: str, into: str) -> InstanceRecord:
        """Restore a snapshot into an instance of the same owner; it comes back under a new generation."""
        record = self.registry.get(into)
        was_running = into in self._sandboxes
        self._stop(into)
        try:
            self.snapshots.restore(snapshot_id, org=record.org, user=record.user,
                                   volume=self._instance_dir(record) / "volume", uid=record.uid,
                                   make=lambda staging: self._volume_folder(staging, record.uid))
        except BaseException:
            if was_running:
                self.wake(into)  # refused: the instance goes on as it was, same generation
            raise
        self.registry.bump_generation(into)
        if was_running:
            self.wake(into)
        return self.registry.get(into)

    def journal(self, instance_id: str) -> Journal:
        """The instance's effect journal (kept across sandboxes and generations, outside every sandbox)."""
        if instance_id not in self._journals:
            record = self.registry.get(instance_id)
            self._journals[instance_id] = Journal(self._instance_dir(record) / "journal.sqlite")
        return self._journals[instance_id]

    @logs_decision
    def recover(self, instance_id: str) -> InstanceRecord:
        """After a crash: fence the stale lease, reconcile the old run's effects, then admit a successor.

        Unknown effects are settled by asking the product server whether the operation happened (never by
        asking the model); effects known not to have been dispatched are retried once with the same
        idempotency key; completed ones are left alone. Only then does the instance wake, under a new
        generation.
        """
        record = self.registry.get(instance_id)
        self._stop(instance_id)  # fences: the old lease ends with its broker
        record = self.registry.bump_generation(instance_id)
        lease = secrets.token_hex(8)
        self.platform.current.admit(record.id, record.generation, lease, time.time() + LEASE_TTL)
        grant = self.platform.grants.issue(record.id, record.org, record.user, record.generation, lease, ttl=300)
        journal = self.journal(instance_id)
        for op in journal.ops("dispatched", "unknown", "pending"):
            happened = self._ask_product(op["op"], grant)
            journal.mark(op["op"], "completed" if happened else "not_dispatched")
        for op in journal.ops("not_dispatched"):
            if op["attempts"] < 2:  # one retry, with the original idempotency key
                dispatch_effect(self.platform.product.url, journal, op["op"], op["request"], grant)
        self.platform.current.end(instance_id)
        return self.wake(instance_id)

    def _ask_product(self, op: str, grant: str) -> bool:
        url = f"{self.platform.product.url}/api/effects/{op}"
        status, raw = httpjson.request("GET", url, None, {"Authorization": f"Bearer {grant}", **requestid.headers()},
                                       timeout=httpjson.EFFECT_TIMEOUT)
        if status >= 400:  # as urllib raised it, the recovery's caller sees the same error
            raise urllib.error.HTTPError(url, status, f"the product answered {status}", None, None)
        return bool(json.loads(raw)["happened"])

    def broker(self, instance_id: str) -> Broker:
        broker = self._brokers.get(instance_id)
        if broker is None:
            raise InstanceError(f"instance {instance_id} has no broker (not running, or no platform)")
        return broker

    def _wait_ready(self, proc: sandbox.SandboxProcess) -> None:
        """Until the launch's readiness rule holds, checked from the host inside the sandbox's network
        namespace: the agent's API port accepts a connection (``listening``), or a GET on it answers 2xx
        (``http``)."""
        ready, port = self.launch.ready, self.launch.turn.port

        def answers() -> bool:
            if not proc.alive():
                raise SandboxError(f"agent of {proc.spec.instance_id} ended before ready ({proc.exit_report()})")
            try:
                if ready.kind == "listening":
                    with socket_in(proc.host_pid) as probe:
                        probe.settimeout(1.0)
                        probe.connect(("127.0.0.1", port))
                    return True
                return 200 <= agents.http_in(proc.host_pid, port, "GET", ready.path, None, timeout=1.0)[0] < 300
            except (OSError, SandboxError):
                return False  # not listening yet, or not answering yet

        until(answers, self.ready_deadline, f"agent of {proc.spec.instance_id} not ready within {self.ready_deadline}s",
              every=0.002)

    @logs_decision
    def sleep(self, instance_id: str, depth: str = "stopped") -> InstanceRecord:
        """Put the instance to sleep at ``depth`` (one of DEPTHS); ``wake`` brings it back from any of them.

        *frozen*: its processes stay, stopped by the cgroup freezer (memory still charged), its broker
        refuses everything and its lease honours nothing until the thaw. *stopped*: the sandbox and broker
        end, the volume stays. *snapshotted*: stopped, then the volume sealed into the snapshot store and the
        local copy removed."""
        if depth not in DEPTHS:
            raise ConfigError(f"sleep depth {depth!r} is unknown: use one of {', '.join(DEPTHS)}")
        record = self.registry.get(instance_id)
        if record.state == "destroyed":
            raise InstanceError(f"instance {instance_id} was destroyed: nothing to put to sleep")
        if depth == "frozen":
            return record if instance_id in self._frozen else self._freeze(record)
        self._stop(instance_id)
        if depth == "snapshotted" and record.state != "snapshotted":
            self._park(record)
            return self.registry.set_state(instance_id, "snapshotted")
        return self.registry.set_state(instance_id, "snapshotted" if record.state == "snapshotted" else "sleeping")

    def sleep_by_policy(self, instance_id: str) -> InstanceRecord:
        """Sleep at the depth ``self.policy`` picks for this instance's idle time and the fleet's memory need."""
        idle = time.monotonic() - self._last_used.get(instance_id, 0.0)
        needed = capacity.need(self.budget, self.fleet())
        depth = self.policy.depth(idle, needed.memory_mb / max(self.host.memory_mb, 1))
        log.info("sleep of %s by policy: idle %.0f s, memory %d of %d MB: %s", instance_id, idle,
                 needed.memory_mb, self.host.memory_mb, depth)
        return self.sleep(instance_id, depth)

    def _freeze(self, record: InstanceRecord) -> InstanceRecord:
        proc = self.sandbox(record.id)
        with self._turns_lock:
            if self._turns.get(record.id):
                raise InstanceError(f"instance {record.id} is running a turn: freeze it when the turn has ended")
        broker = self._brokers.get(record.id)
        # Refuse first, then stop: nothing is let in to a process about to be frozen, and nothing it holds is
        # honoured while it is.
        if broker is not None:
            broker.suspended = True
        if self.platform is not None:
            self.platform.current.suspend(record.id)
        try:
            with self._holds_lock:  # (``_thaw``: the hold and the sleep agree on who thaws)
                proc.cgroup.freeze()
                self._frozen.add(record.id)
        except BaseException:
            self._stop(record.id)  # never left half-frozen: it goes to the stopped depth instead
            self.registry.set_state(record.id, "sleeping")
            raise
        return self.get(record.id)

    def _park(self, record: InstanceRecord) -> None:
        """The snapshotted depth: the volume sealed into the snapshot store, then the local copy removed."""
        volume = self._instance_dir(record) / "volume"
        ref = self.snapshots.take(volume, org=record.org, user=record.user, instance=record.id,
                                  generation=record.generation, uid=record.uid)
        tmp = self._instance_dir(record) / (PARKED + ".tmp")
        tmp.write_text(json.dumps({"snapshot": ref.id}))
        tmp.replace(self._instance_dir(record) / PARKED)
        remove_tree(volume)

    def _unpark(self, record: InstanceRecord) -> None:
        """Restore a snapshotted instance's volume from the store; the parking snapshot goes once it is back."""
        home = self._instance_dir(record)
        snap_id = json.loads((home / PARKED).read_text())["snapshot"]
        volume = home / "volume"
        self._volume_folder(volume, record.uid)  # restore swaps a fresh one in for it
        self.snapshots.restore(snap_id, org=record.org, user=record.user, volume=volume, uid=record.uid,
                               make=lambda staging: self._volume_folder(staging, record.uid))
        (home / PARKED).unlink()
        self.snapshots.path(snap_id).unlink(missing_ok=True)

    @logs_decision
    def recreate(self, instance_id: str) -> InstanceRecord:
        """A new sandbox on the same volume, under the next generation (old authority must die)."""
        self._stop(instance_id)
        self.registry.bump_generation(instance_id)
        return self.wake(instance_id)

    @logs_decision
    def destroy(self, instance_id: str) -> None:
        record = self.registry.get(instance_id)
        self._stop(instance_id)
        remove_quietly(self._instance_dir(record), log)
        self.registry.set_state(instance_id, "destroyed")

    @logs_decision
    def crash(self, instance_id: str) -> None:
        """SIGKILL the sandbox as a host failure would; the registry still says running."""
        proc = self._sandboxes.get(instance_id)
        if proc is None:
            raise InstanceError(f"instance {instance_id} is not running")
        if proc.cgroup.frozen():
            proc.cgroup.kill_all()  # a frozen sandbox takes its SIGKILL only once thawed
        proc.crash()

    def _stop(self, instance_id: str) -> None:
        self._frozen.discard(instance_id)
        self._runctl_keys.pop(instance_id, None)
        broker = self._brokers.pop(instance_id, None)
        if broker is not None:
            broker.stop()
        if self.platform is not None:
            self.platform.current.end(instance_id)  # every capability of this lease dies with it
        proc = self._sandboxes.pop(instance_id, None)
        if proc is not None:
            if proc.cgroup.frozen():
                proc.cgroup.kill_all()  # killed while still frozen, so it never runs again
            proc.stop()
            proc.cgroup.remove()

    # -- using an instance -------------------------------------------------------------------------

    def get(self, instance_id: str) -> InstanceRecord:
        return self._as_seen(self.registry.get(instance_id))

    def _as_seen(self, record: InstanceRecord) -> InstanceRecord:
        return dataclasses.replace(record, state="frozen") if record.id in self._frozen else record

    def find(self, org: str, user: str) -> InstanceRecord:
        return self._as_seen(self.registry.find(org, user))

    def instances(self) -> list[InstanceRecord]:
        return [self._as_seen(r) for r in self.registry.all()]

    def sandbox(self, instance_id: str) -> sandbox.SandboxProcess:
        proc = self._sandboxes.get(instance_id)
        if proc is None or not proc.alive():
            raise InstanceError(f"instance {instance_id} is not running: wake it first")
        return proc

    def exec(self, instance_id: str, argv: Sequence[str], *, stdin: bytes | None = None,
             timeout: float = 60.0) -> sandbox.ExecOutcome:
        """Run ``argv`` inside the instance, as its uid, in its namespaces and cgroup."""
        return self.run_inside(self.sandbox(instance_id), argv, stdin=stdin, timeout=timeout)

    def run_inside(self, proc, argv: Sequence[str], *, stdin: bytes | None = None,
                   timeout: float = 60.0) -> sandbox.ExecOutcome:
        """Run ``argv`` in the running sandbox ``proc`` through its engine (nsenter, or ``docker exec``)."""
        engine = self.engine if self.engine is not None else sandbox
        return engine.run_inside(proc, argv, stdin=stdin, timeout=timeout)

    def run_binary_inside(self, proc, host_path: str, args: Sequence[str], *, env=None, stdin: bytes | None = None,
                          timeout: float = 60.0, hold: bool = True, by_name: bool = False) -> sandbox.ExecOutcome:
        """Run the host file ``host_path`` by descriptor in the running sandbox ``proc`` (its engine's way), with
        every process of the sandbox stopped (the cgroup freezer) from before it starts until it has ended.

        It is the platform's probe, run where the agent lives (same uid, same pid namespace): left running beside
        it, the agent could read its environment and command line from /proc, trace it, or write into its
        output through ``/proc/PID/fd/1`` and hand the harness a report of its own. Frozen, nothing of the
        instance runs while the probe exists. The probe itself runs in a cgroup beside the frozen one, under
        the same limits (``cgroups.beside``).

        ``hold=False`` is for a tool that must act on the running instance (the suite's shell, which signals,
        traces and calls the agent): it runs in the instance's own cgroup beside its running processes, and its
        file, unreadable to the instance's uid (mode 0711), keeps it non-dumpable instead (no trace, no
        /proc/PID/environ, mem or fd of it for the agent). ``by_name``: run under its own file name, for a
        multi-call binary (``sandbox.open_to_run``)."""
        engine = self.engine if self.engine is not None else sandbox
        if not hold:
            return engine.run_binary_inside(proc, host_path, args, env=env, stdin=stdin, timeout=timeout,
                                            by_name=by_name)
        with self._held(proc), cgroups.beside(proc.cgroup) as side:
            return engine.run_binary_inside(proc, host_path, args, env=env, stdin=stdin, timeout=timeout, cgroup=side,
                                            by_name=by_name)

    def agent_api(self, instance_id: str, method: str, path: str, body: bytes | None = None, *,
                  timeout: float = 120.0) -> tuple[int, bytes]:
        """One request to the agent's own API, from the host: through the instance's broker (platform side,
        which sends the bound request id on), or, with no platform, straight into its network namespace."""
        proc = self.sandbox(instance_id)
        broker = self._brokers.get(instance_id)
        try:
            if broker is not None:
                return broker.forward_runctl(method, path, body)
            # No broker to present the instance's key: the controller, which issued it, does.
            key = {"Authorization": f"Bearer {self._runctl_keys[instance_id]}"} if instance_id in self._runctl_keys else {}
            return agents.http_in(proc.host_pid, self.launch.turn.port, method, path, body, timeout=timeout,
                                  headers={**requestid.headers(), **key})
        except OSError as exc:  # its namespace is gone (the sandbox died), or the agent did not answer
            raise SandboxError(f"agent of {instance_id} did not answer {method} {path}: {exc}") from exc

    @logs_decision(named=1)
    def turn(self, instance_id: str, message: str, timeout: float = 30.0) -> str:
        """One turn through the agent's own turn API (with the bound request id, which the agent sends on
        with every call it makes for it); its reply. The instance counts as active while it lasts. Its decision
        is logged under that id naming the instance only (the message and reply are the user's), whether or
        not the agent carries the id on to its own calls."""
        self.sandbox(instance_id)
        with self._turns_lock:
            self._turns[instance_id] = self._turns.get(instance_id, 0) + 1
        try:
            return agents.deliver(self.launch.turn,
                                  lambda method, path, body: self.agent_api(instance_id, method, path, body),
                                  message, timeout=timeout)
        except SandboxError as exc:
            raise SandboxError(f"agent of {instance_id}: {exc}") from exc
        finally:
            with self._turns_lock:
                self._turns[instance_id] -= 1
            self._last_used[instance_id] = time.monotonic()

    def volume_path(self, instance_id: str) -> Path:
        """The host folder that is the instance's /data."""
        return self._instance_dir(self.registry.get(instance_id)) / "volume"

    def snapshot_path(self, snapshot_id: str) -> Path:
        """Where the snapshot is stored on the host (the bytes at rest)."""
        return self.snapshots.path(snapshot_id)

    # -- extra sandboxes ---------------------------------------------------------------------------

    def spare_uid(self, index: int) -> int:
        """A uid of the run's block that no instance takes (counted from the top of the block), for an extra
        sandbox."""
        return self.uids.uid(999 - index)

    def scratch(self, name: str) -> Path:
        """A new folder (root's, 0711) in the run's state for what an extra sandbox is given; removed by
        ``remove_extra(name)`` or with the run."""
        folder = self.state / "extra" / name
        folder.mkdir(parents=True)
        os.chmod(folder.parent, 0o711)
        os.chmod(folder, 0o711)
        return folder

    def launch_extra(self, name: str, command: Sequence[str], *, uid: int, volume: Path | None = None,
                     edit: Callable[[list[str]], list[str]] | None = None) -> sandbox.SandboxProcess:
        """A sandbox outside the registry, launched as instances are (synthetic /etc, the agent's reviewed managed
        configuration, the run's limits, a cgroup of the run) but running ``command`` as ``uid``, with
        ``volume`` as its /data (a new empty one when None): a one-off job's sandbox. ``edit`` sees the
        launcher's argv and returns the one to run; whatever it changes, the caller answers for. It has no
        broker and no platform. ``remove_extra(name)`` stops it and removes its cgroup and folders."""
        if name in self._extras:
            raise ConfigError(f"an extra sandbox named {name!r} is already running")
        home = self.scratch(name)
        for sub in ("control", "etc"):
            (home / sub).mkdir()
        if volume is None:
            volume = home / "volume"
            self._volume_folder(volume, uid)
        self._volume_folder(home / "control", uid, CONTROL_LIMIT, 0o755)
        (home / "etc" / "passwd").write_text(f"agent:x:{uid}:{uid}:agent:/data:/bin/sh\n")
        (home / "etc" / "group").write_text(f"agent:x:{uid}:\n")
        stored = home / self.managed_format.stored_name
        stored.write_bytes(self.managed_format.read())
        os.chmod(stored, 0o644)
        spec = sandbox.SandboxSpec(instance_id=name, uid=uid, gid=uid, volume=volume, control_dir=home / "control",
                                   etc_dir=home / "etc", hostname="extra", image_dir=self.image,
                                   managed_config=stored, managed_inside=self.managed_format.inside)
        cg = self.hierarchy.create(self.run, name, self.limits)
        try:
            argv = lambda fd: (edit or list)(sandbox.bwrap_argv(spec, command, info_fd=fd))  # noqa: E731
            proc = sandbox.launch(spec, cg, argv, deadline=self.ready_deadline)
        except BaseException:
            cg.remove()
            remove_quietly(home, log)
            raise
        self._extras[name] = proc
        return proc

    def remove_extra(self, name: str) -> None:
        """Stop the extra sandbox ``name`` (if one runs) and remove its cgroup and its folder."""
        proc = self._extras.pop(name, None)
        if proc is not None:
            proc.stop()
            proc.cgroup.remove()
        remove_quietly(self.state / "extra" / name, log)

    # -- end of run --------------------------------------------------------------------------------

    def close(self, *, keep_state: bool = False) -> None:
        """Stop every sandbox and remove the run's cgroups; unless ``keep_state``, its volumes too."""
        errors = []
        for instance_id in list(self._sandboxes):
            try:
                self._stop(instance_id)
            except Exception as exc:  # keep tearing down the others, report all at the end
                errors.append(f"{instance_id}: {exc}")
        for name in list(self._extras):
            try:
                self.remove_extra(name)
            except Exception as exc:
                errors.append(f"{name}: {exc}")
        for pool in [*self._retired, *([self._wakers] if self._wakers else [])]:
            pool.shutdown(wait=True)
        if self.engine is not None:
            try:
                self.engine.close()  # every container of the run, a crashed one included
            except Exception as exc:
                errors.append(f"containers: {exc}")
        self.registry.close()
        for journal in self._journals.values():
            journal.close()
        try:
            remove_run(self.root, self.run, hierarchy=self.hierarchy, keep_state=keep_state)
        except Exception as exc:
            errors.append(str(exc))
        if errors:
            raise SandboxError("teardown was incomplete: " + "; ".join(errors))
