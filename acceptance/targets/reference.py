"""The reference target: the suite's driver for pairproof's own runtime (``runtime/``).

It is the worked example of the contract. Lifecycle goes through the controller; planting and reading
back go through agent turns (the product's path), never through writes into a volume from outside;
probes run through ``nsenter`` into the instance exactly as the agent's own commands would.

Broken arrangements for controls are built *here*, from the runtime's public launch primitive and an
argv edited on the way: the runtime itself has no switch that weakens a guard.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import secrets
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from runtime import capacity, managed, sandbox
from runtime import preflight as runtime_preflight
from runtime.broker import AGENT_PORT
from runtime.cgroups import Limits
from runtime.controller import Controller
from runtime.errors import CapacityRefused, RuntimeFault
from runtime.platform import Platform, PlatformConfig
from runtime.provider import ProviderMock

from ..contract import Artifacts, ExecResult, Identity, InstanceRef, Principal
from ..errors import CapacityRefusedError, TargetError
from . import TargetOptions

PLANT_MESSAGES = {
    "memory": "remember: my locker code is {token}",
    "transcript": "by the way, the code on my badge reads {token}",
    "task": "task: renew the parking permit, reference {token}",
    "volume": "save notes.txt: {token}",
}
READ_BACK = {"memory": "memory", "transcript": "transcript", "task": "tasks", "volume": "file:notes.txt"}
# A broken sandbox runs no agent; it marks when its mounts are complete (bwrap reports its pid before
# that), and the driver waits for the mark before anyone probes it.
BROKEN_COMMAND = ("/bin/sh", "-c", ": > /run/agent/ready && exec /bin/sleep infinity")
READY_DEADLINE = 10.0
# The tool surface signed off for the reference agent (TS-1), declared here and not read from the runtime's
# managed file: two tools of the agent's own, and the product's tools through the broker.
PRODUCT_TOOLS = ("notes_create", "notes_get", "notes_list", "issues_list", "issue_get", "issue_comment", "task_create",
                 "crm_note", "message_send", "invite", "conversation_post", "conversation_add_participant")
INTENDED_TOOLS = {"memory_note": "builtin", "task_add": "builtin", **{name: "mcp:product" for name in PRODUCT_TOOLS}}


def lab_addresses() -> dict[str, str]:
    from ..lab.sink import ADDRESSES

    return ADDRESSES


def create(options: TargetOptions) -> ReferenceTarget:
    return ReferenceTarget(options)


def preflight() -> list[str]:
    return [str(p) for p in runtime_preflight.check()]


def _before_command(argv: list[str], extra: Sequence[str]) -> list[str]:
    cut = argv.index("--")
    return argv[:cut] + list(extra) + argv[cut:]


def _replace(argv: list[str], old: Sequence[str], new: Sequence[str]) -> list[str]:
    for i in range(len(argv) - len(old) + 1):
        if argv[i:i + len(old)] == list(old):
            return argv[:i] + list(new) + argv[i + len(old):]
    raise TargetError(f"cannot break the sandbox: {' '.join(old)!r} is not in the launcher's argv")


class ReferenceTarget:
    name = "reference"

    def __init__(self, options: TargetOptions) -> None:
        self._secrets = dict(options.secrets)
        # The platform (controller, later the broker and proxy) holds these in its own environment.
        os.environ.update(self._secrets)
        provider_key = self._secrets.get("PAIRPROOF_PROVIDER_KEY") or secrets.token_hex(16)
        self._provider_key = provider_key
        # The upstream provider of the lab: the one fake, a real HTTP service driven by scripts.
        self.provider = ProviderMock(provider_key).start()
        state = Path(options.state_dir) / "runs" / options.run
        try:
            state.mkdir(parents=True, exist_ok=True)
            self.platform = Platform(state, PlatformConfig(self.provider.url, provider_key)).start()
            self.controller = Controller(options.state_dir, options.run, platform=self.platform)
        except (RuntimeFault, OSError) as exc:
            self.provider.stop()
            raise TargetError(str(exc)) from exc
        self._broken: dict[str, sandbox.SandboxProcess] = {}
        self._counter = itertools.count(1)
        self._extra_dirs: list[Path] = []
        self._undo: list[Callable[[], object]] = []
        # The budget the pure capacity arithmetic sees (a broken arrangement may edit it).
        self._budget_view: Callable[[Mapping[str, int]], Mapping[str, int]] = dict

    # -- lifecycle -----------------------------------------------------------------------------------

    def provision(self, principal: Principal, *, memory_limit_mb: int | None = None,
                  managed_config: bytes | None = None) -> InstanceRef:
        limits = None
        if memory_limit_mb is not None:
            limits = Limits(memory_limit_mb << 20, self.controller.limits.pids_max)
        with _contract_errors():
            record = self.controller.provision(principal.org, principal.user, limits=limits,
                                               managed_config=managed_config)
        try:
            with _contract_errors():
                record = self.controller.wake(record.id)
        except TargetError:
            self.controller.destroy(record.id)  # a provision whose first wake fails leaves nothing behind
            raise
        return InstanceRef(principal, record.id, record.generation)

    def wake(self, ref: InstanceRef) -> InstanceRef:
        with _contract_errors():
            record = self.controller.wake(ref.key)
        return InstanceRef(ref.principal, ref.key, record.generation)

    def sleep(self, ref: InstanceRef) -> None:
        self.controller.sleep(ref.key)

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
        outcome = sandbox.run_inside(self._process(ref), argv, stdin=stdin, timeout=timeout)
        return ExecResult(outcome.rc, outcome.stdout, outcome.stderr)

    def identity(self, ref: InstanceRef) -> Identity:
        proc = self._process(ref)
        status = Path(f"/proc/{proc.host_pid}/status").read_text()
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        return Identity(
            host_pid=proc.host_pid,
            uid=int(fields["Uid"].split()[0]),
            gid=int(fields["Gid"].split()[0]),
            uid_map=Path(f"/proc/{proc.host_pid}/uid_map").read_text().strip(),
            namespaces=proc.namespaces(),
        )

    # -- the product's paths -------------------------------------------------------------------------

    def turn(self, ref: InstanceRef, message: str) -> str:
        return self.controller.agent(ref.key, {"op": "turn", "message": message})["reply"]

    def plant(self, ref: InstanceRef, location: str, token: str) -> None:
        if location not in PLANT_MESSAGES:
            raise TargetError(f"unknown canary location {location!r}: expected one of {', '.join(PLANT_MESSAGES)}")
        self.turn(ref, PLANT_MESSAGES[location].format(token=token))

    def read_back(self, ref: InstanceRef, location: str) -> str:
        return self.controller.agent(ref.key, {"op": "read", "what": READ_BACK[location]})["content"]

    def platform_secrets(self) -> Mapping[str, str]:
        return dict(self._secrets)

    def artifacts(self) -> Artifacts:
        volumes = {r.id: self.controller.state / "instances" / r.id / "volume"
                   for r in self.controller.instances() if r.state != "destroyed"}
        return Artifacts(state_dir=self.controller.state, volumes=volumes)

    # -- the model path and the broker -------------------------------------------------------------------

    def broker_endpoint(self, ref: InstanceRef) -> str:
        return f"http://127.0.0.1:{AGENT_PORT}"

    def capabilities(self, ref: InstanceRef) -> Mapping[str, str]:
        broker = self.controller.broker(ref.key)
        return broker.hand_out_capabilities("pairproof qualification: the suite replays them as a thief would")

    @staticmethod
    def _http(method: str, url: str, body: Mapping[str, object] | None, headers: dict[str, str] | None = None
              ) -> tuple[int, dict]:
        data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
        request = urllib.request.Request(url, data, {"Content-Type": "application/json", **(headers or {})},
                                         method=method)
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                raw = response.read()
                return response.status, json.loads(raw) if raw else {}
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            return exc.code, json.loads(raw) if raw else {}

    def model_call(self, capability: str, body: Mapping[str, object]) -> tuple[int, dict]:
        return self._http("POST", self.platform.proxy.url + "/v1/chat/completions", body,
                          {"Authorization": f"Bearer {capability}"})

    def runctl(self, ref: InstanceRef, method: str, path: str, body: Mapping[str, object] | None = None
               ) -> tuple[int, dict]:
        return self._http(method, self.controller.broker(ref.key).runctl_url + path, body)

    def script_model(self, principal: Principal, steps) -> None:
        self.provider.script(f"{principal.org}:{principal.user}", [dict(s) for s in steps])

    def provider_records(self) -> list[dict]:
        return self.provider.records()

    def ledger_counts(self):
        return self.platform.proxy.counts()

    def set_spend_cap(self, principal: Principal, usd: float) -> None:
        self.platform.proxy.set_cap(principal.org, principal.user, usd)

    def pin_tool(self, ref: InstanceRef, name: str) -> None:
        from runtime.product import TOOLS

        schema = next(t["inputSchema"] for t in TOOLS if t["name"] == name)
        self.controller.pin_tool(ref.key, name, schema)

    def platform_log(self) -> str:
        for handler in logging.getLogger("pairproof").handlers:
            handler.flush()
        return self.platform.log_path.read_text() if self.platform.log_path.exists() else ""

    def broker_refusals(self, ref: InstanceRef) -> list[tuple[str, str]]:
        return list(self.controller.broker(ref.key).refusals)

    # -- lifecycle and snapshots -------------------------------------------------------------------------

    def rotate(self, ref: InstanceRef) -> None:
        self.controller.rotate(ref.key)

    def revoke(self, ref: InstanceRef) -> None:
        self.controller.revoke(ref.key)

    def recover(self, ref: InstanceRef) -> InstanceRef:
        record = self.controller.recover(ref.key)
        return InstanceRef(ref.principal, ref.key, record.generation)

    def journal(self, ref: InstanceRef) -> list[dict]:
        return self.controller.journal(ref.key).ops()

    def snapshot(self, ref: InstanceRef) -> str:
        return self.controller.snapshot(ref.key).id

    def snapshots(self, principal: Principal) -> list[str]:
        return [s.id for s in self.controller.snapshots.list(principal.org, principal.user)]

    def restore(self, snapshot_id: str, into: InstanceRef) -> InstanceRef:
        from runtime.snapshots import SnapshotError

        try:
            record = self.controller.restore(snapshot_id, into.key)
        except SnapshotError as exc:
            raise TargetError(f"{exc.reason}: {exc}") from exc
        return InstanceRef(into.principal, into.key, record.generation)

    def snapshot_bytes(self, snapshot_id: str) -> bytes:
        return (self.controller.snapshots.dir / f"{snapshot_id}.snap").read_bytes()

    # -- the tool surface -------------------------------------------------------------------------------

    def intended_tools(self) -> Mapping[str, str]:
        return dict(INTENDED_TOOLS)

    def tool_surface(self, ref: InstanceRef) -> Mapping[str, str]:
        return self.controller.agent(ref.key, {"op": "surface"})["tools"]

    def configure(self, ref: InstanceRef, settings: object) -> None:
        self.turn(ref, "settings: " + json.dumps(settings))

    def managed_config(self) -> bytes:
        return managed.shipped()

    def start_with_managed_config(self, principal: Principal, config: bytes) -> InstanceRef:
        return self.provision(principal, managed_config=config)

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

    # -- capacity --------------------------------------------------------------------------------------

    def capacity_need(self, budget: Mapping[str, int], fleet: Mapping[str, int]) -> Mapping[str, int]:
        with _contract_errors():
            needed = capacity.need(capacity.Budget.of(self._budget_view(budget)), capacity.Fleet.of(fleet))
        return {"memory_mb": needed.memory_mb, "disk_mb": needed.disk_mb}

    def capacity_admit(self, budget: Mapping[str, int], fleet: Mapping[str, int], host: Mapping[str, int]
                       ) -> tuple[bool, str]:
        with _contract_errors():
            admission = capacity.admit(capacity.Budget.of(self._budget_view(budget)), capacity.Fleet.of(fleet),
                                       capacity.Host.of(host))
        return admission.ok, admission.reason

    def fleet_need(self) -> Mapping[str, int]:
        fleet, budget, host = self.controller.fleet(), self.controller.budget, self.controller.host
        needed = capacity.need(budget, fleet)
        return {"memory_mb": needed.memory_mb, "disk_mb": needed.disk_mb, "host_memory_mb": host.memory_mb,
                "host_disk_mb": host.disk_mb, **vars(fleet), **vars(budget)}

    @contextmanager
    def host_limits(self, memory_mb: int | None = None, disk_mb: int | None = None) -> Iterator[None]:
        before = self.controller.host
        with _contract_errors():
            limited = capacity.Host(before.memory_mb if memory_mb is None else memory_mb,
                                    before.disk_mb if disk_mb is None else disk_mb)
        self.controller.host = limited
        try:
            yield
        finally:
            self.controller.host = before

    # -- deliberately broken arrangements -------------------------------------------------------------

    @contextmanager
    def broken(self, control: str, **context: object) -> Iterator[object]:
        builders: dict[str, Callable[..., object]] = {
            "shared-volume": self._shared_volume,
            "shared-tmp": self._shared_tmp,
            "secret-in-env": self._secret_in_env,
            "shared-pid-ns": self._shared_pid_ns,
            "same-uid": self._same_uid,
            "host-account-uid": self._host_account_uid,
            "unaudited-operator-route": self._unaudited_operator_route,
            "debug-logging": self._debug_logging,
            "open-egress": self._open_egress,
            "unencrypted-snapshot": self._unencrypted_snapshot,
            "unmetered-model-call": self._unmetered_model_call,
            "capacity-without-brokers": self._capacity_without_brokers,
            "lossy-product-link": self._lossy_product_link,
            "unreachable-product": self._unreachable_product,
        }
        if control not in builders:
            raise TargetError(f"the reference target has no broken arrangement {control!r}: "
                              f"known are {', '.join(sorted(builders))}")
        before = set(self._broken)
        try:
            yield builders[control](**context)
        finally:
            for key in set(self._broken) - before:
                self._stop_broken(key)
            while self._extra_dirs:
                shutil.rmtree(self._extra_dirs.pop(), ignore_errors=True)
            while self._undo:
                self._undo.pop()()

    def _start_broken(self, principal: Principal, *, uid: int, volume: Path | None,
                      edit: Callable[[list[str]], list[str]] = lambda argv: argv,
                      command: Sequence[str] = BROKEN_COMMAND) -> InstanceRef:
        key = f"broken-{next(self._counter)}"
        home = self.controller.state / "broken" / key
        for sub in ("control", "etc"):
            (home / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(home.parent, 0o711)
        os.chmod(home, 0o711)
        if volume is None:
            volume = home / "volume"
            volume.mkdir()
            os.chown(volume, uid, uid)
            os.chmod(volume, 0o700)
        os.chown(home / "control", uid, uid)
        (home / "etc" / "passwd").write_text(f"agent:x:{uid}:{uid}:agent:/data:/bin/sh\n")
        (home / "etc" / "group").write_text(f"agent:x:{uid}:\n")
        (home / "managed.json").write_bytes(managed.shipped())
        os.chmod(home / "managed.json", 0o644)
        spec = sandbox.SandboxSpec(instance_id=key, uid=uid, gid=uid, volume=volume, control_dir=home / "control",
                                   etc_dir=home / "etc", image_dir=self.controller.image, hostname="broken",
                                   managed_config=home / "managed.json")
        cg = self.controller.hierarchy.create(self.controller.run, key, self.controller.limits)
        try:
            proc = sandbox.launch(spec, cg, lambda fd: edit(sandbox.bwrap_argv(spec, command, info_fd=fd)))
        except BaseException:
            cg.remove()
            raise
        self._broken[key] = proc
        ready = home / "control" / "ready"
        end = time.monotonic() + READY_DEADLINE
        while not ready.exists():
            if not proc.alive() or time.monotonic() > end:
                raise TargetError(f"broken arrangement {key} did not come up within {READY_DEADLINE}s")
            time.sleep(0.005)
        return InstanceRef(principal, key, 0)

    def _stop_broken(self, key: str) -> None:
        proc = self._broken.pop(key)
        proc.stop()
        proc.cgroup.remove()
        shutil.rmtree(self.controller.state / "broken" / key, ignore_errors=True)

    def _record(self, ref: InstanceRef):
        return self.controller.get(ref.key)

    def _shared_volume(self, owner: InstanceRef, intruder: Principal) -> InstanceRef:
        """The intruder's sandbox gets the owner's volume as its /data, under the owner's uid, as a
        platform with one shared volume and one shared uid would."""
        record = self._record(owner)
        return self._start_broken(intruder, uid=record.uid, volume=self.controller.state / "instances" / record.id / "volume")

    def _shared_tmp(self, owner: Principal, intruder: Principal) -> tuple[InstanceRef, InstanceRef]:
        """Two sandboxes (own uids, own volumes) whose /tmp is the same host folder, as a platform that
        bind-mounts a common scratch space would."""
        shared = self.controller.state / "broken" / f"tmp-{next(self._counter)}"
        shared.mkdir(parents=True)
        os.chmod(shared, 0o1777)
        edit = lambda argv: _replace(argv, ["--tmpfs", "/tmp"], ["--bind", str(shared), "/tmp"])  # noqa: E731
        first = self._start_broken(owner, uid=self._free_uid(), volume=None, edit=edit)
        second = self._start_broken(intruder, uid=self._free_uid(), volume=None, edit=edit)
        self._extra_dirs.append(shared)
        return first, second

    def _secret_in_env(self, principal: Principal, extra: Mapping[str, str] | None = None) -> InstanceRef:
        """A sandbox launched with the platform's secrets (and ``extra`` ones) in its environment."""
        leaked = {**self._secrets, **(extra or {})}
        extra = [a for key, value in leaked.items() for a in ("--setenv", key, value)]
        return self._start_broken(principal, uid=self._free_uid(), volume=None,
                                  edit=lambda argv: _before_command(argv, extra))

    def _shared_pid_ns(self, intruder: Principal) -> InstanceRef:
        """The intruder's sandbox shares the host's pid namespace and sees the host's /proc."""
        def edit(argv: list[str]) -> list[str]:
            argv = _replace(argv, ["--unshare-pid"], [])
            return _replace(argv, ["--proc", "/proc"], ["--ro-bind", "/proc", "/proc"])
        return self._start_broken(intruder, uid=self._free_uid(), volume=None, edit=edit)

    def _same_uid(self, owner: InstanceRef, intruder: Principal) -> InstanceRef:
        """The intruder's sandbox runs under the owner's host uid (its own volume, though)."""
        return self._start_broken(intruder, uid=self._record(owner).uid, volume=None)

    def _host_account_uid(self, intruder: Principal, account: str = "nobody") -> InstanceRef:
        """The intruder's sandbox runs under an existing host account's uid (its own volume), as a platform
        that maps every agent to a service account would."""
        import pwd

        return self._start_broken(intruder, uid=pwd.getpwnam(account).pw_uid, volume=None)

    def _open_egress(self, principal: Principal, lab, catalog_refresh: float = 0.0) -> InstanceRef:
        """A sandbox linked to the lab with a default route and the lab's resolver: open egress, as a
        sandbox on a bridged network would have, but into the lab only. With ``catalog_refresh`` it runs
        the agent with its model-catalog refresh on."""
        uid = self._free_uid()
        home = self.controller.state / "broken" / f"egress-{next(self._counter)}"
        home.mkdir(parents=True)
        resolv = home / "resolv.conf"
        resolv.write_text(f"nameserver {lab_addresses()['resolver']}\noptions timeout:1 attempts:1\n")
        os.chmod(home, 0o755)
        os.chmod(resolv, 0o644)
        self._extra_dirs.append(home)
        extra = ["--ro-bind", str(resolv), "/etc/resolv.conf"]
        command = BROKEN_COMMAND
        if catalog_refresh:
            extra += ["--setenv", "PAIRPROOF_CATALOG_REFRESH", str(catalog_refresh)]
            command = ("/bin/sh", "-c", ": > /run/agent/ready && exec /usr/bin/python3 -I -S /opt/pairproof/agent.py")
        ref = self._start_broken(principal, uid=uid, volume=None, command=command,
                                 edit=lambda argv: _before_command(argv, extra))
        lab.connect(self._broken[ref.key].host_pid)
        return ref

    def _unencrypted_snapshot(self) -> None:
        """While it lasts, the platform's own snapshot path (``snapshot``, ``restore``) stores snapshots
        compressed but sealed with nothing, as a store without keys would: same header, same compression,
        same file, the same restore."""
        store = self.controller.snapshots
        before = store.sealer
        store.sealer = _NoSeal()
        self._undo.append(lambda: setattr(store, "sealer", before))

    def _unmetered_model_call(self, principal: Principal, purpose: str = "title") -> None:
        """One model call for ``principal`` made straight to the provider with the platform's key, past the
        proxy's meter, as a platform component wired to the provider directly would."""
        body = {"model": "reference-aux", "messages": [{"role": "user", "content": "Title for: hello"}],
                "metadata": {"purpose": purpose}, "user": f"{principal.org}:{principal.user}"}
        status, answer = self._http("POST", self.provider.url + "/v1/chat/completions", body,
                                    {"Authorization": f"Bearer {self._provider_key}"})
        if status != 200:
            raise TargetError(f"the unmetered call was not answered: {status} {answer}")

    def _capacity_without_brokers(self) -> None:
        """While it lasts, the capacity arithmetic (``capacity_need``, ``capacity_admit``) budgets no broker
        beside each resident instance, as a model that forgets them would."""
        self._budget_view = lambda budget: {**budget, "broker_mb": 0} if "broker_mb" in budget else dict(budget)
        self._undo.append(lambda: setattr(self, "_budget_view", dict))

    def _lossy_product_link(self, ref: InstanceRef) -> None:
        """The link from the instance's broker to the product loses every answer (the request arrives)."""
        relay = _LossyRelay(self.platform.product.url)
        broker = self.controller.broker(ref.key)
        before = broker.product_url
        broker.product_url = relay.url
        self._undo.append(lambda: (setattr(broker, "product_url", before), relay.close()))

    def _unreachable_product(self, ref: InstanceRef) -> None:
        """The product refuses the broker's connections: nothing can be sent."""
        import socket as _socket

        closed = _socket.socket()
        closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused at once
        broker = self.controller.broker(ref.key)
        before = broker.product_url
        broker.product_url = f"http://127.0.0.1:{closed.getsockname()[1]}"
        self._undo.append(lambda: (setattr(broker, "product_url", before), closed.close()))

    def _unaudited_operator_route(self) -> str:
        """A support 'debug' route that reads records without writing the audit, added the way a
        deployment adds a route; removed again when the control ends."""
        product = self.platform.product
        template = r"/api/operator/debug/records/(\d+)"
        product.add_route("GET", template, "operator", lambda who, rid: dict(product.store._row(int(rid))))
        self._undo.append(lambda: product._routes.pop())
        return "/api/operator/debug/records/{id}"

    def _debug_logging(self) -> None:
        """The platform's log level turned to DEBUG, as an operator chasing a bug would."""
        root = logging.getLogger("pairproof")
        before = root.level
        root.setLevel(logging.DEBUG)
        self._undo.append(lambda: root.setLevel(before))

    def _free_uid(self) -> int:
        # Broken sandboxes take uids from the top of the run's block, far from the instances' slots.
        return self.controller.uids.uid(999 - len(self._broken))

    def close(self) -> None:
        errors = []
        for key in list(self._broken):
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
        for key in self._secrets:
            os.environ.pop(key, None)
        if errors:
            raise TargetError("reference target teardown was incomplete: " + "; ".join(errors))


@contextmanager
def _contract_errors() -> Iterator[None]:
    """The runtime's refusals and failures as the contract's errors (a capacity refusal keeps its reason)."""
    try:
        yield
    except CapacityRefused as exc:
        raise CapacityRefusedError(exc.reason) from exc
    except RuntimeFault as exc:
        raise TargetError(str(exc)) from exc


class ProductHttpClient:
    """The product server over HTTP with one bearer token."""

    def __init__(self, base: str, token: str) -> None:
        self.base, self.token = base, token

    def request(self, method: str, path: str, body: Mapping[str, object] | None = None,
                headers: Mapping[str, str] | None = None) -> tuple[int, object]:
        data = json.dumps(body).encode() if body is not None else (b"{}" if method == "POST" else None)
        request = urllib.request.Request(self.base + path, data, {"Content-Type": "application/json",
                                                                  "Authorization": f"Bearer {self.token}", **(headers or {})},
                                         method=method)
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                raw, status, kind = response.read(), response.status, response.headers.get("Content-Type", "")
        except urllib.error.HTTPError as exc:
            raw, status, kind = exc.read(), exc.code, exc.headers.get("Content-Type", "")
        if kind.startswith("text/html"):
            return status, raw.decode()
        return status, json.loads(raw) if raw else None


class _NoSeal:
    """A snapshot sealer that seals nothing: the broken arrangement of SN-1's X control."""

    def seal(self, key: bytes, plain: bytes, aad: bytes) -> bytes:
        return plain

    def open(self, key: bytes, sealed: bytes, aad: bytes) -> bytes:
        return sealed


class _LossyRelay:
    """Forwards each HTTP request to the product, reads the whole answer, and drops it (closes the
    connection instead): the request happened, its requester can never know."""

    def __init__(self, upstream: str) -> None:
        import socket as _socket
        import threading

        self.upstream = upstream.split("//", 1)[1].split(":")
        self._server = _socket.socket()
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(16)
        self.url = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @staticmethod
    def _read_http(conn) -> bytes:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return data
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        while len(body) < length:
            chunk = conn.recv(65536)
            if not chunk:
                break
            body += chunk
        return head + b"\r\n\r\n" + body

    def _serve(self) -> None:
        import socket as _socket

        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            with client:
                request = self._read_http(client)
                with _socket.create_connection((self.upstream[0], int(self.upstream[1])), timeout=30) as up:
                    up.sendall(request)
                    self._read_http(up)  # the product answered; the answer goes nowhere

    def close(self) -> None:
        self._server.close()
