"""The ``startup`` facet: a cold start of an instance traced from the host (every file its processes opened,
or tried to, from the launcher's first instruction to ready), with the platform's own record of the files it
wrote for that start; and its check-driver round trip.

The trace is what TS-4 judges (``acceptance/cases/judges/startup_inputs.py``): a file the agent reads while
starting that it could have written itself is an authority the agent grants itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from acceptance.contract.checking import Checker, check
from acceptance.contract.core import InstanceRef


@dataclass(frozen=True)
class Opened:
    """One open of a file by a process of the start, as the host's tracer saw it: the path inside the sandbox
    (absolute), the open's flags as the tracer wrote them (``O_RDONLY|O_CLOEXEC``), its result (``ok``, or the
    errno's name: a file looked for and not found is an input the agent could create), and for a folder whether
    its entries were read."""

    path: str
    flags: str
    result: str
    listed: bool = False  # a folder whose entries the process read (getdents), not only opened (an fsync, a base)

    @property
    def reads(self) -> bool:
        """Opened to read what was there before (a folder listed counts): an input. Not one: write-only, a new
        file (``O_EXCL``: it must not exist) or one emptied as it opens (``O_TRUNC``)."""
        return not any(flag in self.flags.split("|") for flag in ("O_WRONLY", "O_EXCL", "O_TRUNC"))

    @property
    def directory(self) -> bool:
        return "O_DIRECTORY" in self.flags


@dataclass(frozen=True)
class StartTrace:
    """A traced cold start. ``ref``: the instance as it came up; ``opened``: every open of the start, in order;
    ``written``: the platform's record of what it wrote for this start (path inside -> sha256 of the bytes);
    ``persistent``: the folders inside the sandbox whose content outlives a start (the volume, the control folder;
    everything else is made anew at each start); ``state``: the paths the agent keeps its own state at by
    design (memory, transcript, tasks: agent-written, and read back, by intent); ``tracer``: how it was traced."""

    ref: InstanceRef
    opened: tuple[Opened, ...]
    written: Mapping[str, str]
    persistent: tuple[str, ...]
    state: tuple[str, ...]
    tracer: str


@runtime_checkable
class Startup(Protocol):
    """A cold start traced from the host."""

    def trace_cold_start(self, ref: InstanceRef) -> StartTrace:
        """Stop the instance (sleep) and start it again cold, tracing from the host every file its processes open
        (or try to) from the launcher's first instruction until it is ready; answer the trace. The instance is
        left running (``StartTrace.ref``)."""


def round_trip(c: Checker) -> str:
    """A traced cold start comes up, and its trace holds opens under the agent's home."""
    trace = c.target.trace_cold_start(c.ref)
    check(trace.opened, "trace_cold_start traced no open at all")
    check(any(o.path.startswith(tuple(trace.persistent)) for o in trace.opened),
          f"trace_cold_start saw no open under the persistent folders {list(trace.persistent)}")
    out = c.target.exec(trace.ref, ["true"], timeout=30)
    check(out.rc == 0, f"exec after a traced cold start: rc {out.rc}")
    return f"trace_cold_start ({len(trace.opened)} opens, {len(trace.written)} platform-written, by {trace.tracer})"
