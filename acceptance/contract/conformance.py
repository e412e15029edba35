"""``pairproof check-driver``: a conformance run for a driver, in seconds, not the suite.

It builds the driver as a qualification would (``TargetOptions``, a run of its own), checks the core with one
small real round trip per method, then the sandbox rules (``sandbox.RULES``, SBX-1..SBX-6: what the core cases
assume of a sandbox), then exercises each facet the driver claims (``registry.FACETS``: the driver has every
method of it) with the round trip its facet module holds (``facets/<group>.py``, ``round_trip``), and says
line by line: *works*, *missing* (with the cases that will be not covered for it) or *fails* (with the
error). It proves the driver is wired, not that the platform is isolated: that is what ``pairproof qualify``
judges.

Each step is a real call whose result is checked against the host where the host can see it: ``identity``
must agree with ``/proc`` for its ``host_pid`` and with what ``exec`` sees inside; a planted token must come
back through ``read_back``; a request id given to a turn must appear in the platform's own record; a sandbox
a broken arrangement started must be gone when the arrangement is left.

This module is the contract's one consumer of the rest of ``acceptance``, by two named arrows, both imported
where used: ``acceptance.catalogue`` (which cases need a facet, for a *missing* line and the docs' facets
table) and ``acceptance.harness.lab`` (a real lab, started only for ``broken_open_egress``).
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from acceptance.contract import sandbox
from acceptance.contract.checking import OTHER, OWNER, Checker, check, until_gone
from acceptance.contract.core import LOCATIONS, PROOF_NAMESPACES, Artifacts, Identity, InstanceRef
from acceptance.contract.facets import (
    broken,
    broker,
    capacity,
    credentials,
    lifecycle,
    logs,
    model,
    product,
    recovery,
    snapshots,
    startup,
    tools,
)
from acceptance.contract.facets.broken import Lab
from acceptance.contract.registry import CORE, FACETS, core_missing, facets_of

# facet -> its round trip (a broken arrangement's is ``broken.round_trip``, shared by all of them)
ROUND_TRIPS: dict[str, Callable[[Checker], str]] = {
    "lifecycle": lifecycle.round_trip, "credentials": credentials.round_trip, "broker": broker.round_trip,
    "model": model.round_trip, "snapshots": snapshots.round_trip, "recovery": recovery.round_trip,
    "tools": tools.round_trip, "product": product.round_trip, "capacity": capacity.round_trip,
    "platform_log": logs.round_trip, "startup": startup.round_trip,
}


@dataclass
class Result:
    name: str
    state: str  # works | missing | fails | not checked
    detail: str = ""
    seconds: float = 0.0
    steps: list[str] = field(default_factory=list)


def _identity_agrees(target, ref: InstanceRef) -> Identity:
    """``identity`` against the host's /proc for its host_pid, and against what ``exec`` sees inside (for the
    namespaces the suite's proofs rest on)."""
    ident = target.identity(ref)
    check(isinstance(ident, Identity), f"identity returned {type(ident).__name__}, not contract.Identity")
    status = Path(f"/proc/{ident.host_pid}/status").read_text(errors="replace")
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    host_uid = int(fields["Uid"].split()[0])
    check(host_uid == ident.uid, f"identity says uid {ident.uid}, /proc/{ident.host_pid}/status says {host_uid}")
    check(ident.namespaces, "identity names no namespaces")
    # The namespaces a probe's proof is checked against (PROOF_NAMESPACES): those exec must share.
    names = [ns for ns in PROOF_NAMESPACES if ns in ident.namespaces]
    check(names == list(PROOF_NAMESPACES), f"identity does not name the {', '.join(PROOF_NAMESPACES)} namespaces "
                                           f"(it names {', '.join(sorted(ident.namespaces))})")
    for ns in names:
        on_host = os.readlink(f"/proc/{ident.host_pid}/ns/{ns}")
        check(on_host == ident.namespaces[ns], f"identity says {ns} namespace {ident.namespaces[ns]}, /proc/"
                                               f"{ident.host_pid}/ns/{ns} is {on_host}")
    inside = target.exec(ref, ["readlink", *(f"/proc/self/ns/{ns}" for ns in names)], timeout=30)
    seen = inside.stdout.decode(errors="replace").split()
    check(inside.rc == 0 and seen == [ident.namespaces[ns] for ns in names],
          f"exec does not run in the namespaces identity names: inside {seen} (rc {inside.rc}), identity "
          f"{[ident.namespaces[ns] for ns in names]}")
    return ident


def core(c: Checker) -> str:
    """The core: one real round trip per method, each checked against the host where it can see it."""
    t = c.target
    check(isinstance(t.name, str) and t.name, "name is not a non-empty string")
    c.ref = ref = t.provision(OWNER)
    check(isinstance(ref, InstanceRef) and ref.principal == OWNER, f"provision returned {ref!r}")
    out = t.exec(ref, ["id"], timeout=30)
    check(out.rc == 0 and b"uid=" in out.stdout, f"exec id: rc {out.rc}, {out.stdout[:80]!r} {out.stderr[:80]!r}")
    ident = _identity_agrees(t, ref)
    reply = t.turn(ref, "hello")
    check(isinstance(reply, str), f"turn returned {type(reply).__name__}, not the reply text")
    for location in LOCATIONS:
        token = f"{c.token}{location}"
        t.plant(ref, location, token)
        back = t.read_back(ref, location)
        check(token in back, f"plant then read_back of {location}: the token did not come back ({back[:120]!r})")
    arts = t.artifacts()
    check(isinstance(arts, Artifacts) and Path(arts.state_dir).exists(),
          f"artifacts: {arts!r} (its state_dir must exist)")
    held = t.platform_secrets()
    check(isinstance(held, Mapping) and held and all(isinstance(v, str) and v for v in held.values()),
          "platform_secrets is not a non-empty mapping of names to secret strings")
    throwaway = t.provision(OTHER)
    pid = t.identity(throwaway).host_pid
    t.destroy(throwaway)
    until_gone(pid, "destroy")
    return (f"provision, exec id, identity = /proc/{ident.host_pid} and exec's namespaces, turn, plant + "
            f"read_back x{len(LOCATIONS)}, artifacts, platform_secrets ({len(held)}), destroy")


def close(c: Checker) -> str:
    """``close`` tears down everything: the checker's own instance's sandbox is gone after it."""
    pid = None
    if c.ref is not None:
        try:
            pid = c.target.identity(c.ref).host_pid
        except Exception:  # noqa: S110 (an instance a failed step left without a sandbox has no pid to watch)
            pid = None
    c.target.close()
    if pid is not None:
        until_gone(pid, "close")
        return f"everything torn down (the instance's sandbox {pid} is gone)"
    return "closed"


def _step(results: list[Result], say: Callable[[Result], None], name: str, body: Callable[[], str],
          prefix: str = "") -> Result:
    start = time.monotonic()
    try:
        detail, state = prefix + body(), "works"
    except Exception as exc:  # any failure of a round trip is the driver's, reported with its error
        frames = traceback.extract_tb(exc.__traceback__)
        # where the round trip failed, not the line of ``check`` that raised for it
        where = next((f for f in reversed(frames) if Path(f.filename).name != "checking.py"), frames[-1])
        detail = f"{prefix}{type(exc).__name__}: {exc} (at {Path(where.filename).name}:{where.lineno})"
        state = "fails"
    return _said(results, say, Result(name, state, detail, time.monotonic() - start))


def _said(results: list[Result], say: Callable[[Result], None], result: Result) -> Result:
    results.append(result)
    say(result)
    return result


@contextmanager
def _lab() -> Iterator[Callable[[], Lab]]:
    """The lab network, started only if a check needs it (``broken_open_egress``), torn down after."""
    made: list[tuple[object, Path]] = []

    def get() -> Lab:
        if not made:
            from acceptance.harness.lab import Lab as RealLab  # named arrow: the harness's lab (module docstring)

            workdir = Path(tempfile.mkdtemp(prefix="pairproof-lab-check-"))
            made.append((RealLab(workdir), workdir))
        return made[0][0]
    try:
        yield get
    finally:
        for lab, workdir in made:
            lab.close()
            shutil.rmtree(workdir, ignore_errors=True)


def cases_needing(facet: str) -> list[str]:
    from acceptance import catalogue  # named arrow: the catalogue says which cases need a facet (module docstring)

    return [c.id for c in catalogue.load().values() if facet in c.facets]


def run(target, say: Callable[[Result], None], *, start_command: str | None = None) -> list[Result]:
    """Check ``target`` (a built driver): the core, the sandbox rules, then facet by facet; closes it. One
    ``Result`` per line, core first, close last. ``start_command``: the profile's ``[start]`` process, which
    SBX-3 looks for among the sandbox's processes."""
    checker = Checker(target, f"ppcheck{secrets.token_hex(6)}", claimed=facets_of(target))
    results: list[Result] = []
    missing = core_missing(target)
    if missing:
        _said(results, say, Result("core", "missing", f"(no {', '.join(missing)}): every driver implements the "
                                                      f"core ({', '.join(CORE)})"))
    claimed = checker.claimed
    try:
        core_ok = not missing and _step(results, say, "core", lambda: core(checker)).state == "works"
        for rule, (what, body) in sandbox.RULES.items():
            if not core_ok:
                _said(results, say, Result(rule, "not checked", f"{what}: the core does not work"))
            elif rule == "SBX-3":
                _step(results, say, rule, lambda b=body: b(checker, start_command), f"{what}: ")
            else:
                _step(results, say, rule, lambda b=body: b(checker), f"{what}: ")
        for name, facet in FACETS.items():
            if name not in claimed:
                has = [m for m in facet.methods if hasattr(target, m)]
                lacking = [m for m in facet.methods if m not in has]
                needing = cases_needing(name)
                detail = (f"(no {', '.join(lacking)}{'; has ' + ', '.join(has) + ' alone' if has else ''}): "
                          + (f"{', '.join(needing)} will be not covered" if needing else "no case needs it"))
                _said(results, say, Result(name, "missing", detail))
            elif not core_ok:
                _said(results, say, Result(name, "not checked", "the core does not work"))
        if core_ok:
            with _lab() as lab:
                for name in claimed:
                    if name.startswith("broken_"):
                        _step(results, say, name, lambda n=name: broken.round_trip(checker, n, lab))
                    else:
                        _step(results, say, name, lambda n=name: ROUND_TRIPS[n](checker))
    finally:
        _step(results, say, "close", lambda: close(checker))
    return results


def facets_markdown() -> str:
    """The facets table of docs/writing-a-driver.md, from the registry and the catalogue (a test keeps the
    document equal to it): facet, its methods, what it lets the suite observe, the cases that need it."""
    rows = ["| facet | methods | what the suite observes through it | cases that need it |",
            "|---|---|---|---|"]
    for name, facet in FACETS.items():
        methods = ", ".join(f"`{m}`" for m in facet.methods)
        rows.append(f"| `{name}` | {methods} | {facet.description} | {', '.join(cases_needing(name)) or '-'} |")
    return "\n".join(rows)
