"""The docker target's broken arrangements: the reference driver's (``reference/breakers.py``), with every
sandbox-side one built in Docker's terms, from the container configuration the runtime's engine makes
(``runtime.isolation.containers.container_config``) edited on the way: the owner's volume mounted into the intruder,
the same uid, a host account's uid, a shared /tmp bind, the platform's secrets in the environment, the
host's pid namespace (``pid_mode="host"``), the lab linked into the container's network namespace. The
platform-side ones (operator route, debug logging, unsealed snapshots, the meter, capacity, the product
link) are the reference platform's and are inherited as they are."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from acceptance.contract import InstanceRef, Lab, Principal
from acceptance.errors import TargetError
from acceptance.harness.wait import until
from acceptance.targets.reference.breakers import BROKEN_COMMAND, READY_DEADLINE, Breakers
from runtime.agents import managed
from runtime.isolation.sandbox import SandboxSpec


def _owned_dir(path: Path, uid: int, mode: int = 0o700) -> None:
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, uid, uid)
    os.chmod(path, mode)


class DockerBreakers(Breakers):
    """Mixed into ``DockerTarget``; its containers come from the controller's engine, outside the registry."""

    def _start_broken(self, principal: Principal, *, uid: int, volume: Path | None,
                      edit: Callable[[dict], dict] = lambda config: config,
                      command: Sequence[str] = BROKEN_COMMAND) -> InstanceRef:
        key = f"broken-{next(self._counter)}"
        home = self.controller.scratch(key)
        for sub in ("etc",):
            (home / sub).mkdir()
        _owned_dir(home / "control", uid, 0o755)
        if volume is None:
            volume = home / "volume"
            _owned_dir(volume, uid)
        (home / "etc" / "passwd").write_text(f"agent:x:{uid}:{uid}:agent:/data:/bin/sh\n")
        (home / "etc" / "group").write_text(f"agent:x:{uid}:\n")
        (home / "managed.json").write_bytes(managed.shipped())
        os.chmod(home / "managed.json", 0o644)
        spec = SandboxSpec(instance_id=key, uid=uid, gid=uid, volume=volume, control_dir=home / "control",
                           etc_dir=home / "etc", image_dir=self.controller.image, hostname="extra",
                           managed_config=home / "managed.json")
        try:
            proc = self.controller.engine.start(spec, self.controller.limits, command, edit=edit)
        except BaseException:
            self.controller.remove_extra(key)
            raise
        self._broken[key] = proc
        ready = spec.control_dir / "ready"

        def up() -> bool:
            if ready.exists():
                return True
            if not proc.alive():
                raise TargetError(f"broken arrangement {key} ended before it came up ({proc.exit_report()})")
            return False

        until(up, f"broken arrangement {key} coming up", READY_DEADLINE, every=0.005)
        return InstanceRef(principal, key, 0)

    def _stop_broken(self, key: str) -> None:
        proc = self._broken.pop(key)
        try:
            proc.stop()
        finally:
            self.controller.remove_extra(key)  # its scratch folder (no extra sandbox runs under that name)

    def _shared_tmp(self, owner: Principal, intruder: Principal) -> tuple[InstanceRef, InstanceRef]:
        """Two containers (own uids, own volumes) whose /tmp is the same host folder (a bind, not a tmpfs)."""
        name = f"tmp-{next(self._counter)}"
        shared = self.controller.scratch(name)
        self._scratch.append(name)
        os.chmod(shared, 0o1777)

        def edit(config: dict) -> dict:
            tmpfs = {k: v for k, v in config["tmpfs"].items() if k != "/tmp"}
            mounts = [*config["mounts"], {"Type": "bind", "Source": str(shared), "Target": "/tmp", "ReadOnly": False}]
            return {**config, "tmpfs": tmpfs, "mounts": mounts}
        first = self._start_broken(owner, uid=self._free_uid(), volume=None, edit=edit)
        second = self._start_broken(intruder, uid=self._free_uid(), volume=None, edit=edit)
        return first, second

    def _secret_in_env(self, principal: Principal, extra: Mapping[str, str] | None = None) -> InstanceRef:
        """A container created with the platform's secrets (and ``extra`` ones) in its environment."""
        leaked = {**self._secrets, **(extra or {})}
        return self._start_broken(principal, uid=self._free_uid(), volume=None,
                                  edit=lambda config: {**config, "environment": {**config["environment"], **leaked}})

    def _shared_pid_ns(self, intruder: Principal) -> InstanceRef:
        """The intruder's container shares the host's pid namespace (``--pid=host``) and sees its /proc."""
        return self._start_broken(intruder, uid=self._free_uid(), volume=None,
                                  edit=lambda config: {**config, "pid_mode": "host"})

    def _nested_userns(self, intruder: Principal) -> InstanceRef:
        """The intruder's container runs without Docker's seccomp filter (``--security-opt seccomp=unconfined``),
        which is what refuses ``unshare(CLONE_NEWUSER)`` to a process without CAP_SYS_ADMIN."""
        def edit(config: dict) -> dict:
            return {**config, "security_opt": [*(o for o in config.get("security_opt") or [] if not o.startswith("seccomp")),
                                               "seccomp=unconfined"]}
        return self._start_broken(intruder, uid=self._free_uid(), volume=None, edit=edit)

    def _open_egress(self, principal: Principal, lab: Lab, catalog_refresh: float = 0.0) -> InstanceRef:
        """A container whose network namespace is linked to the lab with a default route and the lab's
        resolver (a container joined to a network, but one that leads into the lab only). With
        ``catalog_refresh`` it runs the image's agent with its model-catalog refresh on."""
        uid = self._free_uid()
        resolv = self._lab_resolver()
        command = BROKEN_COMMAND
        env: dict[str, str] = {}
        if catalog_refresh:
            env["PAIRPROOF_CATALOG_REFRESH"] = str(catalog_refresh)
            command = ("/bin/sh", "-c", ": > /run/agent/ready && exec /usr/bin/python3 -I -S /opt/pairproof/reference.py")

        def edit(config: dict) -> dict:
            mounts = [*(m for m in config["mounts"] if m["Target"] != "/etc/resolv.conf"),
                      {"Type": "bind", "Source": str(resolv), "Target": "/etc/resolv.conf", "ReadOnly": True}]
            return {**config, "mounts": mounts, "environment": {**config["environment"], **env}}
        ref = self._start_broken(principal, uid=uid, volume=None, command=command, edit=edit)
        lab.connect(self._broken[ref.key].host_pid)
        return ref

    def _writable_root(self, intruder: Principal) -> InstanceRef:
        """The intruder's container without ``read_only``: the image's root filesystem writable by its uid where
        the image's permissions allow (Docker's default)."""
        return self._start_broken(intruder, uid=self._free_uid(), volume=None,
                                  edit=lambda config: {**config, "read_only": False})

    def _no_seccomp(self, intruder: Principal) -> InstanceRef:
        """The intruder's container without a seccomp filter (``--security-opt seccomp=unconfined``)."""
        def edit(config: dict) -> dict:
            return {**config, "security_opt": [*(o for o in config.get("security_opt") or [] if not o.startswith("seccomp")),
                                               "seccomp=unconfined"]}
        return self._start_broken(intruder, uid=self._free_uid(), volume=None, edit=edit)

    def _host_device(self, intruder: Principal) -> InstanceRef:
        """The intruder's container given the host's /dev/kmsg (``--device /dev/kmsg:/dev/kmsg:r``)."""
        return self._start_broken(intruder, uid=self._free_uid(), volume=None,
                                  edit=lambda config: {**config, "devices": ["/dev/kmsg:/dev/kmsg:r"]})

    def _host_uts_cgroup_ns(self, intruder: Principal) -> InstanceRef:
        """The intruder's container in the host's UTS and cgroup namespaces (``--uts=host --cgroupns=host``; no
        hostname of its own, which Docker refuses with the host's UTS namespace)."""
        def edit(config: dict) -> dict:
            kept = {k: v for k, v in config.items() if k != "hostname"}
            return {**kept, "uts_mode": "host", "cgroupns": "host"}
        return self._start_broken(intruder, uid=self._free_uid(), volume=None, edit=edit)

    def _no_cpu_limit(self, intruder: Principal) -> InstanceRef:
        """The intruder's container created without a CPU quota (no ``nano_cpus``)."""
        return self._start_broken(intruder, uid=self._free_uid(), volume=None,
                                  edit=lambda config: {k: v for k, v in config.items() if k != "nano_cpus"})
