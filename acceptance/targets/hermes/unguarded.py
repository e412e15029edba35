"""The ``hermes-unguarded`` target: hermes-agent 0.19.0 with its own configuration handling and its defaults
(``acceptance/profiles/hermes-unguarded.toml``: no managed layer the platform checks; the model and the
product's tools in the user's own config, which the user and the agent may change). The platform around it
(sandbox, broker, proxy, product) is the same, and so is the surface signed off (``intended_tools``): its
verdict is expected to fail (``acceptance/targets/expectations/hermes-unguarded.toml``), and its failures are the
product of the qualification.

hermes's own handling is built here, in the driver, never in the runtime (whose only paths are the guarded
ones):

- ``configure``: a user's settings are written into hermes's ``$HERMES_HOME/config.yaml`` unfiltered, leaf by
  leaf, as a user editing their own file would (each mapping merged into the file's, every other leaf kept),
  through the sandbox as the agent's own uid; hermes is stopped and woken to read them (it reads its tool
  servers only as it starts). Each call starts from the user's first file (the profile's seed), as the
  platform's ``configure`` replaces the previous settings: one setting is judged at a time.
- ``managed_config`` / ``start_with_managed_config``: the managed layer an operator would deploy for hermes (the
  guarded profile's reviewed ``hermes/config.yaml``) handed to hermes unchecked: written, root's and read-only to
  the agent, into the folder ``$HERMES_MANAGED_DIR`` names (``/data/managed`` here, as ``/etc/hermes`` would be)
  before hermes's first start, whatever its bytes. hermes itself decides what to do with a bad one; what it
  logged about the file is attached to the test.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

from acceptance.contract import InstanceRef, Principal
from acceptance.errors import TargetError
from acceptance.targets import TargetOptions
from acceptance.targets.hermes.driver import HermesTarget, clean, preflight
from acceptance.targets.profiles import HERE as PROFILES
from acceptance.targets.reference.helpers import contract_errors

__all__ = ["DEFAULT_PROFILE", "HermesUnguardedTarget", "clean", "create", "preflight"]

DEFAULT_PROFILE = "hermes-unguarded"
USER_CONFIG = "/data/hermes/config.yaml"  # hermes's own config, $HERMES_HOME/config.yaml
SEED = PROFILES / "hermes-unguarded" / "config.yaml"  # the user's first config (the profile's [start].files)
MANAGED = PROFILES / "hermes" / "config.yaml"  # hermes's managed layer as reviewed for the guarded target
MANAGED_DIR = "managed"  # on the volume: /data/managed, the profile's HERMES_MANAGED_DIR
HERMES_LOGS = ("/data/hermes/logs/errors.log", "/data/hermes/logs/agent.log")


def leaf_by_leaf(base: dict, over: dict) -> dict:
    """``over`` written into a copy of ``base`` as hermes merges its layers: a mapping into a mapping, key by key;
    any other value (a list included) replaces the leaf."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = leaf_by_leaf(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _attach(name: str, text: str) -> None:
    """What hermes said, on the running test's Allure result (nothing without Allure)."""
    try:
        import allure
    except ImportError:
        return
    allure.attach(text, name=name, attachment_type=allure.attachment_type.TEXT)


class HermesUnguardedTarget(HermesTarget):
    name = DEFAULT_PROFILE

    # -- a user's settings, hermes's way ------------------------------------------------------------------

    def configure(self, ref, settings: object) -> None:
        """The settings written into the user's config.yaml as they are (no allowlist), leaf by leaf over the
        user's first file, by the agent's own uid inside its sandbox; then hermes is restarted to read them."""
        import yaml

        if not isinstance(settings, dict):
            raise TargetError(f"settings must be a mapping, not {type(settings).__name__}")
        seed = yaml.safe_load(SEED.read_text())
        text = yaml.safe_dump(leaf_by_leaf(seed, settings), sort_keys=False)
        if not self.running(ref.principal):
            ref = self.wake(ref)
        tmp = f"{USER_CONFIG}.edit"
        result = self.exec(ref, ["/bin/sh", "-c", 'cat > "$1" && mv -f "$1" "$2"', "configure", tmp, USER_CONFIG],
                           stdin=text.encode())
        if result.rc != 0:
            raise TargetError(f"writing {USER_CONFIG} in {ref.key} failed with {result.rc}: "
                              f"{result.stderr.decode(errors='replace')[:300]}")
        _attach(f"user config.yaml written in {ref.key}", text)
        self.sleep(ref)
        self.wake(ref)

    # -- the managed layer, handed over unchecked -----------------------------------------------------------

    def managed_config(self) -> bytes:
        """The managed layer an operator would deploy for hermes: the one reviewed for the guarded target."""
        return MANAGED.read_bytes()

    def start_with_managed_config(self, principal: Principal, config: bytes, *, request_id: str = "") -> InstanceRef:
        """A new instance whose hermes finds ``config`` as its managed file when it first starts, nobody having
        checked it (``_provision``)."""
        return self.provision(principal, managed_config=config, request_id=request_id)

    def _provision(self, principal: Principal, memory_limit_mb: int | None, managed_config: bytes | None,
                   settings: object = None) -> InstanceRef:
        """As the reference driver's, but a managed file given is hermes's, handed over unchecked: the platform
        registers the instance under its own default (which hermes never reads), the bytes go root-owned and
        read-only to the agent into ``/data/managed/config.yaml`` on the fresh volume, and hermes starts.
        ``settings`` (TS-2's, MD-3's and MD-4's users): written by ``configure`` once hermes has seeded its
        config.yaml on its first start, hermes's way (unfiltered), then hermes restarted to read them."""
        limits = None
        if memory_limit_mb is not None:
            limits = self.controller.limits.__class__(memory_limit_mb << 20, self.controller.limits.pids_max)
        with contract_errors():
            record = self.controller.provision(principal.org, principal.user, limits=limits)
        try:
            if managed_config is not None:
                folder = Path(self.controller.volume_path(record.id)) / MANAGED_DIR
                # A fresh volume nothing has run on yet: no link to follow. Root's folder, 0755; the file 0644.
                os.mkdir(folder, 0o755)
                fd = os.open(folder / "config.yaml", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
                with os.fdopen(fd, "wb") as out:
                    out.write(managed_config)
            with contract_errors():
                record = self.controller.wake(record.id)
        except BaseException:
            self.controller.destroy(record.id)  # a provision whose first wake fails leaves nothing behind
            raise
        ref = InstanceRef(principal, record.id, record.generation)
        if managed_config is not None:
            self._attach_managed_log(ref)
        if settings is not None:
            self.configure(ref, settings)
            ref = InstanceRef(principal, record.id, self.controller.get(record.id).generation)
        return ref

    def _attach_managed_log(self, ref: InstanceRef) -> None:
        """hermes's own lines about its managed scope since it started (its logs on the volume), as evidence."""
        script = 'for f in "$@"; do [ -e "$f" ] && grep -i -h "managed" -- "$f"; done; exit 0'
        result = self.exec(ref, ["/bin/sh", "-c", script, "managed-log", *HERMES_LOGS])
        lines = result.stdout.decode(errors="replace").strip()
        _attach(f"hermes on its managed file ({ref.key})",
                lines or f"hermes logged no line naming its managed scope in {', '.join(HERMES_LOGS)}")


def create(options: TargetOptions) -> HermesUnguardedTarget:
    return HermesUnguardedTarget(options)
