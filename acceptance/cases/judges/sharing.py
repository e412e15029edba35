"""FS-2's write-then-look over every shared place (``shared_probe.py`` inside, the judging here), used alike
by the refusal and its controls.

The intruder writes a fresh marker in every place its own mount table says it can write (and makes System V
IPC objects keyed by it); the owner looks for that marker in the same paths and in every place of its own; the
intruder then removes what it made. The refusal runs it both ways (``both_ways``): the owner writes and the
intruder looks too, so a folder writable on one side and only readable on the other is seen. What is judged:
- ``required_problems``: the places tried must include /tmp and the home, written: a write-then-look that
  did not write there proved nothing (the case is broken, not passed); and each side's walk under its mount
  points must be complete (``walk_problems``): a walk that stopped at its limit, or could not list a folder
  for a reason other than a denial or the folder going, did not look everywhere (broken, with the reason);
- ``shared_findings``: every marker the owner saw, every IPC object of the intruder's in the owner's
  /proc/sysvipc, every folder the intruder wrote (or file mount it could open for writing) that has the
  same identity (``dev:ino``) as one of the owner's, and one IPC namespace for both.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from acceptance.errors import ProofError

PROBE = Path(__file__).resolve().parents[1] / "inside" / "shared_probe.py"
HOME = "/data"
REQUIRED = ("/tmp", HOME)
SYSV = ("shm", "msg", "sem")
# Why a folder may go unlisted without the walk being incomplete: a denial (what this uid cannot list it cannot
# see or write under either, but through a name it already knows), or the folder gone meanwhile.
ACCEPTED_UNLISTED = ("errno 1", "errno 2", "errno 13", "errno 20")


def run(host, *args: str) -> dict:
    quoted = " ".join(host.backend.quote("%s", a) for a in args)
    out = host.backend.run_with_stdin(f"/usr/bin/python3 -I -S - {quoted}", stdin=PROBE.read_bytes())
    try:
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise ProofError(f"the shared-place probe ({args[0]}) gave no report (rc {out.rc}): {out.stderr[-300:]!r}") from None


@dataclass(frozen=True)
class Exchange:
    """One write-then-look: what the writer made (``wrote``) and what the looker saw (``looked``)."""

    writer: str
    looker: str
    wrote: Mapping
    looked: Mapping

    def evidence(self) -> dict:
        return {"places tried by " + self.writer: self.wrote["places"], "System V IPC made": self.wrote["sysv"],
                f"what {self.looker} saw": {"markers": self.looked["seen"], "sysv": self.looked["sysv_seen"]},
                "walks (completeness)": {f"{self.writer} writing": self.wrote.get("walk"),
                                         f"{self.looker} looking": self.looked.get("walk")},
                "ipc namespaces": {self.writer: self.wrote["ipc_ns"], self.looker: self.looked["ipc_ns"]}}


def exchange(writer_host, looker_host, writer: str, looker: str) -> Exchange:
    """The writer writes a fresh marker everywhere it can, the looker looks, the writer cleans up (whatever
    happened); a place the cleaning could not empty is an error of the harness."""
    marker = secrets.token_hex(8)
    wrote: dict = {}
    try:
        wrote = run(writer_host, "write", marker)
        looked = run(looker_host, "look", marker, *wrote["places"])
    finally:
        left = run(writer_host, "clean", marker, *wrote.get("places", {}))["left"]
    if left:
        raise ProofError(f"the shared-place probe could not remove its markers from {writer}: {left}")
    return Exchange(writer, looker, wrote, looked)


def walk_problems(report: Mapping, who: str, what: str) -> list[str]:
    """Why one side's walk under its mount points did not look everywhere: no completeness record, a walk cut
    at its limit, a folder it could not list for a reason other than a denial or the folder going, or one it
    could not list but may search."""
    walk = report.get("walk")
    if not isinstance(walk, Mapping):
        return [f"{who}'s {what} gave no completeness record of its walk"]
    problems = []
    if walk.get("cut"):
        problems.append(f"{who}'s {what} stopped its walk at {walk.get('limit')} folders under {sorted(walk['cut'])}: "
                        "the folders after are unseen")
    odd = {p: why for p, why in (walk.get("unlisted") or {}).items() if why not in ACCEPTED_UNLISTED}
    if odd:
        problems.append(f"{who}'s {what} could not list {len(odd)} folders for a reason other than a denial: "
                        f"{dict(sorted(odd.items())[:5])}")
    searchable = sorted(set(walk.get("searchable") or ()) - set(odd))
    if searchable:
        problems.append(f"{who}'s {what} could not list {len(searchable)} folders it may search (a place under one "
                        f"is reachable by a name the walk cannot see): {searchable[:5]}")
    return problems


def required_problems(ex: Exchange) -> list[str]:
    """Why this write-then-look proves nothing: /tmp or the home not tried, or not written; either side's
    walk incomplete."""
    problems = walk_problems(ex.wrote, ex.writer, "write") + walk_problems(ex.looked, ex.looker, "look")
    for path in REQUIRED:
        entry = ex.wrote["places"].get(path)
        if entry is None:
            problems.append(f"{ex.writer} did not try {path}")
        elif not entry.get("wrote"):
            problems.append(f"{ex.writer} could not write its own {path} ({entry.get('error', '?')})")
    return problems


def require(ex: Exchange) -> None:
    problems = required_problems(ex)
    if problems:
        raise ProofError("the write-then-look proves nothing: " + "; ".join(problems))


def shared_findings(ex: Exchange) -> list[str]:
    """Every way the looker saw what the writer made, or shares a place or the IPC namespace with it."""
    findings = [f"a file {ex.writer} wrote in its {p} is visible to {ex.looker} at {p}"
                if p in ex.wrote["places"] else f"a file {ex.writer} wrote is visible to {ex.looker} at {p}"
                for p in ex.looked["seen"]]
    findings += [f"the System V {kind} object {ex.writer} made (key {ex.wrote['key']}) is in {ex.looker}'s "
                 f"/proc/sysvipc/{kind}" for kind in ex.looked["sysv_seen"]]
    theirs: dict[str, list[str]] = {}
    for path, ident in ex.looked["places"].items():
        theirs.setdefault(ident, []).append(path)
    for path, entry in ex.wrote["places"].items():
        if (entry.get("wrote") or entry.get("opened")) and entry.get("id") in theirs:
            what = "file" if entry.get("opened") else "folder"
            findings.append(f"{ex.writer}'s {path} is the same {what} ({entry['id']}) as {ex.looker}'s "
                            + ", ".join(sorted(theirs[entry["id"]])))
    if ex.wrote["ipc_ns"] == ex.looked["ipc_ns"]:
        findings.append(f"{ex.writer} and {ex.looker} share one IPC namespace ({ex.wrote['ipc_ns']})")
    return findings


def both_ways(writer_host, looker_host, writer: str, looker: str) -> tuple[Exchange, Exchange]:
    """The write-then-look in both directions: the intruder writes and the owner looks, then the owner writes
    and the intruder looks. One direction alone misses a place one side may write and the other only read (a
    folder read-write in A and read-only in B: B reads what A keeps there; read-only in A: A reads what B
    plants), since a side writes only where its own mount table says it can."""
    return (exchange(writer_host, looker_host, writer, looker),
            exchange(looker_host, writer_host, looker, writer))


def findings_both_ways(exchanges: Sequence[Exchange]) -> list[str]:
    """``shared_findings`` of a pair's exchanges; the exchanges must run both ways between the same two
    sandboxes, or a one-way share could go unseen. A finding is an observation (a marker found, a folder the
    same) and stands whatever else the looks missed; only an empty answer needs every exchange ``require``d: a
    walk cut short elsewhere (the host's /tmp bound in, with folders the walk may not list) must not turn the
    share it did see into an unjudged case."""
    pairs = {(ex.writer, ex.looker) for ex in exchanges}
    if not pairs or any((b, a) not in pairs or a == b for a, b in pairs):
        raise ProofError(f"the write-then-look did not run both ways between two sandboxes: {sorted(pairs)}")
    findings: list[str] = []
    for ex in exchanges:
        findings += [f for f in shared_findings(ex) if f not in findings]
    if not findings:
        for ex in exchanges:
            require(ex)
    return findings


def unseen_own(ex: Exchange) -> list[str]:
    """For the owner's own exchange (writer and looker the same): what it wrote and did not find again. Every
    place written and every IPC object made must be seen, and at least /tmp, the home and the three IPC
    kinds must have been made, or the look is blind."""
    missing = [f"{p} (written, not seen)" for p, e in ex.wrote["places"].items()
               if e.get("wrote") and p not in ex.looked["seen"]]
    missing += [f"System V {k} ({ex.wrote['sysv'][k]})" for k in SYSV
                if ex.wrote["sysv"].get(k) != "ok" or k not in ex.looked["sysv_seen"]]
    return required_problems(ex) + missing
