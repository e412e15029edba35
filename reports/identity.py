"""What a verdict judged, by hash: the runtime, the suite, the case catalogue, the driver, the agent profile and
the image (issue 27 item 1). The plugin records it in the verdict (``judged``); ``pairproof gate`` recomputes it
from the source it runs from and what it is told (``--target``, ``--profile``, ``--image``) and refuses a verdict
whose hashes differ: a verdict of another suite, catalogue, target, profile or image can pass no gate.

Every part is a sha256 over files, never over names or versions a file claims:

- ``runtime``: every file of the ``runtime`` package (the platform);
- ``suite``: every file of ``acceptance`` and ``canaries`` (the cases, the harness, the drivers, the profiles);
- ``catalogue``: ``acceptance/catalogue.toml``, the cases a verdict is judged against;
- ``driver``: the folder of the driver's module (``acceptance/targets/docker/`` for ``docker``);
- ``profile``: the agent profile's file, every file it names (start files, managed file and schema), and every
  file of the agent's installed software it binds in (hermes-agent's venv: about a second);
- ``probe``: the static probe binary the scans run (or the fallback's name);
- ``image``: the image id the run's containers were made from (the docker target, pinned by id before the run;
  null for a target without images).

Names inside a digest are relative (to a package's folder, the profile's folder, a bound folder), so the same
files hash alike in a checkout, in each tox env's site-packages and in another CI workspace. The plugin takes
the identity as the run starts and again as it ends, and fails a run whose source changed under it.

The module locates packages without importing them (``importlib.util.find_spec``), so it works the same in the
plugin, the gate and a test, and imports nothing of the runtime.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path

PARTS = ("target", "runtime", "suite", "catalogue", "driver", "profile", "probe", "image")
SUITE_PACKAGES = ("acceptance", "canaries")
# Compiled files are not source (they are made from it wherever it is imported). Nothing else is left out: a
# file under a hashed root that pytest or Python could load is in the digest, whatever its folder is called.
_NOT_SOURCE = {"__pycache__"}


def tree_digest(*roots: Path) -> str:
    """sha256 over every file under ``roots`` (each file's path relative to its root, then its bytes'
    sha256), in path order."""
    digest = hashlib.sha256()
    for root in roots:
        files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix != ".pyc"
                       and not _NOT_SOURCE & set(p.relative_to(root).parts))
        for path in files:
            name = f"{root.name}/{path.relative_to(root).as_posix()}"
            digest.update(name.encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def files_digest(named: Mapping[str, Path]) -> str:
    """sha256 over files, each under a name that does not depend on where the tree lies (a checkout, a tox env's
    site-packages, another CI workspace), sorted by name, then their bytes' sha256."""
    digest = hashlib.sha256()
    for name in sorted(named):
        digest.update(name.encode() + b"\0" + hashlib.sha256(Path(named[name]).read_bytes()).digest())
    return digest.hexdigest()


def package_dir(name: str) -> Path:
    """Where ``name`` (a package) is imported from, without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise LookupError(f"package {name!r} is not importable here")
    return Path(list(spec.submodule_search_locations)[0])


def module_folder(module: str) -> Path:
    """The folder holding ``module``'s file (a driver's package: its module, breakers, image builder...)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        raise LookupError(f"module {module!r} is not importable here")
    return Path(spec.origin).parent


def source() -> dict[str, str]:
    """The parts every target shares: runtime, suite and case catalogue, as Python imports them here."""
    acceptance = package_dir("acceptance")
    return {"runtime": tree_digest(package_dir("runtime")),
            "suite": tree_digest(*(package_dir(p) for p in SUITE_PACKAGES)),
            "catalogue": hashlib.sha256((acceptance / "catalogue.toml").read_bytes()).hexdigest()}


def profile_digest(profile) -> str:
    """The agent profile's file and the files it names (by their path relative to the profile's folder), and every
    file of the folders it binds in (the agent's installed software: hermes-agent's venv, about a second)."""
    base = Path(profile.path).resolve().parent
    files = [Path(profile.path), *map(Path, profile.files)]
    for key in ("file", "schema"):
        if profile.managed.get(key):
            files.append(Path(str(profile.managed[key])))
    named = {}
    for path in files:
        path = path.resolve()
        if path.is_file():
            named[os.path.relpath(path, base)] = path
    binds = [f"{inside}={tree_digest(Path(folder))}" for inside, folder in sorted(profile.binds.items())
             if Path(folder).is_dir()]
    return hashlib.sha256((files_digest(named) + "\n" + "\n".join(binds)).encode()).hexdigest()


def probe_digest() -> str:
    """The static probe every scan runs (``PAIRPROOF_PROBE``, else the checkout's build), by its bytes; or the
    name of the fallback when there is none (the scans then run ``detect.py``, which the suite's hash covers)."""
    named = os.environ.get("PAIRPROOF_PROBE")
    path = Path(named) if named else package_dir("acceptance").parent / "build" / "probe" / "ppscan"
    if path.is_file():
        return hashlib.sha256(path.read_bytes()).hexdigest()
    return "none: detect.py"


def of_run(target: str, driver_module: str, profile, image: str | None) -> dict[str, str | None]:
    """Every part a verdict names (``PARTS``), for a run of ``target`` (its driver's module), ``profile`` (an
    ``AgentProfile``) and ``image`` (an image id, or None)."""
    return {"target": target, **source(), "driver": tree_digest(module_folder(driver_module)),
            "profile": profile_digest(profile), "probe": probe_digest(), "image": image}


def _short(part: str, value: object) -> str:
    return "none" if value is None else str(value) if part == "target" else str(value)[:19]


def recompute(target: str, profile: str | None = None) -> dict[str, str | None]:
    """What a verdict of ``target`` with ``profile`` (a name or path; the target's own by default) made from this
    source names: what the gate and ``pairproof expect`` compare a verdict's ``judged`` with. The image is the
    driver's (``--image`` reaches it as for qualify). A bad target or profile: the registry's SetupError."""
    from acceptance import targets
    from acceptance.errors import SetupError
    from acceptance.targets.profiles import load as load_profile

    targets.load(target)
    image = targets.image_id(target)
    if image is None and targets.uses_images(target):
        raise SetupError(f"target {target}: the image to compare the verdict with is not in the local engine: give "
                         "--image with the image qualified (or build the reference agent image again)")
    return of_run(target, targets.driver_module(target), load_profile(profile or targets.default_profile(target)),
                  image)


def mismatches(recorded: Mapping[str, object] | None, recomputed: Mapping[str, object]) -> list[str]:
    """One line per part the verdict recorded otherwise than recomputed here (none: it judged this)."""
    if not isinstance(recorded, Mapping):
        return ["it names nothing of what it judged (no `judged`: made by an older pairproof, or edited)"]
    lines = []
    for part in PARTS:
        got, want = recorded.get(part), recomputed.get(part)
        if got != want:
            lines.append(f"{part}: the verdict judged {_short(part, got)}, this is {_short(part, want)}")
    return lines
