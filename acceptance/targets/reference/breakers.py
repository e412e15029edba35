"""The reference driver's deliberately broken arrangements, one typed method each (the contract's
``Breaks*`` facets). Each is a context manager: it builds the arrangement from the runtime's public
primitives (``Controller.launch_extra`` with an argv edit, ``ProductServer.add_route``,
``Broker.set_product_upstream``, ``SnapshotStore.sealed_with``, ``Platform.set_log_level``), yields what
the control probes through, and stops and undoes it all on exit. The runtime itself has no switch that
weakens a guard: each weakening is written here, in the open, where a platform's authors can copy it."""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

from acceptance.contract import InstanceRef, Lab, Principal
from acceptance.errors import TargetError
from acceptance.harness.wait import until
from acceptance.targets.reference.helpers import LossyRelay, NoSeal, add_mounts, before_command, http_json, replace_args
from runtime.authority.capabilities import AuthorityError
from runtime.product.store import ProductError

# A broken sandbox runs no agent; it marks when its mounts are complete (bwrap reports its pid before
# that), and the driver waits for the mark before anyone probes it.
BROKEN_COMMAND = ("/bin/sh", "-c", ": > /run/agent/ready && exec /bin/sleep infinity")
READY_DEADLINE = 10.0
# mount(NULL, "/data", NULL, MS_SHARED, NULL), run by root in a sandbox's mount namespace.
MAKE_SHARED = ("import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); "
               "rc = libc.mount(None, b'/data', None, ctypes.c_ulong(1 << 20), None); "
               "rc == 0 or exit(os.strerror(ctypes.get_errno()))")


def lab_addresses() -> dict[str, str]:
    from acceptance.harness.lab.sink import ADDRESSES

    return ADDRESSES


class Breakers:
    """Mixed into ``ReferenceTarget``; uses its controller, platform, provider and secrets."""

    @contextmanager
    def broken_shared_volume(self, owner: InstanceRef, intruder: Principal) -> Iterator[InstanceRef]:
        with self._arrangement():
            yield self._shared_volume(owner=owner, intruder=intruder)

    @contextmanager
    def broken_shared_tmp(self, owner: Principal, intruder: Principal) -> Iterator[tuple[InstanceRef, InstanceRef]]:
        with self._arrangement():
            yield self._shared_tmp(owner=owner, intruder=intruder)

    @contextmanager
    def broken_secret_in_env(self, principal: Principal, extra: Mapping[str, str] | None = None) -> Iterator[InstanceRef]:
        with self._arrangement():
            yield self._secret_in_env(principal=principal, extra=extra)

    @contextmanager
    def broken_shared_pid_ns(self, intruder: Principal) -> Iterator[InstanceRef]:
        with self._arrangement():
            yield self._shared_pid_ns(intruder=intruder)

    @contextmanager
    def broken_nested_userns(self, intruder: Principal) -> Iterator[InstanceRef]:
        with self._arrangement():
            yield self._nested_userns(intruder=intruder)

    @contextmanager
    def broken_writable_root(self, intruder: Principal) -> Iterator[InstanceRef]:
        with self._arrangement():
            yield self._writable_root(intruder=intruder)

    @contextmanager
    def broken_no_seccomp(self, intruder: Principal) -> Iterator[InstanceRef]:
        with self._arrangement():
            yield self._no_seccomp(intruder=intruder)

    @contextmanager
    def broken_host_device(self, intruder: Principal) -> Iterator[InstanceRef]:
        with self._arrangement():
            yield self._host_device(intruder=intruder)

    @contextmanager
    def broken_shared_propagation(self, intruder: Principal) -> Iterator[InstanceRef]:
        with self._arrangement():
            yield self._shared_propagation(intruder=intruder)

    @contextmanager
    def broken_host_uts_cgroup_ns(self, intruder: Principal) -> Iterator[InstanceRef]:
        with self._arrangement():
            yield self._host_uts_cgroup_ns(intruder=intruder)

    @contextmanager
    def broken_no_cpu_limit(self, intruder: Principal) -> Iterator[InstanceRef]:
        with self._arrangement():
            yield self._no_cpu_limit(intruder=intruder)

    @contextmanager
    def broken_same_uid(self, owner: InstanceRef, intruder: Principal) -> Iterator[InstanceRef]:
        with self._arrangement():
            yield self._same_uid(owner=owner, intruder=intruder)

    @contextmanager
    def broken_host_account_uid(self, intruder: Principal, account: str = "nobody") -> Iterator[InstanceRef]:
        with self._arrangement():
            yield self._host_account_uid(intruder=intruder, account=account)

    @contextmanager
    def broken_unaudited_operator_route(self) -> Iterator[str]:
        with self._arrangement():
            yield self._unaudited_operator_route()

    @contextmanager
    def broken_debug_logging(self) -> Iterator[None]:
        with self._arrangement():
            yield self._debug_logging()

    @contextmanager
    def broken_open_egress(self, principal: Principal, lab: Lab, catalog_refresh: float = 0.0) -> Iterator[InstanceRef]:
        with self._arrangement():
            yield self._open_egress(principal=principal, lab=lab, catalog_refresh=catalog_refresh)

    @contextmanager
    def broken_unencrypted_snapshot(self) -> Iterator[None]:
        with self._arrangement():
            yield self._unencrypted_snapshot()

    @contextmanager
    def broken_unmetered_model_call(self, principal: Principal, purpose: str = "title") -> Iterator[None]:
        with self._arrangement():
            yield self._unmetered_model_call(principal=principal, purpose=purpose)

    @contextmanager
    def broken_capacity_without_brokers(self) -> Iterator[None]:
        with self._arrangement():
            yield self._capacity_without_brokers()

    @contextmanager
    def broken_lossy_product_link(self, ref: InstanceRef) -> Iterator[None]:
        with self._arrangement():
            yield self._lossy_product_link(ref=ref)

    @contextmanager
    def broken_unreachable_product(self, ref: InstanceRef) -> Iterator[None]:
        with self._arrangement():
            yield self._unreachable_product(ref=ref)

    @contextmanager
    def broken_lax_model_capability(self) -> Iterator[None]:
        with self._arrangement():
            yield self._lax_model_capability()

    @contextmanager
    def _arrangement(self) -> Iterator[None]:
        """Whatever a broken arrangement started or changed is stopped and undone on exit."""
        before = set(self._broken)
        try:
            yield
        finally:
            for key in set(self._broken) - before:
                self._stop_broken(key)
            while self._scratch:
                self.controller.remove_extra(self._scratch.pop())
            while self._undo:
                self._undo.pop()()

    def _start_broken(self, principal: Principal, *, uid: int, volume: Path | None,
                      edit: Callable[[list[str]], list[str]] = lambda argv: argv,
                      command: Sequence[str] = BROKEN_COMMAND) -> InstanceRef:
        key = f"broken-{next(self._counter)}"
        proc = self.controller.launch_extra(key, command, uid=uid, volume=volume, edit=edit)
        self._broken[key] = proc
        ready = proc.spec.control_dir / "ready"

        def up() -> bool:
            if ready.exists():
                return True
            if not proc.alive():
                raise TargetError(f"broken arrangement {key} ended before it came up")
            return False

        until(up, f"broken arrangement {key} coming up", READY_DEADLINE, every=0.005)
        return InstanceRef(principal, key, 0)

    def _stop_broken(self, key: str) -> None:
        del self._broken[key]
        self.controller.remove_extra(key)

    def _record(self, ref: InstanceRef):
        return self.controller.get(ref.key)

    def _shared_volume(self, owner: InstanceRef, intruder: Principal) -> InstanceRef:
        """The intruder's sandbox gets the owner's volume as its /data, under the owner's uid, as a
        platform with one shared volume and one shared uid would."""
        return self._start_broken(intruder, uid=self._record(owner).uid, volume=self.controller.volume_path(owner.key))

    def _shared_tmp(self, owner: Principal, intruder: Principal) -> tuple[InstanceRef, InstanceRef]:
        """Two sandboxes (own uids, own volumes) whose /tmp is the same host folder, as a platform that
        bind-mounts a common scratch space would."""
        name = f"tmp-{next(self._counter)}"
        shared = self.controller.scratch(name)
        self._scratch.append(name)
        os.chmod(shared, 0o1777)
        edit = lambda argv: replace_args(argv, ["--tmpfs", "/tmp"], ["--bind", str(shared), "/tmp"])  # noqa: E731
        first = self._start_broken(owner, uid=self._free_uid(), volume=None, edit=edit)
        second = self._start_broken(intruder, uid=self._free_uid(), volume=None, edit=edit)
        return first, second

    def _secret_in_env(self, principal: Principal, extra: Mapping[str, str] | None = None) -> InstanceRef:
        """A sandbox launched with the platform's secrets (and ``extra`` ones) in its environment."""
        leaked = {**self._secrets, **(extra or {})}
        extra = [a for key, value in leaked.items() for a in ("--setenv", key, value)]
        return self._start_broken(principal, uid=self._free_uid(), volume=None,
                                  edit=lambda argv: before_command(argv, extra))

    def _shared_pid_ns(self, intruder: Principal) -> InstanceRef:
        """The intruder's sandbox shares the host's pid namespace and sees the host's /proc."""
        def edit(argv: list[str]) -> list[str]:
            argv = replace_args(argv, ["--unshare-pid"], [])
            return replace_args(argv, ["--proc", "/proc"], ["--ro-bind", "/proc", "/proc"])
        return self._start_broken(intruder, uid=self._free_uid(), volume=None, edit=edit)

    def _nested_userns(self, intruder: Principal) -> InstanceRef:
        """The intruder's sandbox launched without ``--disable-userns`` and without the seccomp filter (which
        refuses ``unshare``): its processes may create a user namespace of their own (and, holding every
        capability in it, any other namespace)."""
        return self._start_broken(intruder, uid=self._free_uid(), volume=None,
                                  edit=lambda argv: without_seccomp(replace_args(argv, ["--disable-userns"], [])))

    def _writable_root(self, intruder: Principal) -> InstanceRef:
        """The intruder's sandbox keeps the tmpfs it is built on writable (no ``--remount-ro /``), as a launcher
        that builds the root and forgets to seal it would."""
        return self._start_broken(intruder, uid=self._free_uid(), volume=None,
                                  edit=lambda argv: replace_args(argv, ["--remount-ro", "/"], []))

    def _no_seccomp(self, intruder: Principal) -> InstanceRef:
        """The intruder's sandbox launched without the seccomp filter, as bubblewrap runs by default."""
        return self._start_broken(intruder, uid=self._free_uid(), volume=None, edit=without_seccomp)

    def _host_device(self, intruder: Principal) -> InstanceRef:
        """The intruder's sandbox is given the host's /dev/kmsg beside the harmless devices, as a platform that
        lets agents read the kernel log for diagnostics would."""
        last = ["--dev-bind", "/dev/urandom", "/dev/urandom"]
        return self._start_broken(intruder, uid=self._free_uid(), volume=None,
                                  edit=lambda argv: replace_args(argv, last, [*last, "--dev-bind", "/dev/kmsg", "/dev/kmsg"]))

    def _shared_propagation(self, intruder: Principal) -> InstanceRef:
        """The intruder's sandbox's /data mount made shared (``mount(2)`` with MS_SHARED, by root from the host in
        its mount namespace, with the sandbox's python: an image need not have a ``mount``), as a platform that
        shares volume mounts to hot-plug storage would."""
        ref = self._start_broken(intruder, uid=self._free_uid(), volume=None)
        pid = self._broken[ref.key].host_pid
        out = subprocess.run(["nsenter", "-t", str(pid), "--mount", "--", "/usr/bin/python3", "-I", "-S", "-c", MAKE_SHARED],
                             capture_output=True, timeout=30)
        if out.returncode != 0:
            raise TargetError(f"cannot make /data shared in {ref.key}: {out.stderr.decode(errors='replace')}")
        return ref

    def _host_uts_cgroup_ns(self, intruder: Principal) -> InstanceRef:
        """The intruder's sandbox keeps the host's UTS and cgroup namespaces (no ``--unshare-uts``,
        ``--unshare-cgroup``, and so no hostname of its own)."""
        def edit(argv: list[str]) -> list[str]:
            at = argv.index("--hostname")
            argv = argv[:at] + argv[at + 2:]
            argv = replace_args(argv, ["--unshare-uts"], [])
            return replace_args(argv, ["--unshare-cgroup"], [])
        return self._start_broken(intruder, uid=self._free_uid(), volume=None, edit=edit)

    def _no_cpu_limit(self, intruder: Principal) -> InstanceRef:
        """The intruder's sandbox's cgroup has no CPU quota (written away once it runs), as a platform that
        limits memory and pids only would."""
        ref = self._start_broken(intruder, uid=self._free_uid(), volume=None)
        unlimit_cpu(self._broken[ref.key].cgroup)
        return ref

    def _same_uid(self, owner: InstanceRef, intruder: Principal) -> InstanceRef:
        """The intruder's sandbox runs under the owner's host uid (its own volume, though)."""
        return self._start_broken(intruder, uid=self._record(owner).uid, volume=None)

    def _host_account_uid(self, intruder: Principal, account: str = "nobody") -> InstanceRef:
        """The intruder's sandbox runs under an existing host account's uid (its own volume), as a platform
        that maps every agent to a service account would."""
        import pwd

        return self._start_broken(intruder, uid=pwd.getpwnam(account).pw_uid, volume=None)

    def _lab_resolver(self) -> Path:
        """A resolv.conf naming the lab's resolver (one try, one second), in a scratch folder of its own that
        the arrangement removes: what an open-egress sandbox of any driver is given as /etc/resolv.conf."""
        name = f"egress-{next(self._counter)}"
        home = self.controller.scratch(name)
        self._scratch.append(name)
        resolv = home / "resolv.conf"
        resolv.write_text(f"nameserver {lab_addresses()['resolver']}\noptions timeout:1 attempts:1\n")
        os.chmod(home, 0o755)
        os.chmod(resolv, 0o644)
        return resolv

    def _open_egress(self, principal: Principal, lab: Lab, catalog_refresh: float = 0.0) -> InstanceRef:
        """A sandbox linked to the lab with a default route and the lab's resolver: open egress, as a
        sandbox on a bridged network would have, but into the lab only. With ``catalog_refresh`` it runs
        the agent with its model-catalog refresh on."""
        uid = self._free_uid()
        resolv = self._lab_resolver()
        mounts = ["--ro-bind", str(resolv), "/etc/resolv.conf"]  # before the root is sealed read-only
        env: list[str] = []
        command = BROKEN_COMMAND
        if catalog_refresh:
            env = ["--setenv", "PAIRPROOF_CATALOG_REFRESH", str(catalog_refresh)]
            command = ("/bin/sh", "-c", ": > /run/agent/ready && exec /usr/bin/python3 -I -S /opt/pairproof/reference.py")
        ref = self._start_broken(principal, uid=uid, volume=None, command=command,
                                 edit=lambda argv: before_command(add_mounts(argv, mounts), env))
        lab.connect(self._broken[ref.key].host_pid)
        return ref

    def _unencrypted_snapshot(self) -> None:
        """While it lasts, the platform's own snapshot path (``snapshot``, ``restore``) stores snapshots
        compressed but sealed with nothing, as a store without keys would: same header, same compression,
        same file, the same restore."""
        unsealed = ExitStack()
        unsealed.enter_context(self.controller.snapshots.sealed_with(NoSeal()))
        self._undo.append(unsealed.close)

    def _unmetered_model_call(self, principal: Principal, purpose: str = "title") -> None:
        """One model call for ``principal`` made straight to the provider with the platform's key, past the
        proxy's meter, as a platform component wired to the provider directly would."""
        body = {"model": "reference-aux", "messages": [{"role": "user", "content": "Title for: hello"}],
                "metadata": {"purpose": purpose}, "user": f"{principal.org}:{principal.user}"}
        status, answer = http_json("POST", self.provider.url + "/v1/chat/completions", body,
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
        relay = LossyRelay(self.platform.product.url)
        broker = self.controller.broker(ref.key)
        before = broker.set_product_upstream(relay.url)
        self._undo.append(lambda: (broker.set_product_upstream(before), relay.close()))

    def _lax_model_capability(self) -> None:
        """The proxy checks a model capability's signature, expiry and organization, and lets a stale lease or
        generation (or none current) through, as a proxy that trusts what it signed would; restored on exit."""
        proxy = self.platform.proxy
        before = proxy.current
        proxy.current = _StaleTolerated(before)
        self._undo.append(lambda: setattr(proxy, "current", before))

    def _unreachable_product(self, ref: InstanceRef) -> None:
        """The product refuses the broker's connections: nothing can be sent."""
        import socket as _socket

        closed = _socket.socket()
        closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused at once
        broker = self.controller.broker(ref.key)
        before = broker.set_product_upstream(f"http://127.0.0.1:{closed.getsockname()[1]}")
        self._undo.append(lambda: (broker.set_product_upstream(before), closed.close()))

    def _unaudited_operator_route(self) -> str:
        """A support 'debug' route that reads records without writing the audit, added the way a
        deployment adds a route; removed again when the control ends."""
        product = self.platform.product

        def read(who, rid: str) -> dict:
            record = product.store.record(int(rid))
            if record is None:
                raise ProductError(404, "not_found", "no such record")
            return record

        self._undo.append(product.add_route("GET", r"/api/operator/debug/records/(\d+)", "operator", read))
        return "/api/operator/debug/records/{id}"

    def _debug_logging(self) -> None:
        """The platform's log level turned to DEBUG, as an operator chasing a bug would."""
        before = self.platform.set_log_level(logging.DEBUG)
        self._undo.append(lambda: self.platform.set_log_level(before))


def without_seccomp(argv: list[str]) -> list[str]:
    """The launcher's argv without its ``--seccomp FD`` (the descriptor stays open, unread)."""
    at = argv.index("--seccomp")
    return argv[:at] + argv[at + 2:]


def unlimit_cpu(cgroup) -> None:
    """Remove the CPU quota of a running sandbox's cgroup (v1 ``cpu.cfs_quota_us`` -1, v2 ``cpu.max`` max)."""
    from runtime.isolation.cgroups import V1Cgroup

    if isinstance(cgroup, V1Cgroup):
        if cgroup.cpu_dir is None:
            raise TargetError("the sandbox's cgroup has no cpu controller: no CPU quota to remove")
        (cgroup.cpu_dir / "cpu.cfs_quota_us").write_text("-1")
    else:
        (cgroup.directory / "cpu.max").write_text("max")


class _StaleTolerated:
    """``Current`` as a lax proxy consults it: a revocation or a freeze still refuses, a past lease or
    generation of the instance (or no current lease) does not."""

    def __init__(self, current) -> None:
        self._current = current

    def check(self, claims) -> None:
        try:
            self._current.check(claims)
        except AuthorityError as exc:
            if exc.reason not in ("generation_stale", "lease_stale", "no_current_lease"):
                raise

    def __getattr__(self, name: str):
        return getattr(self._current, name)
