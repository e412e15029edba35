"""The contract's core: the records that cross it and the ``Target`` every driver implements.

The records (``Principal``, ``InstanceRef``, ``Identity``, ``ExecResult``, ``Artifacts``) are what the suite
and a driver hand each other; ``Target`` is the core every driver implements whole, ``ExecBinary`` the one
optional core method (the suite falls back to ``exec`` without it). The facets, the registry that names
them and the per-case view live beside this module (``facets/``, ``registry.py``, ``view.py``); this one
knows nothing of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class Principal:
    """Someone the platform serves: ``A`` (org1 owner), ``B`` (same org), ``C`` (other org)."""

    name: str
    org: str
    user: str


@dataclass(frozen=True)
class InstanceRef:
    """A handle the target gives out; the suite treats ``key`` as opaque."""

    principal: Principal
    key: str
    generation: int = 1


@dataclass(frozen=True)
class Identity:
    """What the host sees of a running sandbox: the ground truth a probe's proof is checked against."""

    host_pid: int
    uid: int
    gid: int
    uid_map: str
    namespaces: Mapping[str, str]


# The namespaces a probe's proof compares (DESIGN §5 rule 2): ``identity`` must name each of them, as the
# host's /proc shows them for its ``host_pid``, and ``exec`` must run in every one of them.
PROOF_NAMESPACES = ("mnt", "pid", "net", "user", "uts", "ipc")


@dataclass(frozen=True)
class ExecResult:
    rc: int
    stdout: bytes
    stderr: bytes


@dataclass(frozen=True)
class Artifacts:
    """Where scanners may look after (or during) a run."""

    state_dir: Path
    volumes: Mapping[str, Path] = field(default_factory=dict)
    logs: Sequence[Path] = ()
    # Files or folders that hold principals' data by design, each with why (the product's database, an instance's
    # journal, a file another case judges whole): the host at-rest sweep (``harness.restsweep``) lists them and
    # reads around them, and reads everything else the platform wrote.
    stores: Mapping[Path, str] = field(default_factory=dict)


class ProductClient(Protocol):
    def request(self, method: str, path: str, body: Mapping[str, object] | None = None,
                headers: Mapping[str, str] | None = None) -> tuple[int, object]:
        """One call; the status and the parsed JSON (or the text of an HTML answer)."""


# Where a canary may be planted in an instance; each is reached through the product's own path.
LOCATIONS = ("memory", "transcript", "task", "volume")


@runtime_checkable
class Target(Protocol):
    """The core: every driver implements all of it."""

    name: str

    def provision(self, principal: Principal, *, memory_limit_mb: int | None = None,
                  settings: Mapping[str, object] | None = None, request_id: str = "") -> InstanceRef:
        """Create the instance for the principal's (org, user) pair and wake it, ready for turns.

        ``memory_limit_mb``: the sandbox's memory limit instead of the platform's default (RS-1 sets it).
        ``settings``: the user's own agent settings, taken as ``ToolSurface.configure`` takes them (through the
        product's path, exactly as given), in place before the agent's first start, so that no restart is
        needed. The harness passes them for TS-2 and, for an agent whose profile's ``[background]`` names
        settings, for MD-3 and MD-4; ``None`` (the default) starts the agent with none of the user's own. A
        driver whose platform cannot put them in place before the first start raises ``TargetError`` saying
        so when given any, rather than start an agent under other settings than the case asked for."""

    def destroy(self, ref: InstanceRef) -> None: ...

    def exec(self, ref: InstanceRef, argv: Sequence[str], *, stdin: bytes | None = None,
             timeout: float = 60.0) -> ExecResult:
        """Run ``argv`` inside the instance's sandbox as the agent would run it."""

    def identity(self, ref: InstanceRef) -> Identity:
        """What the host sees of the sandbox; ``host_pid`` is a process in its namespaces (the lab
        captures in its network namespace through it)."""

    def turn(self, ref: InstanceRef, message: str, *, request_id: str = "") -> str:
        """One agent turn; the reply text. ``request_id`` goes with every call the turn makes (the provider's
        record of its model calls names it)."""

    def plant(self, ref: InstanceRef, location: str, token: str) -> None:
        """Put ``token`` in the instance's ``location`` (one of LOCATIONS) through the product's path."""

    def read_back(self, ref: InstanceRef, location: str) -> str:
        """The owner's own view of ``location``, through the product's path."""

    def platform_secrets(self) -> Mapping[str, str]:
        """Secrets the platform holds outside every sandbox (provider key, grants): must never be inside."""

    def artifacts(self) -> Artifacts: ...

    def close(self) -> None:
        """Tear down everything the target created."""


@runtime_checkable
class ExecBinary(Protocol):
    """Optional core: run a host file inside the sandbox by descriptor (``OPTIONAL_CORE``).

    Not a facet (no case declares it, every case may use it); a driver without it is probed with
    ``exec`` and the sandbox's own interpreter instead, and the scan's record says so."""

    def exec_binary(self, ref: InstanceRef, host_path: str, args: Sequence[str], *,
                    env: Mapping[str, str] | None = None, stdin: bytes | None = None,
                    timeout: float = 60.0, hold: bool = True, by_name: bool = False) -> ExecResult:
        """Open ``host_path`` on the host and execute that open file inside the instance's sandbox (its
        namespaces, its uid, its root and mounts) with ``args`` after the program name and ``env`` added
        to the sandbox's environment, never copying it into the sandbox's filesystem: the image run is the
        host's file, and what it sees is the sandbox's. Every process of the instance is stopped from before it
        starts until it has ended (PB-1: nothing of the agent's may read or alter it while it runs).

        ``hold=False``: the instance keeps running (the suite's shell probes act on the live agent); the file
        is mode 0711, so the kernel runs it non-dumpable and the agent can neither trace it nor read its
        environment or memory. ``by_name``: its argv[0] ends in the file's own name (the suite's shell is a
        multi-call busybox, which picks its program by that name). A driver whose ``exec_binary`` does not take
        these keywords has its shell probes run by ``exec`` with the sandbox's own ``/bin/sh``, and the
        probe's record says so."""


