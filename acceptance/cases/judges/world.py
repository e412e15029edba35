"""WD-1's sweep: everything an observer can observe, taken at one point of the owner's lifecycle walk, compared
against what the owner owns (issue 26, sweep 2; DESIGN §5 rule 9).

An observer is another principal's instance (B, C) or the operator's client of the people's API. Its world is
read channel by channel, each enumerated whole and from the host where the host is the better witness:

- ``fs``: the whole-visible-filesystem scan from inside its sandbox (``probes.scan``, judged complete there);
- ``processes``: every process in its pid namespace, as the host lists it, with its command line, environment
  and name read from the host;
- ``sockets``: every socket of its network namespace (``/proc/<pid>/net/{unix,tcp,tcp6,udp,udp6}``, read through
  a process in it) and every socket file its mount namespace can reach on a device where the owner has one;
- ``routes``: every route of the product (``product_routes``) behind the observer's door, filled with every record
  id the owner's activity created (enumerated from the owner's side), and every run-control route with every run
  id of the owner's, through the observer's own broker;
- ``listings``: the routes without a record id (the observer's listings: records, cards, audit);
- ``tools``: the agent's door: in its turn at this point the observer's own agent calls the product's read
  tools with every record id of the owner's (interleaved with listings, so no agent gives up on a run of
  refusals), through its own broker; every tool result, as the agent passed it on to its model, is scanned;
- ``model``: every request of the observer's principal the provider recorded, whole (prompt, history, tools),
  after the observer made a turn at this point.

What is the owner's (``OwnerFacts``) is taken from the owner's side at the same point: its canaries, its host
processes, the sockets its processes hold and its network namespace lists, its path-bound sockets' files, its
record ids and run ids. A channel reports what it enumerated (a count and a unit), what it could not and why,
and what of the owner's it found. ``WorldRecord.check`` is the completeness judgement: a required channel that
enumerated nothing (no route, no process, no socket, no provider record after a turn) raises ProofError. The P
control observes the owner's own world the same way and must find the owner's things in each channel.

What it cannot see: the owner's data in a form that is not canary-shaped (the scanners' limits); a socket file
of the owner's on a device the owner's namespace does not list (a socket bound by a process outside it); the
operator's own routes (they serve the owner's records to operators by design, each audited for the owner:
OP-1 and OP-2 judge them) are left out and the record says so.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from acceptance.cases.judges import holders
from acceptance.contract import InstanceRef, Principal
from acceptance.errors import ProofError, TargetError
from acceptance.harness import observers
from canaries import detect
from canaries.detect import walk_tree

CHANNELS = ("fs", "processes", "sockets", "routes", "listings", "tools", "model")
# The run-control routes an agent serves (TL-4's set: start, read, events, stop), by run id.
RUN_ROUTES = (("GET", "/v1/runs/{run}"), ("GET", "/v1/runs/{run}/events"), ("POST", "/v1/runs/{run}/stop"))
NET_TABLES = {"tcp": 9, "tcp6": 9, "udp": 9, "udp6": 9, "unix": 6}  # table -> column of the socket's inode
# Mounts whose filesystem cannot hold a socket file bound by a process of another sandbox.
_NO_SOCKET_FS = {"proc", "sysfs", "cgroup", "cgroup2", "devpts", "mqueue", "securityfs", "debugfs", "tracefs",
                 "bpf", "pstore", "configfs", "fusectl", "hugetlbfs"}


@dataclass
class Channel:
    """One channel of one observer at one point: ``enumerated`` things of ``unit``, the owner's ``found``
    among them, what ``could_not`` be enumerated and why. ``required``: enumerating nothing is a ProofError."""

    name: str
    unit: str
    enumerated: int = 0
    found: list[str] = field(default_factory=list)
    could_not: list[str] = field(default_factory=list)
    required: bool = True


@dataclass(frozen=True)
class Observer:
    """Who observes: ``ref`` is its instance (None for the operator, whose world is the people's API it holds a
    client of); ``client`` is its people's-API client; ``door`` the routes' door it opens ("person")."""

    name: str
    principal: Principal | None
    ref: InstanceRef | None
    client: Any


@dataclass(frozen=True)
class OwnerFacts:
    """What is the owner's at one point, from the owner's side."""

    principal: Principal
    tokens: frozenset[str]
    pids: frozenset[int]
    sockets: frozenset[int]
    socket_files: frozenset[tuple[int, int, int]]
    records: tuple[int, ...]
    runs: tuple[str, ...]
    notes: tuple[str, ...] = ()
    # The records of ``records`` only the owner may see (audience ``private``): an observer served one of these
    # is a sighting; a team record of the owner's is the team's to see, and is only tried as a route's id.
    private: frozenset[int] = frozenset()


# -- the owner's side ------------------------------------------------------------------------------------

def _held_sockets(pids: Iterable[int]) -> set[int]:
    """Socket inodes among the descriptors of ``pids`` (the host's view, ``/proc/<pid>/fd``)."""
    found = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue  # exited since listed
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                found.add(int(link[8:-1]))
    return found


def netns_sockets(host_pid: int) -> dict[int, str]:
    """{socket inode: "table local-address"} of every socket in ``host_pid``'s network namespace, as the kernel
    lists them for that namespace (an inode of 0, a TCP connection in TIME_WAIT, holds nothing)."""
    found: dict[int, str] = {}
    for table, column in NET_TABLES.items():
        try:
            lines = Path(f"/proc/{host_pid}/net/{table}").read_text(errors="replace").splitlines()[1:]
        except FileNotFoundError:
            continue  # a kernel without IPv6
        for line in lines:
            fields = line.split()
            if len(fields) > column and fields[column].isdigit() and int(fields[column]):
                name = fields[7] if table == "unix" and len(fields) > 7 else fields[1]
                found[int(fields[column])] = f"{table} {name}"
    return found


def owner_facts(target: Any, ref: InstanceRef, tokens: Iterable[str], runs: Iterable[str],
                known_private: Iterable[int] = ()) -> OwnerFacts:
    """The owner's things at this point: its records and cards (its people's API), and, while it has a sandbox,
    its processes, the sockets they hold or its network namespace lists, and its path-bound sockets' files.
    ``known_private``: records private at an earlier point, which stay the owner's (a platform that widens a
    record's audience on a transition is what the sweep looks for, not a new truth)."""
    principal, notes = ref.principal, []
    person = target.person(principal)
    status, body = person.request("GET", "/api/records")
    if status != 200:
        raise ProofError(f"the owner's own listing of its records answered {status}: its record ids are unknown")
    mine = [r for r in body["records"] if (r.get("org"), r.get("owner")) == (principal.org, principal.user)]
    records = {r["id"] for r in mine}
    private = {r["id"] for r in mine if r.get("audience") == "private"} | set(known_private)
    status, body = person.request("GET", "/api/approvals")
    if status != 200:
        raise ProofError(f"the owner's own listing of its approval cards answered {status}")
    records |= {c["id"] for c in body["cards"]}
    pids: set[int] = set()
    sockets: set[int] = set()
    files: set[tuple[int, int, int]] = set()
    try:
        ident = target.identity(ref)
    except TargetError as exc:
        notes.append(f"the owner has no sandbox at this point ({exc}): no process or socket of its to compare")
    else:
        pids = {p.pid for p in observers.members(ident.namespaces, kinds=("pid",))}
        sockets = _held_sockets(pids) | set(netns_sockets(ident.host_pid))
        try:
            files = set(holders.vfs_index(ident.host_pid))
        except (TargetError, OSError, ValueError) as exc:
            notes.append(f"the owner's path-bound sockets could not be listed: {exc}")
    return OwnerFacts(principal, frozenset(tokens), frozenset(pids), frozenset(sockets), frozenset(files),
                      tuple(sorted(records)), tuple(runs), tuple(notes), frozenset(private))


# -- the observer's channels -----------------------------------------------------------------------------

def _tokens(data: bytes, owner: OwnerFacts) -> set[str]:
    """The owner's canaries in ``data``, in every encoding the detector decodes."""
    return {hit.token for hit in detect.find(data)} & owner.tokens


def fs_channel(scan: Callable[[InstanceRef], tuple[set[str], int]], ref: InstanceRef, owner: OwnerFacts) -> Channel:
    tokens, files = scan(ref)  # the scan judges its own completeness (ProofError) before it returns
    return Channel("fs", "files", files, sorted(tokens & owner.tokens))


def process_channel(ref_pid: int, namespaces: Mapping[str, str], owner: OwnerFacts) -> Channel:
    channel = Channel("processes", "processes")
    procs = observers.members(namespaces, kinds=("pid",))
    channel.enumerated = len(procs)
    for p in procs:
        if p.pid in owner.pids:
            channel.found.append(f"pid {p.pid} ({p.comm}) is the owner's")
        blob = b""
        for part in ("cmdline", "environ"):
            try:
                blob += Path(f"/proc/{p.pid}/{part}").read_bytes() + b"\n"
            except OSError as exc:
                if Path(f"/proc/{p.pid}").exists():
                    channel.could_not.append(f"pid {p.pid} {part}: {exc.strerror}")
        channel.found += [f"pid {p.pid} ({p.comm}): {t}" for t in sorted(_tokens(blob + p.comm.encode(), owner))]
    if not any(p.pid == ref_pid for p in procs):
        raise ProofError(f"the host lists {len(procs)} processes in the observer's pid namespace, not its own "
                         f"sandbox pid {ref_pid}: the listing is not of its namespace")
    return channel


def _mounts(pid: int) -> list[tuple[str, str, str]]:
    """(major:minor, mount point, filesystem type) of each mount of ``pid``'s mount namespace."""
    found = []
    for line in Path(f"/proc/{pid}/mountinfo").read_text(errors="replace").splitlines():
        left, _, right = line.partition(" - ")
        fields = left.split()
        found.append((fields[2], fields[4].replace("\\040", " "), right.split()[0] if right else ""))
    return found


def socket_channel(host_pid: int, owner: OwnerFacts) -> Channel:
    """Sockets of the observer's network namespace, and socket files its mount namespace reaches: every mount on
    a device where the owner has a path-bound socket is walked whole (the owner's socket file can be nowhere
    else: a file lives on one device); the others are counted and named as not walked, with that reason."""
    channel = Channel("sockets", "sockets")
    table = netns_sockets(host_pid)
    channel.enumerated = len(table)
    channel.found += [f"socket {ino} ({what}) is the owner's" for ino, what in sorted(table.items())
                      if ino in owner.sockets]
    devices = {f"{major}:{minor}" for major, minor, _ in owner.socket_files}
    skipped = 0
    root = f"/proc/{host_pid}/root"
    for device, point, fstype in _mounts(host_pid):
        if fstype in _NO_SOCKET_FS or device not in devices:
            skipped += 1
            continue
        for dirpath, dirnames, filenames in walk_tree(root + point):
            for name in [*filenames, *dirnames]:
                try:
                    info = os.lstat(os.path.join(dirpath, name))
                except OSError:
                    continue  # gone between the listing and the look
                if stat.S_ISSOCK(info.st_mode):
                    channel.enumerated += 1
                    if (os.major(info.st_dev), os.minor(info.st_dev), info.st_ino) in owner.socket_files:
                        inside = os.path.join(dirpath, name)[len(root):]
                        channel.found.append(f"socket file {inside} is the owner's")
    if skipped:
        channel.could_not.append(f"{skipped} mounts not walked for socket files: no socket file of the owner's is "
                                 "on their device or filesystem type")
    return channel


def concrete(template: str, value: str) -> str:
    """A real path for a route template: each group gets ``value``."""
    return re.sub(r"\([^)]*\)", lambda _: value, template).replace("\\", "")


def served_records(answer: object, owner: Principal) -> set[int]:
    """Ids of every record of the owner anywhere in an answer: a JSON object with an id, its org and owner."""
    found: set[int] = set()
    stack = [answer]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("id"), int) and (node.get("org"), node.get("owner")) == (owner.org, owner.user):
                found.add(node["id"])
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return found


def _seen(answer: object, owner: OwnerFacts) -> list[str]:
    text = answer if isinstance(answer, str) else json.dumps(answer, sort_keys=True)
    served = served_records(answer, owner.principal) & owner.private
    return sorted(_tokens(text.encode(), owner)) + [f"private record {i}" for i in sorted(served)]


def route_channels(target: Any, observer: Observer, owner: OwnerFacts) -> tuple[Channel, Channel]:
    """``routes`` (every person route with a record id, filled with every record id of the owner's, and every
    run-control route with every run id of the owner's) and ``listings`` (every person route without one), each
    called as the observer. The operator's own routes are left out, named in ``could_not``."""
    routes, listings = Channel("routes", "requests"), Channel("listings", "requests")
    table = target.product_routes()
    left_out = [f"{m} {t} ({door})" for m, t, door in table if door != "person"]
    if left_out:
        routes.could_not.append(f"routes of other doors not called as a person ({len(left_out)}: the agent's door is "
                                f"reached through the observer's own agent, the 'tools' channel; the operator's "
                                f"serves records to operators by design, audited for the owner, judged by "
                                f"OP-1/OP-2): {left_out}")
    for method, template, door in table:
        if door != "person":
            continue
        body = {"title": "wd", "body": "wd"} if method == "POST" else None
        if "(" not in template:
            status, answer = observer.client.request(method, template, body)
            listings.enumerated += 1
            listings.found += [f"{method} {template} ({status}): {s}" for s in _seen(answer, owner)]
            continue
        for record in owner.records:
            path = concrete(template, str(record))
            status, answer = observer.client.request(method, path, body)
            routes.enumerated += 1
            routes.found += [f"{method} {path} ({status}): {s}" for s in _seen(answer, owner)]
    if observer.ref is None:
        routes.could_not.append("run-control routes: the operator holds no run-control key")
    else:
        for run in owner.runs:
            for method, template in RUN_ROUTES:
                path = template.format(run=run)
                status, answer = target.runctl(observer.ref, method, path, {} if method == "POST" else None)
                routes.enumerated += 1
                routes.found += [f"run-control {method} {path} ({status}): {s}" for s in _seen(answer, owner)]
    if not owner.records:
        raise ProofError("the owner has no record: no route could be filled with one of its ids")
    return routes, listings


# Observer's turn: (observer, owner) -> the tool calls its agent was scripted to make with the owner's ids.
Turn = Callable[[Observer, OwnerFacts], int]


def tool_results(records: Iterable[Mapping[str, Any]]) -> list[str]:
    """The tool results an agent passed on to its model in these provider records (``role: tool`` messages, or
    ``tool_result`` blocks), each once."""
    found: dict[str, None] = {}
    for r in records:
        body = r.get("body") if isinstance(r.get("body"), dict) else {}
        for m in body.get("messages") or []:
            if not isinstance(m, dict):
                continue
            if m.get("role") == "tool":
                found[json.dumps(m.get("content"), sort_keys=True)] = None
            elif isinstance(m.get("content"), list):
                for block in m["content"]:
                    if isinstance(block, dict) and block.get("type") == "tool_result":
                        found[json.dumps(block.get("content"), sort_keys=True)] = None
    return list(found)


def _parsed(text: str) -> object:
    try:
        inner = json.loads(text)
        return json.loads(inner) if isinstance(inner, str) else inner
    except ValueError:
        return text


def model_channels(target: Any, observer: Observer, owner: OwnerFacts, turn: Turn) -> tuple[Channel, Channel]:
    """``tools`` and ``model``: the observer makes its turn (``turn``: its agent calls the product's tools with
    the owner's ids), then every tool result of the turn and every request of its principal the provider
    recorded are scanned whole; the turn must have added a request (else its requests are not what the
    provider recorded) and, when it made tool calls, results of them."""
    principal = observer.principal
    assert principal is not None and observer.ref is not None
    user = f"{principal.org}:{principal.user}"
    before = sum(1 for r in target.provider_records() if r.get("user") == user)
    calls = turn(observer, owner)
    mine = [r for r in target.provider_records() if r.get("user") == user]
    tools = Channel("tools", "tool results", required=calls > 0)
    results = tool_results(mine[before:])
    tools.enumerated = len(results)
    if calls and len(results) < calls:
        tools.could_not.append(f"{calls} tool calls scripted, {len(results)} distinct results reached the model "
                               "(identical refusals count once)")
    for text in results:
        tools.found += [f"tool result: {s}" for s in _seen(_parsed(text), owner)]
    channel = Channel("model", "provider records", len(mine))
    if len(mine) <= before:
        raise ProofError(f"{observer.name} made a turn but the provider recorded no new request of {user} "
                         f"({before} before, {len(mine)} after): its model requests were not observed")
    missing = [r.get("seq") for r in mine if "body" not in r]
    if missing:
        channel.could_not.append(f"records without the request body: {missing[:10]}")
    for r in mine:
        channel.found += [f"provider record {r.get('seq')}: {t}" for t in
                          sorted(_tokens(json.dumps(r, sort_keys=True).encode(), owner))]
    joined = "\n".join(json.dumps(r.get("body"), sort_keys=True) for r in mine).encode()
    channel.found += [f"provider records joined: {t}" for t in sorted(_tokens(joined, owner))
                      if not any(t in f for f in channel.found)]
    return tools, channel


def observe(target: Any, observer: Observer, owner: OwnerFacts, scan: Callable[[InstanceRef], tuple[set[str], int]],
            turn: Turn, only: Iterable[str] = CHANNELS) -> dict[str, Channel]:
    """The channels ``only`` (all by default) of ``observer``'s world, against ``owner``. The operator has no
    sandbox and makes no model request: its fs, processes, sockets and model channels are recorded as not
    applicable, not as empty."""
    only = tuple(only)
    channels: dict[str, Channel] = {}
    if {"routes", "listings"} & set(only):
        channels["routes"], channels["listings"] = route_channels(target, observer, owner)
    if observer.ref is None:
        for name in ("fs", "processes", "sockets", "tools", "model"):
            channels[name] = Channel(name, "-", required=False,
                                     could_not=["not applicable: the operator's people's-API client has none"])
    else:
        ident = target.identity(observer.ref)
        sweeps = {"fs": lambda: fs_channel(scan, observer.ref, owner),
                  "processes": lambda: process_channel(ident.host_pid, ident.namespaces, owner),
                  "sockets": lambda: socket_channel(ident.host_pid, owner),
                  }
        for name, sweep in sweeps.items():
            if name in only:
                channels[name] = sweep()
        if {"tools", "model"} & set(only):
            channels["tools"], channels["model"] = model_channels(target, observer, owner, turn)
    return {name: channels[name] for name in CHANNELS if name in only}


@dataclass
class WorldRecord:
    """The sweep's record: per point, per observer, per channel."""

    views: list[dict[str, Any]] = field(default_factory=list)

    def add(self, point: str, observer: str, channels: Mapping[str, Channel], owner: OwnerFacts) -> None:
        self.views.append({"point": point, "observer": observer, "owner_notes": list(owner.notes),
                           "owner": {"tokens": len(owner.tokens), "pids": len(owner.pids),
                                     "sockets": len(owner.sockets), "socket_files": len(owner.socket_files),
                                     "records": len(owner.records), "private": len(owner.private),
                                     "runs": len(owner.runs)},
                           "channels": {n: asdict(c) for n, c in channels.items()}})

    def sightings(self) -> list[str]:
        """Every thing of the owner's found in an observer's world: ``point: observer/channel: what``."""
        return [f"{v['point']}: {v['observer']}/{name}: {what}" for v in self.views
                for name, c in v["channels"].items() for what in c["found"]]

    def check(self, what: str) -> None:
        """A required channel that enumerated nothing did not look: ProofError, never a pass."""
        empty = [f"{v['point']}: {v['observer']}/{name}" for v in self.views for name, c in v["channels"].items()
                 if c["required"] and c["enumerated"] == 0]
        if empty:
            raise ProofError(f"{what}: these channels enumerated nothing where something must exist: {empty[:12]}")

    def counts(self) -> dict[str, dict[str, int]]:
        """{observer/channel: {point: enumerated}}: the completeness figures at a glance."""
        out: dict[str, dict[str, int]] = {}
        for v in self.views:
            for name, c in v["channels"].items():
                out.setdefault(f"{v['observer']}/{name}", {})[v["point"]] = c["enumerated"]
        return out
