"""The startup-inputs judge: every file an agent reads while it starts, judged by who could have written it.

Class (issue 26): *a startup input the agent can write is an authority the agent grants itself*. Whatever an
agent reads as it starts (a profile pointer, an env file, a user config, a tool-server list, a skills or
plugins folder) decides what it is at the next start; if the agent's own uid may write it, one turn of the
agent's own tools re-decides its tool surface, its model or its managed layer, and the platform's pins hold
only until the next cold start. The judge takes a cold start traced from the host (the ``startup`` facet's
``StartTrace``: every open of every process from the launcher's first instruction to ready, found or not)
and asks, inside the sandbox as the agent's uid, of each path read under a folder that outlives a start:

- the agent's declared state (``StartTrace.state``: memory, transcript, tasks, and a database's ``-wal``,
  ``-shm``, ``-journal`` beside it) is the agent's by design: recorded, not judged;
- a file the platform wrote for this very start (``StartTrace.written``) passes if it still holds the bytes the
  platform recorded; other bytes are a finding;
- anything else passes only if the agent's uid can neither write it nor replace it (its folder writable and it
  not a mount point) nor, for a file looked for and not found, create it (its nearest existing folder
  writable); a folder listed at start (skills, plugins, hooks: its entries read, ``getdents``) likewise, by
  whether the uid can add to it. A folder only opened (a base for ``openat``, an ``fsync``) is no input
  itself: what is opened through it is.

A path read outside those folders is judged the same way where it is also reachable inside one of them: a
bind mount whose source lies in the volume (the sandbox's mount table says so: same device, root under the
volume's), such as a managed file bound read-only from a copy the agent can replace.

Completeness: every path is listed with its class; a path the probe could not classify is named with why.
A trace with no open at all, or none under a persistent folder, is a ProofError (the tracer saw nothing of
the agent's home), never a pass. What it cannot see: inputs read without an ``open`` (``stat`` alone, an
environment variable, a socket), and files read only after ready (a turn's own reads are judged by TS-2).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from acceptance.contract import StartTrace
from acceptance.errors import ProofError

SIDECARS = ("-wal", "-shm", "-journal")  # a database's files beside it: its state too
# One line per path read from stdin: exists, writable, nearest existing folder writable, that folder, sha256
# of a readable file (``/`` for a folder, ``-`` otherwise), the path. Run as the agent's uid inside its sandbox.
PROBE = r'''
while IFS= read -r p; do
  if [ -e "$p" ] || [ -L "$p" ]; then e=1; else e=0; fi
  if [ -w "$p" ]; then w=1; else w=0; fi
  d=$(dirname -- "$p"); while [ ! -e "$d" ]; do d=$(dirname -- "$d"); done
  if [ "$e" = 1 ] && [ "$d" = "$p" ]; then d=$(dirname -- "$p"); fi
  if [ -w "$d" ]; then dw=1; else dw=0; fi
  if [ -f "$p" ] && [ -r "$p" ]; then h=$(sha256sum < "$p" | cut -d' ' -f1); elif [ -d "$p" ]; then h=/; else h=-; fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$e" "$w" "$dw" "$d" "$h" "$p"
done
'''


@dataclass
class Judged:
    """The judgement of one traced start: ``findings`` (path -> why the agent could have decided it) and the
    completeness record (every path read, by class)."""

    findings: dict[str, str] = field(default_factory=dict)
    classes: dict[str, list[str]] = field(default_factory=dict)
    unclassified: dict[str, str] = field(default_factory=dict)
    opens: int = 0

    def record(self) -> dict:
        return {"opens traced": self.opens, "paths read, by class": self.classes,
                "could not classify": self.unclassified, "findings": self.findings}


def _under(path: str, folders: Sequence[str]) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def _state(path: str, state: Sequence[str]) -> bool:
    return any(path == s or path in (s + x for x in SIDECARS) for s in state)


def _mounts(mountinfo: str) -> list[tuple[str, str, str]]:
    """The sandbox's mounts as (mount point, device, root within the device), from /proc/self/mountinfo."""
    table = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) > 4:
            table.append((fields[4], fields[2], fields[3]))
    return table


def _alias(path: str, table: list[tuple[str, str, str]], persistent: Sequence[str]) -> str | None:
    """Where ``path`` (outside the persistent folders) is also reachable under one of them: a bind mount whose
    source lies in a persistent folder's source (same device, root under its root), such as a read-only file
    bound from the volume. None if nowhere."""
    holding = [m for m in table if _under(path, [m[0]])]
    if not holding:
        return None
    point, device, root = max(holding, key=lambda m: len(m[0]))
    source = root.rstrip("/") + path[len(point.rstrip("/")):]
    for folder in persistent:
        for p_point, p_device, p_root in table:
            if p_point == folder and p_device == device and _under(source, [p_root]):
                return folder.rstrip("/") + source[len(p_root.rstrip("/")):]
    return None


def judge(trace: StartTrace, run_as_agent: Callable[[str, bytes], tuple[int, bytes]]) -> Judged:
    """Judge ``trace``; ``run_as_agent(script, stdin)`` runs a shell script in the instance's sandbox as its
    agent's uid and answers (rc, stdout)."""
    out = Judged(opens=len(trace.opened))
    if not trace.opened:
        raise ProofError(f"the traced cold start recorded no open at all ({trace.tracer}): nothing was seen")
    if not any(o.flags == "EXEC" and o.result == "ok" for o in trace.opened):
        # Held at its gate, the launcher's first act once let go is an exec: a trace without one was attached
        # after the start began, and what the agent read before that is not in it.
        raise ProofError(f"the traced cold start shows no program run ({trace.tracer}): the tracer attached after "
                         "the start's first instruction, so what was read before it is not seen")
    reads: dict[str, bool] = {}  # path -> listed (a folder whose entries were read)
    for o in trace.opened:
        if o.reads:
            reads[o.path] = reads.get(o.path, False) or o.listed

    def put(kind: str, path: str) -> None:
        out.classes.setdefault(kind, []).append(path)

    rc, mounts = run_as_agent("cat /proc/self/mountinfo", b"")
    table = _mounts(mounts.decode(errors="replace")) if rc == 0 else []
    if not table:
        raise ProofError(f"the sandbox's mount table could not be read (rc {rc}): {mounts[:300]!r}")
    mount_points = {point for point, _, _ in table}
    judged = []
    aliases: dict[str, str] = {}  # a path inside the persistent folders -> the path it was read as
    for path in sorted(reads):
        alias = path if _under(path, trace.persistent) else _alias(path, table, trace.persistent)
        if alias is None:
            put("outside the persistent folders (the image, /usr, /etc, /proc, /tmp, the launcher's own host paths: "
                "bound or made anew at each start)", path)
        elif _state(alias, trace.state):
            put("the agent's declared state", path)
        else:
            judged.append(alias)
            if alias != path:
                aliases[alias] = path
                reads[alias] = reads[path]
    if not any(_under(p, trace.persistent) for p in reads):
        raise ProofError(f"the traced start read nothing under {list(trace.persistent)}: the tracer did not see "
                         f"the agent's home ({len(reads)} paths read elsewhere)")
    if not judged:
        return out
    rc, raw = run_as_agent(PROBE, "".join(p + "\n" for p in judged).encode())
    if rc != 0:
        raise ProofError(f"the writability probe failed in the sandbox (rc {rc}): {raw[:300]!r}")
    seen = {}
    for line in raw.decode(errors="replace").splitlines():
        parts = line.split("\t")
        if len(parts) == 6:
            seen[parts[5]] = parts[:5]
    for path in judged:
        if path in aliases:
            put(f"read as {aliases[path]}, a mount whose source is here", path)
        if path not in seen:
            out.unclassified[path] = "the probe gave no line for it"
            continue
        exists, writable, folder_writable, folder, digest = seen[path]
        if path in trace.written:
            if digest == trace.written[path]:
                put("written by the platform for this start", path)
            else:
                out.findings[path] = (f"the platform wrote it for this start, but it holds other bytes now "
                                      f"(sha256 {digest[:12]}, the platform's {trace.written[path][:12]})")
            continue
        if digest == "/" and not reads[path]:
            put("folder opened, its entries never read (a base for lookups, an fsync): what it holds is judged "
                "as it is opened", path)
            continue
        what = "folder listed" if digest == "/" else "file"
        if exists == "0":
            if folder_writable == "1":
                out.findings[path] = f"{what} looked for at start and not found: the agent can create it ({folder} is writable)"
            else:
                put("unwritable by the agent's uid", path)
        elif writable == "1":
            out.findings[path] = f"{what} read at start is writable by the agent's uid"
        elif folder_writable == "1" and path not in mount_points:
            out.findings[path] = f"{what} read at start can be replaced by the agent's uid ({folder} is writable)"
        else:
            put("unwritable by the agent's uid", path)
    return out


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
