"""The reference target: the suite's driver for pairproof's own runtime (``runtime/``).

It is the worked example of the contract. The agent is the one ``options.profile`` describes, translated
into the runtime's launch spec (``launch_of``). Lifecycle goes through the controller; a turn goes to the
agent's own API through the instance's broker; planting is a turn with the profile's message, never a
write into a volume from outside, and reading back reads the profile's state file inside the owner's own
sandbox; probes run through ``nsenter`` into the instance exactly as the agent's own commands would. A request id
a case gives an operation is bound for the runtime's call (``requestid.bound``) or sent as ``X-Request-Id``;
the runtime logs it with its decision and sends it on with every call it makes for that request.

Broken arrangements for controls are built in ``breakers.py``, from the runtime's public launch primitive
and an argv edited on the way: the runtime itself has no switch that weakens a guard.
"""

from __future__ import annotations

import itertools
import json
import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from acceptance.contract import Artifacts, ExecResult, Identity, InstanceRef, Principal, StartTrace
from acceptance.errors import TargetError
from acceptance.harness.lab.provider import ProviderMock
from acceptance.targets import TargetOptions
from acceptance.targets.profiles import AgentProfile
from acceptance.targets.reference.breakers import Breakers
from acceptance.targets.reference.helpers import (
    ProductHttpClient,
    contract_errors,
    http_json,
    reports_contract_errors,
    request_header,
    sse_data,
)
from runtime import capacity
from runtime.agents import launch as agents
from runtime.agents import managed
from runtime.agents import settings as user_settings
from runtime.authority import requestid
from runtime.authority.broker import AGENT_PORT
from runtime.controller import Controller
from runtime.errors import RuntimeFault
from runtime.isolation import cleanup as runtime_cleanup
from runtime.isolation import preflight as runtime_preflight
from runtime.isolation import sandbox
from runtime.isolation.cgroups import Limits
from runtime.platform import Platform, PlatformConfig

# The tool surface signed off for the reference agent (TS-1), declared here and not read from the runtime's
# managed file: two tools of the agent's own, and the product's tools through the broker.
PRODUCT_TOOLS = ("notes_create", "notes_get", "notes_list", "issues_list", "issue_get", "issue_comment", "task_create",
                 "crm_note", "message_send", "invite", "conversation_post", "conversation_add_participant")
INTENDED_TOOLS = {"memory_note": "builtin", "task_add": "builtin", **{name: "mcp:product" for name in PRODUCT_TOOLS}}


def create(options: TargetOptions) -> ReferenceTarget:
    return ReferenceTarget(options)


def launch_of(profile: AgentProfile) -> agents.AgentLaunch:
    """The runtime's launch spec for the agent ``profile`` describes (TargetError if the runtime refuses it)."""
    turn = dict(profile.turn)
    for key in ("done", "failed"):
        turn[key] = tuple(turn.get(key, ()))
    extra: dict[str, object] = {}
    try:
        if profile.managed:
            m = profile.managed
            extra["managed"] = managed.ManagedFormat(shipped=m["file"], schema=m["schema"], pinned_sha256=m["sha256"],
                                                     syntax=m["syntax"], inside=m["path"])
        if profile.settings:
            extra["settings"] = user_settings.UserSettings(path=profile.settings["path"],
                                                           syntax=profile.settings["syntax"],
                                                           allow=tuple(profile.settings["allow"].items()))
        return agents.AgentLaunch(command=tuple(profile.command), files=tuple(profile.files), env=tuple(profile.env.items()),
                                  ready=agents.Readiness(**{k: v for k, v in profile.ready.items() if k != "deadline"}),
                                  turn=agents.TurnApi(**turn),
                                  binds=tuple(profile.binds.items()),
                                  pinned=tuple((inside, None if text is None else text.encode())
                                               for inside, text in profile.pinned.items()), **extra)
    except RuntimeFault as exc:
        raise TargetError(f"profile {profile.path}: the runtime cannot run it: {exc}") from exc


def _ready_deadline(profile: AgentProfile) -> dict[str, float]:
    """The profile's own start-to-ready deadline, if it gives one (the controller's default otherwise)."""
    return {"ready_deadline": float(profile.ready["deadline"])} if "deadline" in profile.ready else {}


def preflight() -> list[str]:
    return [str(p) for p in runtime_preflight.check()]


def clean(state_dir: Path, *, include_live: bool = False) -> list[str]:
    """``pairproof clean`` for this target: remove the runs under ``state_dir`` whose owner process is gone
    (every run, with ``include_live``): their processes, cgroups, volumes and uid claims."""
    lines = []
    with contract_errors():
        for leftover in runtime_cleanup.clean(Path(state_dir), include_live=include_live):
            lines.append(f"removed run {leftover.run}: {len(leftover.processes)} processes, "
                         f"{len(leftover.cgroup_dirs)} cgroup trees, state {'yes' if leftover.state_dir else 'no'}")
        for leftover in runtime_cleanup.find(Path(state_dir)):
            if leftover.live:
                lines.append(f"left run {leftover.run} alone: its owner process is still running "
                             "(use --all to remove it anyway)")
    return lines



def measure(state_dir: Path, *, turns: int = 3) -> dict:
    """``pairproof measure`` for this target: one instance of the reference agent provisioned, woken, given
    ``turns`` turns and measured (``runtime.footprint``) under a run of its own, then everything removed.
    What the runtime admits with (its budget) is given beside it, and a budget generated from the measurement."""
    import os

    from runtime import footprint

    run = f"measure-{os.getpid()}"
    key = secrets.token_hex(16)
    provider = ProviderMock(key).start()
    platform = None
    try:
        with contract_errors():
            (Path(state_dir) / "runs" / run).mkdir(parents=True, exist_ok=True)
            platform = Platform(Path(state_dir) / "runs" / run, PlatformConfig(provider.url, key)).start()
            controller = Controller(state_dir, run, platform=platform)
            try:
                measured = footprint.measure(controller, turns=turns)
            finally:
                controller.close()
    finally:
        if platform is not None:
            platform.stop()
        provider.stop()
    return {"footprint_mb": measured.megabytes(), "budget_in_force": vars(controller.budget),
            "measured_budget": vars(footprint.budget_from(measured, controller.budget))}


@reports_contract_errors
class PlatformTarget:
    """The reference platform around whatever sandbox engine ``_engine`` gives (bubblewrap when None): the
    core and every facet but the broken arrangements, which are the engine's own (``ReferenceTarget``'s
    ``Breakers``). Every public method reports a runtime failure as the contract's error
    (``reports_contract_errors``)."""

    name = "platform"

    def _engine(self, options: TargetOptions):
        """The controller's sandbox engine (``runtime.isolation.containers.DockerEngine``), or None for bubblewrap."""
        return None

    def __init__(self, options: TargetOptions) -> None:
        self._secrets = dict(options.secrets)
        self.profile = options.profile
        launch = launch_of(self.profile)
        provider_key = self._secrets.get("PAIRPROOF_PROVIDER_KEY") or secrets.token_hex(16)
        self._provider_key = provider_key
        # The upstream provider of the lab: the one fake, a real HTTP service driven by scripts.
        self.provider = ProviderMock(provider_key).start()
        state = Path(options.state_dir) / "runs" / options.run
        self.platform = None
        try:
            with contract_errors():
                state.mkdir(parents=True, exist_ok=True)
                # The platform holds its secrets in its own environment, as a deployment's secret manager
                # puts them there.
                config = PlatformConfig(self.provider.url, provider_key, environment=self._secrets)
                self.platform = Platform(state, config).start()
                self.controller = Controller(options.state_dir, options.run, platform=self.platform,
                                             agent=launch, engine=self._engine(options), **_ready_deadline(self.profile))
        except BaseException:
            if self.platform is not None:
                self.platform.stop()
            self.provider.stop()
            raise
        self._broken: dict[str, sandbox.SandboxProcess] = {}
        self._counter = itertools.count(1)
        self._scratch: list[str] = []  # the controller's scratch folders an arrangement made
        self._undo: list[Callable[[], object]] = []
        # The budget the pure capacity arithmetic sees (a broken arrangement may edit it).
        self._budget_view: Callable[[Mapping[str, int]], Mapping[str, int]] = dict

    # -- startup: a cold start traced from the host --------------------------------------------------------

    def trace_cold_start(self, ref: InstanceRef) -> StartTrace:
        """Sleep, then wake with ``strace`` attached from the host to the launcher before its first instruction
        (``starttrace``): the sandbox's gate, or the container's (``containers._Gate``), holds it until then.
        Detached at ready. ``written`` is the controller's own record of this start."""
        from acceptance.targets.reference.starttrace import StartTracer, strace

        strace()
        self.controller.sleep(ref.key, "stopped")
        tracer = StartTracer()
        self.controller.start_observer = tracer.attach
        try:
            try:
                woke = self.wake(ref)
            finally:
                self.controller.start_observer = None
                tracer.stop()
            return StartTrace(ref=woke, opened=tracer.opened(), written=self.controller.start_inputs(ref.key),
                              persistent=("/data", "/run/agent"),
                              state=tuple(sorted({*self.profile.state.values(), *self.profile.startup_state})),
                              tracer="strace -f attached from the host to the launcher, detached at ready")
        finally:
            tracer.remove()

    # -- lifecycle -----------------------------------------------------------------------------------

    def provision(self, principal: Principal, *, memory_limit_mb: int | None = None,
                  managed_config: bytes | None = None, settings: object = None, request_id: str = "") -> InstanceRef:
        """As the contract says; ``settings``: the user's own settings, taken as ``configure`` takes them, in place
        before the agent's first start when the platform writes them (``[settings]``), so no restart is needed."""
        with requestid.bound(request_id):
            return self._provision(principal, memory_limit_mb, managed_config, settings)

    def _provision(self, principal: Principal, memory_limit_mb: int | None, managed_config: bytes | None,
                   settings: object = None) -> InstanceRef:
        limits = None
        if memory_limit_mb is not None:
            limits = Limits(memory_limit_mb << 20, self.controller.limits.pids_max)
        with contract_errors():
            record = self.controller.provision(principal.org, principal.user, limits=limits,
                                               managed_config=managed_config)
        written = settings is not None and self.controller.launch.settings is not None
        try:
            with contract_errors():
                if written:
                    self.controller.configure(record.id, settings)  # what the allowlist refuses is logged, as ever
                record = self.controller.wake(record.id)
        except TargetError:
            self.controller.destroy(record.id)  # a provision whose first wake fails leaves nothing behind
            raise
        ref = InstanceRef(principal, record.id, record.generation)
        if settings is not None and not written:
            self.configure(ref, settings)  # an agent that applies its user's settings itself: told, as its user would
        return ref

    def wake(self, ref: InstanceRef, *, request_id: str = "") -> InstanceRef:
        with requestid.bound(request_id):
            record = self.controller.wake(ref.key)
        return InstanceRef(ref.principal, ref.key, record.generation)

    def sleep(self, ref: InstanceRef) -> None:
        self.controller.sleep(ref.key, "stopped")

    def freeze(self, ref: InstanceRef) -> None:
        self.controller.sleep(ref.key, "frozen")

    def recreate(self, ref: InstanceRef) -> InstanceRef:
        record = self.controller.recreate(ref.key)
        return InstanceRef(ref.principal, ref.key, record.generation)

    def destroy(self, ref: InstanceRef) -> None:
        self.controller.destroy(ref.key)

    def crash(self, ref: InstanceRef) -> None:
        self.controller.crash(ref.key)

    # -- probing -------------------------------------------------------------------------------------

    def _process(self, ref: InstanceRef) -> sandbox.SandboxProcess:
        if ref.key in self._broken:
            return self._broken[ref.key]
        return self.controller.sandbox(ref.key)

    def exec(self, ref: InstanceRef, argv: Sequence[str], *, stdin: bytes | None = None,
             timeout: float = 60.0) -> ExecResult:
        outcome = self.controller.run_inside(self._process(ref), argv, stdin=stdin, timeout=timeout)
        return ExecResult(outcome.rc, outcome.stdout, outcome.stderr)

    def exec_binary(self, ref: InstanceRef, host_path: str, args: Sequence[str], *,
                    env: Mapping[str, str] | None = None, stdin: bytes | None = None,
                    timeout: float = 60.0, hold: bool = True, by_name: bool = False) -> ExecResult:
        """The host file run by descriptor in the sandbox (``sandbox.run_binary_inside``, or the container
        engine's), the instance held frozen unless ``hold`` is false."""
        outcome = self.controller.run_binary_inside(self._process(ref), host_path, args, env=env, stdin=stdin,
                                                    timeout=timeout, hold=hold, by_name=by_name)
        return ExecResult(outcome.rc, outcome.stdout, outcome.stderr)

    def identity(self, ref: InstanceRef) -> Identity:
        proc = self._process(ref)
        # Bytes first: its Name: line is whatever the agent set (PR_SET_NAME), not always UTF-8.
        status = Path(f"/proc/{proc.host_pid}/status").read_bytes().decode(errors="replace")
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        return Identity(
            host_pid=proc.host_pid,
            uid=int(fields["Uid"].split()[0]),
            gid=int(fields["Gid"].split()[0]),
            uid_map=Path(f"/proc/{proc.host_pid}/uid_map").read_text().strip(),
            namespaces=proc.namespaces(),
        )

    # -- the product's paths -------------------------------------------------------------------------

    def turn(self, ref: InstanceRef, message: str, *, request_id: str = "") -> str:
        """Through the agent's own turn API (the profile's), from the host, through the instance's broker."""
        with requestid.bound(request_id), contract_errors():
            return self.controller.turn(ref.key, message)

    def plant(self, ref: InstanceRef, location: str, token: str) -> None:
        """One turn with the profile's message for ``location``: the agent keeps it by its own rules."""
        if location not in self.profile.plant:
            raise TargetError(f"unknown canary location {location!r}: expected one of {', '.join(self.profile.plant)}")
        self.turn(ref, self.profile.plant_message(location, token))

    def read_back(self, ref: InstanceRef, location: str) -> str:
        """The file the profile says holds ``location``, read inside the owner's own sandbox as the owner
        (empty while the agent has written none)."""
        if location not in self.profile.state:
            raise TargetError(f"unknown canary location {location!r}: expected one of {', '.join(self.profile.state)}")
        path = self.profile.state[location]
        result = self.exec(ref, ["/bin/sh", "-c", 'if [ -e "$1" ]; then exec /bin/cat -- "$1"; fi', "read-back", path])
        if result.rc != 0:
            raise TargetError(f"reading {location} ({path}) in {ref.key} failed with {result.rc}: "
                              f"{result.stderr.decode(errors='replace')[:300]}")
        return result.stdout.decode(errors="replace")

    def platform_secrets(self) -> Mapping[str, str]:
        return dict(self._secrets)

    def artifacts(self) -> Artifacts:
        records = [r for r in self.controller.instances() if r.state != "destroyed"]
        volumes = {r.id: self.controller.volume_path(r.id) for r in records}
        state = self.controller.state
        stores = {state / "product.sqlite": "the product's database: the principals' notes, tasks and messages are "
                                           "its records (TL-5, SH-*, OP-* judge who reads them)",
                  self.platform.log_path: "the platform log: LG-1 scans it whole, alone and joined",
                  self.controller.snapshots.path("x").parent: "the snapshot store: SN-1 scans each snapshot at rest, "
                                                              "layer by layer (SN-1's X leaves an unsealed one)"}
        stores.update({volume.parent / "journal.sqlite": f"instance {key}'s effect journal, on its side of the boundary"
                       for key, volume in volumes.items()})
        return Artifacts(state_dir=state, volumes=volumes, logs=(self.platform.log_path,), stores=stores)

    # -- the model path and the broker -------------------------------------------------------------------

    def broker_endpoint(self, ref: InstanceRef) -> str:
        return f"http://127.0.0.1:{AGENT_PORT}"

    def capabilities(self, ref: InstanceRef) -> Mapping[str, str]:
        broker = self.controller.broker(ref.key)
        return broker.hand_out_capabilities("pairproof qualification: the suite replays them as a thief would")


    def model_call(self, capability: str, body: Mapping[str, object], *, request_id: str = "") -> tuple[int, dict]:
        return http_json("POST", self.platform.proxy.url + "/v1/chat/completions", body,
                          {"Authorization": f"Bearer {capability}", **request_header(request_id)})

    def runctl(self, ref: InstanceRef, method: str, path: str, body: Mapping[str, object] | None = None, *,
               request_id: str = "") -> tuple[int, dict]:
        return http_json(method, self.controller.broker(ref.key).runctl_url + path, body, request_header(request_id))

    def script_model(self, principal: Principal, steps) -> None:
        self.provider.script(f"{principal.org}:{principal.user}", [dict(s) for s in steps])

    def provider_records(self) -> list[dict]:
        return self.provider.records()

    def model_stream(self, capability: str, body: Mapping[str, object], *, request_id: str = ""
                     ) -> tuple[int, Iterator[str]]:
        return sse_data("POST", self.platform.proxy.url + "/v1/chat/completions", {**body, "stream": True},
                        {"Authorization": f"Bearer {capability}", **request_header(request_id)})

    def ledger_usage(self):
        return self.platform.proxy.usage()

    def set_spend_cap(self, principal: Principal, usd: float) -> None:
        self.platform.proxy.set_cap(principal.org, principal.user, usd)

    def pin_tool(self, ref: InstanceRef, name: str) -> None:
        from runtime.product.server import TOOLS

        schema = next((t["inputSchema"] for t in TOOLS if t["name"] == name), None)
        if schema is None:
            raise TargetError(f"the product has no tool {name!r} to pin")
        self.controller.pin_tool(ref.key, name, schema)

    def platform_log(self) -> str:
        return self.platform.read_log()

    def engine_logs(self) -> Mapping[str, bytes]:
        """The engine's log of each sandbox's own output, when the engine keeps one (Docker: every container
        of the run, those already removed as read just before their removal). Bubblewrap keeps none: the
        agent's stdout is /dev/null and its stderr a pipe the controller reads only when a start fails (into
        the error it raises); LG-1 checks from the host where each agent's stdout and stderr go."""
        read = getattr(self.controller.engine, "engine_logs", None)
        if read is None:
            return {}
        logs = {}
        for log in read():
            name = f"{log.instance} {log.container}" + (" (removed)" if log.removed else "")
            if not log.complete:
                raise TargetError(f"the engine's log of {name} is longer than the {len(log.data)} bytes read: "
                                  "not read whole")
            logs[name] = log.data
        return logs

    def broker_refusals(self, ref: InstanceRef) -> list[tuple[str, str]]:
        return list(self.controller.broker(ref.key).refusals)

    def broker_forwarded(self, ref: InstanceRef) -> list[Mapping[str, object]]:
        return self.controller.broker(ref.key).forwarded

    # -- lifecycle and snapshots -------------------------------------------------------------------------

    def rotate(self, ref: InstanceRef) -> None:
        self.controller.rotate(ref.key)

    def revoke(self, ref: InstanceRef) -> None:
        self.controller.revoke(ref.key)

    def recover(self, ref: InstanceRef, *, request_id: str = "") -> InstanceRef:
        with requestid.bound(request_id):
            record = self.controller.recover(ref.key)
        return InstanceRef(ref.principal, ref.key, record.generation)

    def journal(self, ref: InstanceRef) -> list[dict]:
        return self.controller.journal(ref.key).ops()

    def snapshot(self, ref: InstanceRef, *, request_id: str = "") -> str:
        with requestid.bound(request_id):
            return self.controller.snapshot(ref.key).id

    def snapshots(self, principal: Principal) -> list[str]:
        return [s.id for s in self.controller.snapshots.list(principal.org, principal.user)]

    def restore(self, snapshot_id: str, into: InstanceRef, *, request_id: str = "") -> InstanceRef:
        with requestid.bound(request_id):
            record = self.controller.restore(snapshot_id, into.key)
        return InstanceRef(into.principal, into.key, record.generation)

    def snapshot_bytes(self, snapshot_id: str) -> bytes:
        return self.controller.snapshot_path(snapshot_id).read_bytes()

    # -- the tool surface -------------------------------------------------------------------------------

    def intended_tools(self) -> Mapping[str, str]:
        return dict(INTENDED_TOOLS)

    def tool_surface(self, ref: InstanceRef) -> Mapping[str, str]:
        """The agent's own word (the profile's surface route on its API, through the broker's platform side)."""
        if not self.profile.surface:
            raise TargetError(f"profile {self.profile.path} names no [surface] route: this agent does not say "
                              "which tools it offers")
        _, path = self.profile.surface["route"].split(" ", 1)
        with contract_errors():
            status, raw = self.controller.agent_api(ref.key, "GET", path)
        try:
            tools = json.loads(raw)[self.profile.surface["field"]] if status == 200 else None
        except (ValueError, KeyError, TypeError):
            tools = None
        if not isinstance(tools, dict):
            raise TargetError(f"agent of {ref.key} answered its surface route with {status}: {raw[:300]!r}")
        return tools

    def configure(self, ref: InstanceRef, settings: object) -> None:
        """The user's settings as the platform takes them for this agent: through its allowlist into the file the
        agent reads (an agent whose profile gives ``[settings]``: hermes-agent), or as a ``settings:`` message to
        the agent, which applies its managed file's ``user_settable`` itself (the reference agent)."""
        if self.controller.launch.settings is not None:
            self.controller.configure(ref.key, settings)
        else:
            self.turn(ref, "settings: " + json.dumps(settings))

    def managed_config(self) -> bytes:
        """The agent's reviewed managed file, in its own format (the profile's ``[managed]``, else the runtime's)."""
        return self.controller.managed_format.read()

    def start_with_managed_config(self, principal: Principal, config: bytes, *, request_id: str = "") -> InstanceRef:
        return self.provision(principal, managed_config=config, request_id=request_id)

    def running(self, principal: Principal) -> bool:
        """Whether the registry says so, or a live sandbox of the pair exists whatever the registry says."""
        from runtime.errors import InstanceError

        for record in self.controller.instances():
            if (record.org, record.user) != (principal.org, principal.user):
                continue
            if record.state == "running":
                return True
            try:
                self.controller.sandbox(record.id)
                return True
            except InstanceError:
                pass
        return False

    # -- the product ----------------------------------------------------------------------------------

    def person(self, principal: Principal) -> ProductHttpClient:
        return ProductHttpClient(self.platform.product.url, self.platform.product.person_token(principal.org, principal.user))

    def operator(self, name: str) -> ProductHttpClient:
        return ProductHttpClient(self.platform.product.url, self.platform.product.operator_token(name))

    def product_routes(self) -> list[tuple[str, str, str]]:
        return [(r.method, r.template, r.door) for r in self.platform.product.routes()]

    def record_reads(self) -> list[Mapping[str, object]]:
        return self.platform.product.store.handed_out()

    # -- capacity --------------------------------------------------------------------------------------

    def capacity_need(self, budget: Mapping[str, int], fleet: Mapping[str, int], *, request_id: str = ""
                      ) -> Mapping[str, int]:
        with requestid.bound(request_id):
            needed, _ = self.controller.assess(dict(self._budget_view(budget)), dict(fleet))
        return {"memory_mb": needed.memory_mb, "disk_mb": needed.disk_mb}

    def capacity_admit(self, budget: Mapping[str, int], fleet: Mapping[str, int], host: Mapping[str, int], *,
                       request_id: str = "") -> tuple[bool, str]:
        with requestid.bound(request_id):
            _, admission = self.controller.assess(dict(self._budget_view(budget)), dict(fleet), dict(host))
        return admission.ok, admission.reason

    def fleet_need(self) -> Mapping[str, int]:
        fleet, budget, host = self.controller.fleet(), self.controller.budget, self.controller.host
        needed = capacity.need(budget, fleet)
        return {"memory_mb": needed.memory_mb, "disk_mb": needed.disk_mb, "host_memory_mb": host.memory_mb,
                "host_disk_mb": host.disk_mb, **vars(fleet), **vars(budget)}

    @contextmanager
    def host_limits(self, memory_mb: int | None = None, disk_mb: int | None = None) -> Iterator[None]:
        before = self.controller.host
        limited = capacity.Host(before.memory_mb if memory_mb is None else memory_mb,
                                before.disk_mb if disk_mb is None else disk_mb)
        self.controller.host = limited
        try:
            yield
        finally:
            self.controller.host = before

    def _free_uid(self) -> int:
        # Broken sandboxes take uids from the top of the run's block, far from the instances' slots.
        return self.controller.spare_uid(len(self._broken))

    def close(self) -> None:
        errors = []
        for key in list(self._broken):  # only Breakers fills it
            try:
                self._stop_broken(key)
            except Exception as exc:
                errors.append(f"{key}: {exc}")
        try:
            self.controller.close()
        except Exception as exc:
            errors.append(str(exc))
        for service in (self.platform, self.provider):
            try:
                service.stop()
            except Exception as exc:
                errors.append(f"{type(service).__name__}: {exc}")
        if errors:
            raise TargetError("reference target teardown was incomplete: " + "; ".join(errors))


@reports_contract_errors
class ReferenceTarget(Breakers, PlatformTarget):
    """The reference platform with bubblewrap sandboxes, and the broken arrangements built from them."""

    name = "reference"

