"""The authority matrix (issue 26, sweep 1): every authority artifact × every holder × every lifecycle point.

Class: *any authority artifact presented by anyone but its rightful holder, or after the transition that
retired it, is refused*. The sweep walks the owner's instance through every transition
(``harness.transitions.walk``); at each point it takes what the owner holds there (the artifacts), keeps
every one taken so far, and presents each of them as every holder can:

- ``A`` (the owner, on the platform side, where its broker presents them) and ``outside`` (a host-side
  direct call carrying nothing but the artifact): the model capability to the proxy (``model_call``), the
  grant to the product's agent door (the product client's credential replaced by it), the run-control key to
  the agent's API from inside the owner's own sandbox, where only it is reachable;
- ``B`` (same organization) and ``C`` (another one), from inside their own sandboxes: every artifact in the
  places an agent puts a credential, on every route its broker forwards (``judges.presented``, the MD-2
  sweep, reused), and every run-control key on every socket they can see (``judges.netprobes``, TL-4's
  knock); every snapshot id restored into their instance;
- ``operator``: every artifact through the operator's product client, in a header and the body, on the
  agent door.

What "works" means is judged by what was bought, never by the answer's words: a model call is found in the
provider's record under the request's id and for whom; a grant's ``notes_create`` left its marker in
somebody's notes; a run-control key got the answer the platform's own path gets; a restore returned.

Rightful = the artifact is the owner's *current* one (the value it holds at this point, and no transition
that retires its kind came since it was taken: ``Kind.retired_by``) at a point where the instance serves.
There it must work (the P cells: otherwise the sweep saw nothing and is broken, never passed); everywhere
else it must be refused. A kind whose value a retiring transition left unchanged is a finding by itself.

The completeness record names every (kind, holder, point) cell as attempted or not attemptable, and why;
a kind the contract exposes that the sweep does not know how to present is a ProofError.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from acceptance.cases.judges import netprobes, presented
from acceptance.contract import InstanceRef, Principal
from acceptance.errors import ProofError
from acceptance.harness.transitions import TRANSITIONS, Point
from acceptance.harness.wait import settle
from canaries.known import find_known

HOLDERS = ("A", "B", "C", "operator", "outside")
FENCE_DEADLINE = 2.0  # how long after a transition that ends serving the platform may take to fence (``_settle``)
RUNCTL_PROBE = "/v1/runs/run_doesnotexist"  # what ``runctl_probe.py`` knocks with
MODEL_BODY = {"model": "reference-main", "messages": [{"role": "user", "content": "authority sweep"}],
              "metadata": {"purpose": "turn"}}
# What B and C present from inside their sandboxes: the places an agent's client puts a key by default.
SANDBOX_PLACES = ("header Authorization: Bearer {}", "header x-api-key: {}")


@dataclass(frozen=True)
class Kind:
    """One kind of authority artifact: where the contract exposes it, and after which transitions one taken
    before is retired (refused even for its owner)."""

    name: str
    source: str
    retired_by: frozenset[str]


# Every kind the sweep knows how to present. ``capabilities()`` keys outside this table are a ProofError.
_CREDENTIAL = frozenset({"sleep", "recreate", "restore", "rotate", "recover"})  # a new lease or generation
KNOWN: dict[str, Kind] = {
    "grant": Kind("grant", "credentials.capabilities()", _CREDENTIAL),
    "model": Kind("model", "credentials.capabilities()", _CREDENTIAL),
    "runctl": Kind("runctl", "credentials.capabilities()", frozenset({"recreate", "restore", "recover"})),
    # A snapshot id is the owner's for good: no transition retires it, no one else may restore it.
    "snapshot": Kind("snapshot", "snapshots.snapshot()", frozenset()),
}
# What else a principal can hold and why this sweep does not present it as a kind of its own.
NOT_KINDS: dict[str, str] = {
    "lease": "not exposed by the contract on its own: it is inside the grant and the model capability, whose "
             "replay after each lease change is judged here",
    "session id": "the contract exposes none (the people and operator clients carry their tokens inside)",
    "snapshot key": "the contract exposes no snapshot key (snapshot_bytes is judged by SN-1)",
    "approval card": "held and judged by SH-1/SH-2 (judges.approvals); not replayed across transitions here",
    "spend allowance": "set_spend_cap is the platform's setting, not an artifact a principal presents",
    "request id": "a caller's correlation id, chosen by the caller: it buys nothing (every request here has one)",
}


@dataclass(frozen=True)
class Held:
    """One artifact of the owner, as taken at point ``taken`` (its index)."""

    kind: str
    value: str
    taken: int
    label: str  # e.g. "model@3" (taken after the 3rd transition)


@dataclass
class Matrix:
    """The cells (kind, holder, point index) -> what was done there; the findings; the P cells seen working."""

    owner: Principal
    kinds: list[str]
    points: list[str] = field(default_factory=list)
    cells: dict[tuple[str, str, int], str] = field(default_factory=dict)
    findings: list[str] = field(default_factory=list)
    worked: list[str] = field(default_factory=list)  # P cells: (kind, point) the owner's current artifact worked
    requests: int = 0

    def cell(self, kind: str, holder: str, point: int, what: str) -> None:
        key = (kind, holder, point)
        self.cells[key] = f"{self.cells[key]}; {what}" if key in self.cells else what

    def check(self, what: str) -> None:
        """Every kind × holder × point has a cell; every serving point saw each current kind work."""
        missing = [f"{k}/{h}/{p}" for k in self.kinds for h in HOLDERS for p in range(len(self.points))
                   if (k, h, p) not in self.cells]
        if not self.points or missing:
            raise ProofError(f"{what}: the authority matrix has no cell for {missing[:8]} ({len(missing)} of "
                             f"{len(self.kinds) * len(HOLDERS) * len(self.points)}): it did not sweep every cell")

    def record(self) -> dict[str, Any]:
        return {"owner": f"{self.owner.org}:{self.owner.user}", "kinds": self.kinds, "not kinds": NOT_KINDS,
                "holders": list(HOLDERS), "points": self.points, "requests": self.requests,
                "P cells worked": self.worked, "findings": self.findings,
                "cells": {f"{k} / {h} / {self.points[p]}": v for (k, h, p), v in sorted(self.cells.items())}}


def kinds_of(capabilities: Mapping[str, str], facets: Iterable[str]) -> list[str]:
    """The kinds the contract exposes for this target: every key ``capabilities`` names, and the snapshot id with
    the snapshots facet. A key the sweep cannot present is a ProofError (never skipped). Pure."""
    unknown = sorted(set(capabilities) - set(KNOWN))
    if unknown:
        raise ProofError(f"capabilities() names {unknown}: the authority sweep does not know how to present them "
                         f"(it knows {sorted(KNOWN)}); teach judges.authority, or the matrix misses them")
    return [*sorted(capabilities), *(["snapshot"] if "snapshots" in set(facets) else [])]


def rightful(held: Held, point: Point, current: Mapping[str, str], since: Sequence[str]) -> bool:
    """Whether ``held`` is its owner's current artifact at ``point``: the instance serves, the value is the one
    held there, and no transition of ``since`` (those after it was taken) retires its kind. Pure."""
    kind = KNOWN[held.kind]
    return (point.serving and current.get(held.kind) == held.value
            and not (kind.retired_by & set(since)))


def _marker(prefix: str) -> str:
    return f"authority {prefix}-{secrets.token_hex(5)}"


def _mcp(marker: str) -> dict:
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": presented.NOTE_TOOL, "arguments": {"body": marker}}}


class Sweep:
    """One owner, its intruders (B same org, C another org, both running throughout), and the operator."""

    def __init__(self, target: Any, owner: InstanceRef, intruders: Mapping[str, InstanceRef],
                 sandbox_host: Callable[[InstanceRef], Any], facets: Iterable[str],
                 sleepers: Mapping[str, InstanceRef] | None = None) -> None:
        """``intruders``: B's and C's running instances; ``sleepers``: an asleep instance of another user of
        each's organization, which the snapshot ids are restored into (a refused restore of a running instance
        stops and wakes it: a second each, at every point, for every id)."""
        self.target, self.owner, self.intruders, self.sandbox_host = target, owner, dict(intruders), sandbox_host
        self.sleepers = dict(sleepers or {})
        self.kinds = kinds_of(target.capabilities(owner), facets)
        self.matrix = Matrix(owner.principal, self.kinds)
        self.held: list[Held] = []
        self.transitions: list[str] = []  # the transitions taken so far, in order
        self.who = {f"{owner.principal.org}:{owner.principal.user}": "A",
                    **{f"{r.principal.org}:{r.principal.user}": n for n, r in self.intruders.items()}}

    # -- per point ---------------------------------------------------------------------------------------

    def at(self, point: Point) -> None:
        """Take what the owner holds at ``point``, then present everything taken so far as every holder can."""
        self.owner = point.ref
        self.transitions.append(point.transition)
        self.matrix.points.append(str(point))
        current = self._take(point)
        since = {h.label: self.transitions[h.taken + 1:] for h in self.held}
        for h in self.held:  # a retiring transition that left the value current: not retired at all
            if KNOWN[h.kind].retired_by & set(since[h.label]) and current.get(h.kind) == h.value:
                self.matrix.findings.append(f"{h.label}: still the {h.kind} held {point}, though "
                                            f"{sorted(KNOWN[h.kind].retired_by & set(since[h.label]))} retire it")
        expect = {h.label: rightful(h, point, current, since[h.label]) for h in self.held}
        # The value held here at a serving point must work, rightful or not (a kind a transition should have
        # retired and did not is a finding above, and still proves the path sees a working artifact).
        held_here = {h.label for h in self.held if point.serving and current.get(h.kind) == h.value}
        if not point.serving:
            self._settle(point)
        self._direct(point, expect, held_here)
        self._runctl_own(point, expect, held_here)
        self._operator(point)
        for name in ("B", "C"):
            self._from_sandbox(name, point)
            self._runctl_from(name, point)
            self._restore_from(name, point)
        self._snapshot_owner(point)

    def _take(self, point: Point) -> dict[str, str]:
        """What the owner holds here (nothing while the platform holds nothing for it), kept as new artifacts;
        at a serving point, also a snapshot id."""
        try:
            current = {k: v for k, v in dict(self.target.capabilities(point.ref)).items() if v}
        except Exception as exc:  # noqa: BLE001 (the platform holds nothing for an instance it does not run)
            if point.serving:
                raise ProofError(f"capabilities() of the serving owner {point}: {type(exc).__name__}: {exc}") from exc
            current = {}
        if point.serving and "snapshot" in self.kinds:
            current["snapshot"] = self.target.snapshot(point.ref)
        if point.serving and set(self.kinds) - set(current):
            raise ProofError(f"{point}: the owner holds no {sorted(set(self.kinds) - set(current))}: nothing to judge")
        known = {h.value for h in self.held}
        for kind, value in sorted(current.items()):
            if value not in known:
                self.held.append(Held(kind, value, point.index, f"{kind}@{point.index}"))
        return current

    def _judge(self, point: Point, kind: str, holder: str, label: str, worked: bool, expected: bool,
               how: str, held_here: bool = False) -> None:
        """One presentation's verdict; ``held_here``: the owner's value at this serving point, which must work
        (the P cell: else the path is dead and a refusal elsewhere proves nothing)."""
        self.matrix.cell(kind, holder, point.index, f"{label} {how}: {'works' if worked else 'refused'}")
        if worked and not expected:
            self.matrix.findings.append(f"{label} presented by {holder} {how} worked {point}")
        if holder == "A" and held_here:
            if not worked:
                raise ProofError(f"the owner's current {label} did not work {point} ({how}): the sweep cannot tell "
                                 "a refusal from a dead path, so it proves nothing")
            self.matrix.worked.append(f"{label} {point}")

    def _settle(self, point: Point) -> None:
        """A platform learns of some transitions (a crash) a moment after they happen: the last model
        capability taken gets up to ``FENCE_DEADLINE`` to stop buying calls before the matrix is judged (what
        works after that is judged as it stands)."""
        last = [h for h in self.held if h.kind == "model"][-1:]
        if not last:
            return
        status = settle(lambda: self.target.model_call(last[0].value, MODEL_BODY)[0], lambda s: s != 200,
                        deadline=FENCE_DEADLINE)
        self.matrix.cell("model", "A", point.index, f"{last[0].label} given {FENCE_DEADLINE:g}s to be fenced: "
                         f"{'refused' if status != 200 else 'still answered'}")

    def _direct(self, point: Point, expect: Mapping[str, bool], held_here: set[str]) -> None:
        """The model capability to the proxy and the grant to the product's agent door, from the host."""
        t = self.target
        rid = f"az{secrets.token_hex(4)}"
        asked: list[tuple[Held, str]] = []
        for n, h in enumerate(x for x in self.held if x.kind in ("model", "grant")):
            request_id = f"{rid}-{n}"
            if h.kind == "model":
                status, _ = t.model_call(h.value, MODEL_BODY, request_id=request_id)
                asked.append((h, request_id))
            else:
                marker = _marker(request_id)
                status, _ = t.person(self.owner.principal).request(
                    "POST", "/mcp", _mcp(marker), headers={"Authorization": f"Bearer {h.value}",
                                                           "X-Request-Id": request_id})
                asked.append((h, marker))
            self.matrix.requests += 1
        records = {r.get("request_id"): r for r in t.provider_records() if str(r.get("request_id", "")).startswith(rid)}
        notes = self._notes()
        for h, key in asked:
            if h.kind == "model":
                record = records.get(key)
                worked = record is not None
                buyer = self.who.get(str(record.get("user")), str(record.get("user"))) if record else ""
            else:
                buyer = notes.get(key, "")
                worked = bool(buyer)
            how = "on the platform side (direct)" + (f", bought for {buyer}" if buyer and buyer != "A" else "")
            self._judge(point, h.kind, "A", h.label, worked, expect[h.label], how, h.label in held_here)
            if expect[h.label]:
                self.matrix.cell(h.kind, "outside", point.index, f"{h.label}: not attemptable as a refusal (a "
                                 "bearer artifact on the platform side is its holder's request; what keeps it "
                                 "from the outside is where it is kept)")
            else:
                self._judge(point, h.kind, "outside", h.label, worked, False, "from the host (direct)")
        for kind in ("model", "grant"):
            if kind in self.kinds and not any(h.kind == kind for h, _ in asked):
                raise ProofError(f"{point}: no {kind} was presented on the platform side")

    def _notes(self) -> dict[str, str]:
        """marker -> whose notes hold it (A, B, C), as each person lists them."""
        found: dict[str, str] = {}
        for name, ref in (("A", self.owner), *self.intruders.items()):
            status, listing = self.target.person(ref.principal).request("GET", "/api/records?kind=note")
            if status != 200 or not isinstance(listing, dict):
                raise ProofError(f"the product did not list {name}'s notes ({status}): nothing to judge by")
            for note in listing.get("records") or []:
                body = str(note.get("body", ""))
                if body.startswith("authority "):
                    found[body] = name
        return found

    def _runctl_own(self, point: Point, expect: Mapping[str, bool], held_here: set[str]) -> None:
        """Every run-control key taken so far, knocked on every socket of the owner's own sandbox: the current
        one gets the platform path's answer from the agent's API, every other one is refused everywhere."""
        keys = [h for h in self.held if h.kind == "runctl"]
        if not keys:
            return
        if not point.serving:
            for holder in ("A", "outside"):
                self.matrix.cell("runctl", holder, point.index, "not attemptable: the agent's API is reachable only "
                                 "inside its running sandbox (none here)")
            return
        platform = self.target.runctl(self.owner, "GET", RUNCTL_PROBE)
        knocks = netprobes.runctl_knocks(self.sandbox_host(self.owner), {h.label: h.value for h in keys})
        self.matrix.requests += len(keys) * len(knocks)
        for h in keys:
            worked = any(_as_platform(a.get(h.label), platform) for a in knocks.values() if isinstance(a, dict))
            self._judge(point, "runctl", "A", h.label, worked, expect[h.label],
                        f"in the owner's sandbox, on {len(knocks)} sockets", h.label in held_here)
        self.matrix.cell("runctl", "outside", point.index, "not attemptable: the agent's API listens only in its "
                         "sandbox's network namespace (TL-4 knocks every socket B sees)")

    def _operator(self, point: Point) -> None:
        """Every artifact through the operator's product client, in x-api-key and the body, on the agent door."""
        operator = self.target.operator("authority-sweep")
        asked = []
        for h in self.held:
            if h.kind == "snapshot":
                continue
            marker = _marker(f"op{point.index}")
            body = {**_mcp(marker), **{n: h.value for n in presented.KEY_NAMES}}
            operator.request("POST", "/mcp", body, headers={"x-api-key": h.value})
            asked.append((h, marker))
            self.matrix.requests += 1
        notes = self._notes()
        for h, marker in asked:
            self._judge(point, h.kind, "operator", h.label, marker in notes, False,
                        "through the operator's product client (x-api-key, body)")
        for kind in self.kinds:
            if not any(h.kind == kind for h, _ in asked):
                why = ("the contract gives the operator no restore" if kind == "snapshot"
                       else "nothing of this kind taken yet")
                self.matrix.cell(kind, "operator", point.index, f"not attemptable: {why}")

    def _from_sandbox(self, name: str, point: Point) -> None:
        """Everything taken so far, presented from inside ``name``'s sandbox (the MD-2 sweep); a purchase for
        anyone but ``name`` is the finding."""
        ref = self.intruders[name]
        artifacts = [presented.Artifact(self.owner.principal, h.kind, h.value, h.label)
                     for h in self.held if h.kind != "snapshot"]
        sweep = presented.run(self.target, self.sandbox_host(ref), self.target.broker_endpoint(ref), ref.principal,
                              artifacts, [self.owner.principal], places=SANDBOX_PLACES)
        self.matrix.requests += len(sweep.requests)
        bought = {p.id for p, who in sweep.bought if who != f"{ref.principal.org}:{ref.principal.user}"}
        for h in self.held:
            if h.kind == "snapshot":
                continue
            mine = [p for p in sweep.requests if p.artifact.standing == h.label]
            worked = [p.show() for p in mine if p.id in bought]
            self.matrix.cell(h.kind, name, point.index, f"{h.label} from inside {name}'s sandbox, {len(mine)} "
                             f"requests: {'bought for another' if worked else 'bought nothing for another'}")
            self.matrix.findings += [f"{w} {point}: bought for another" for w in worked]

    def _runctl_from(self, name: str, point: Point) -> None:
        """Every run-control key of the owner taken so far, with ``name``'s own, knocked on every socket of its
        sandbox: its own key is answered as its platform path answers it (the knock sees), the owner's never."""
        keys = [h for h in self.held if h.kind == "runctl"]
        if not keys:
            return
        ref = self.intruders[name]
        own = self.target.capabilities(ref).get("runctl")
        platform = self.target.runctl(ref, "GET", RUNCTL_PROBE)
        knocks = netprobes.runctl_knocks(self.sandbox_host(ref), {"own": own or "", **{h.label: h.value for h in keys}})
        self.matrix.requests += (len(keys) + 1) * len(knocks)
        answers = [a for a in knocks.values() if isinstance(a, dict)]
        if not own or not any(_as_platform(a.get("own"), platform) for a in answers):
            raise ProofError(f"{name}'s own run-control key got the platform path's answer ({platform}) on no socket "
                             f"of its sandbox: the knock did not find its agent's API, so nothing could refuse")
        for h in keys:
            worked = any(_as_platform(a.get(h.label), platform) for a in answers)
            self._judge(point, "runctl", name, h.label, worked, False, f"from inside {name}'s sandbox")

    def _restore_from(self, name: str, point: Point) -> None:
        """Every snapshot id of the owner, restored into an instance of ``name``'s organization: refused, every one."""
        if "snapshot" not in self.kinds:
            return
        if name not in self.sleepers:
            raise ProofError(f"the authority sweep has no instance of {name}'s organization to restore into")
        for h in (x for x in self.held if x.kind == "snapshot"):
            try:
                self.sleepers[name] = self.target.restore(h.value, into=self.sleepers[name])
                worked = True
            except Exception:  # noqa: BLE001 (the contract's refusal is an error; which one is SN-2's to judge)
                worked = False
            self.matrix.requests += 1
            self._judge(point, "snapshot", name, h.label, worked, False,
                        f"restored into {self.sleepers[name].principal.name}'s instance (asleep)")
        if not any(h.kind == "snapshot" for h in self.held):
            self.matrix.cell("snapshot", name, point.index, "not attemptable: no snapshot taken yet")

    def _snapshot_owner(self, point: Point) -> None:
        if "snapshot" not in self.kinds:
            return
        why = ("not attemptable: the contract has no restore but the platform's own (taken here as B's and C's "
               "request into their instance)")
        self.matrix.cell("snapshot", "outside", point.index, why)
        if point.transition == "restore":
            self.matrix.cell("snapshot", "A", point.index, "the walk restored the owner's own snapshot into it: works")
            self.matrix.worked.append(f"snapshot {point}")
        else:
            self.matrix.cell("snapshot", "A", point.index, "not attempted here: a restore is itself a transition "
                             "(a new generation); the walk's restore is the owner's cell")

    def kept(self, visible_bytes: Callable[..., bytes]) -> dict[str, Any]:
        """Where the artifacts are kept, only the holder's side reads them: every grant, model capability and
        run-control key taken in the walk is searched for (in every encoding ``find_known`` knows) in all that
        B's and C's sandboxes can see, and in the owner's own; there, its current run-control key (its agent
        checks it) must be found, the proof that the search sees a key where one is, and nothing else."""
        secret = {h.value: h.label for h in self.held if h.kind != "snapshot"}
        own = self.target.capabilities(self.owner).get("runctl") if "runctl" in self.kinds else None
        seen: dict[str, list[str]] = {}
        for name, ref in (("A", self.owner), *self.intruders.items()):
            # A finding stands even where the dump missed something: any key but the owner's own in its sandbox.
            findings = set(secret) - ({own} if name == "A" else set())
            found = {value for value, _ in find_known(visible_bytes(ref, findings), set(secret))}
            seen[name] = sorted(secret[v] for v in found)
        if own is not None and secret.get(own) not in seen["A"]:
            raise ProofError(f"the owner's current run-control key ({secret.get(own)}) is not found in its own "
                             "sandbox, where its agent checks it: the search does not see keys where they are")
        allowed = {secret.get(own)} if own is not None else set()
        for name, labels in seen.items():
            self.matrix.findings += [f"{label} is readable in {name}'s sandbox" for label in labels
                                     if not (name == "A" and label in allowed)]
        return {"searched for": sorted(secret.values()), "found": seen, "the owner's own key (expected there)":
                sorted(allowed - {None})}

    def finish(self, what: str) -> Matrix:
        """The matrix, judged complete: every cell, a P cell seen working at every serving point per kind."""
        m = self.matrix
        m.check(what)
        serving = [p for p, (_, state) in zip(m.points, TRANSITIONS) if state == "running"]
        for kind in self.kinds:
            if kind == "snapshot":
                continue
            seen = [w for w in m.worked if w.startswith(f"{kind}@")]
            if len(seen) < len(serving):
                raise ProofError(f"{what}: the owner's current {kind} worked at {len(seen)} of {len(serving)} serving "
                                 f"points: the sweep did not see it work everywhere it must")
        return m


def _as_platform(answer: object, platform: tuple[int, Any]) -> bool:
    """Whether a knock's answer is the one the platform's own run-control path got (the key was admitted)."""
    if not isinstance(answer, dict):
        return False
    body = answer.get("body")
    if isinstance(body, str):
        try:
            body = json.loads(body)
        except ValueError:
            pass
    return (str(answer.get("status")), body) == (str(platform[0]), platform[1])
