"""Target drivers, one per file, looked up by name.

``reference`` is built in; other drivers register under the ``pairproof.targets`` entry-point group as a
callable ``factory(options: TargetOptions) -> Target`` (or are named directly as ``module:factory``), so a
security team can qualify its own platform without changing pairproof.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path

from acceptance.contract import Target
from acceptance.errors import SetupError
from acceptance.targets.profiles import AgentProfile
from acceptance.targets.profiles import load as load_profile

BUILTIN = {"reference": "acceptance.targets.reference:create", "docker": "acceptance.targets.docker:create",
           "hermes": "acceptance.targets.hermes:create",
           "hermes-unguarded": "acceptance.targets.hermes.unguarded:create"}


@dataclass(frozen=True)
class TargetOptions:
    run: str
    state_dir: Path
    secrets: dict[str, str]
    # The agent the target runs (``--profile``; the reference agent by default): the driver starts it, plants
    # and reads back through it, and delivers turns to its own API as the profile says.
    profile: AgentProfile = field(default_factory=load_profile)


def names() -> list[str]:
    return sorted(set(BUILTIN) | {ep.name for ep in entry_points(group="pairproof.targets")})


def load(name: str) -> Callable[[TargetOptions], Target]:
    """The driver's factory for ``name``; SetupError naming the known targets if there is none."""
    spec = BUILTIN.get(name)
    if spec is None and ":" in name:
        spec = name  # a driver given as "package.module:factory"
        try:
            importlib.import_module(spec.partition(":")[0])
        except Exception as exc:  # ImportError, an empty name (ValueError), a module that fails as it loads
            raise SetupError(f"target {name!r}: cannot import {spec.partition(':')[0]!r} ({type(exc).__name__}: {exc}); "
                             "check the module is installed or on PYTHONPATH") from exc
    if spec is None:
        found = [ep for ep in entry_points(group="pairproof.targets") if ep.name == name]
        if not found:
            raise SetupError(f"unknown target {name!r}: choose one of {', '.join(names())} "
                             "(or install a driver that registers it under 'pairproof.targets')")
        return found[0].load()
    module, _, attr = spec.partition(":")
    factory = getattr(importlib.import_module(module), attr, None)
    if factory is None:
        raise SetupError(f"target {name!r}: module {module!r} has no {attr!r}; name its factory as module:factory")
    if not callable(factory):  # (every command reads factory.__module__ for its hooks: a str has none)
        raise SetupError(f"target {name!r} names {type(factory).__name__}, not a factory: give module:factory "
                         "where factory(options: TargetOptions) returns the driver")
    return factory


def default_profile(name: str) -> str | None:
    """The agent profile a target runs when none is given (a driver module's ``DEFAULT_PROFILE``; the suite's
    default, the reference agent, when it names none): ``--target hermes`` means the hermes agent."""
    factory = load(name)
    return getattr(importlib.import_module(factory.__module__), "DEFAULT_PROFILE", None)


def driver_module(name: str) -> str:
    """The module of ``name``'s driver (its factory's): what a verdict's ``driver`` hash is taken over."""
    return load(name).__module__


def image_id(name: str) -> str | None:
    """The id of the image ``name``'s instances are made from, as the run uses it (a driver's ``image_id()``:
    the docker target's, from ``--image`` or its reference agent image); None for a target without images,
    or when the image is not there to be named. Nothing is built or pulled."""
    factory = load(name)
    hook = getattr(importlib.import_module(factory.__module__), "image_id", None)
    return hook() if hook else None


def uses_images(name: str) -> bool:
    """Whether ``name``'s instances are made from an image (its driver names one: ``image_id()``)."""
    factory = load(name)
    return hasattr(importlib.import_module(factory.__module__), "image_id")


def pin_image(name: str) -> None:
    """Resolve the image ``name``'s instances will be made from to its id, building the driver's own if needed,
    and hand the id on (a driver's ``pin_image()``: it sets what its instances and ``image_id()`` use), so a tag
    moved while the run goes on changes neither its containers nor what its verdict names. Nothing for a target
    without images."""
    factory = load(name)
    hook = getattr(importlib.import_module(factory.__module__), "pin_image", None)
    if hook is not None:
        hook()


def preflight(name: str) -> list[str]:
    """What the machine lacks for this target, one fix-naming line each (a driver's ``preflight()``)."""
    factory = load(name)
    check = getattr(importlib.import_module(factory.__module__), "preflight", None)
    return list(check()) if check else []


def clean(name: str, state_dir: Path, *, include_live: bool = False) -> list[str]:
    """Remove what killed runs of this target left on the machine (a driver's ``clean(state_dir,
    include_live=...)``), one line per run removed or left alone; a driver without the hook leaves nothing."""
    factory = load(name)
    hook = getattr(importlib.import_module(factory.__module__), "clean", None)
    return list(hook(state_dir, include_live=include_live)) if hook else []


def measure(name: str, state_dir: Path, *, turns: int) -> dict:
    """One instance's footprint on this host beside the budget the platform admits with (a driver's
    ``measure(state_dir, turns=...)``): ``footprint_mb``, ``budget_in_force``, ``measured_budget``."""
    factory = load(name)
    hook = getattr(importlib.import_module(factory.__module__), "measure", None)
    if hook is None:
        raise SetupError(f"target {name!r} has no measure hook: its driver cannot measure its instances' footprint")
    return dict(hook(state_dir, turns=turns))
