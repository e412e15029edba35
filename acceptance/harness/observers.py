"""Host-side observers: what the host itself shows of the sandboxes, read from /proc and cgroupfs.

A driver's answers about the platform (is it running, how many instances are resident, where is the
broker) are claims; these functions look for themselves, so a case can cross-check a claim against the
host. They read only the kernel's views (``/proc/<pid>/{stat,status,ns,cgroup,net}``, ``cgroup.procs``)
and import nothing of the runtime: a driver for any platform on this host is observed the same way.

What they cannot see: processes in another pid namespace than ours that the host does not show (none on
one Linux host: the initial pid namespace sees all), and a platform whose sandboxes run on another host.
``sandboxes`` sees only the descendants of one process (the run's own sandboxes, not another run's on the
same machine); a case that relies on it says so, and checks first that it sees the instance at all.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

# Cases wait for what they observe with ``observe.settle`` (the harness's one deadline loop lives in wait.py).
from acceptance.harness.wait import settle as settle
from canaries.detect import walk_tree

PROC = Path("/proc")
NAMESPACES = ("user", "pid", "mnt", "net", "uts", "ipc", "cgroup")
# The namespaces that make a sandbox one (a probe entered with nsenter shares both).
SANDBOX_KEY = ("user", "pid")


@dataclass(frozen=True)
class HostProcess:
    """One process as the host sees it."""

    pid: int
    ppid: int
    uid: int
    comm: str
    namespaces: Mapping[str, str]


def process(pid: int, proc: Path = PROC) -> HostProcess | None:
    """``pid`` as the host sees it, or None if it is gone (or unreadable) by the time we look."""
    base = proc / str(pid)
    try:
        # Text with its bytes kept readable: the name in both is whatever the process set (any 15 bytes).
        stat = (base / "stat").read_text(errors="replace")
        status = (base / "status").read_text(errors="replace")
        namespaces = {}
        for ns in NAMESPACES:
            try:
                namespaces[ns] = os.readlink(base / "ns" / ns)
            except FileNotFoundError:
                continue  # a kernel without this namespace kind
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    comm, _, rest = stat.rpartition(")")
    fields = rest.split()
    uid = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("Uid:"))
    return HostProcess(pid, int(fields[1]), uid, comm.partition("(")[2], namespaces)


def processes(proc: Path = PROC) -> list[HostProcess]:
    """Every process the host shows (those that exit while we read are left out)."""
    found = []
    for entry in proc.iterdir():
        if entry.name.isdigit() and (p := process(int(entry.name), proc)) is not None:
            found.append(p)
    return found


def descendants(root: int, among: Iterable[HostProcess]) -> list[HostProcess]:
    """The processes below ``root`` (not ``root`` itself), by parent links."""
    children: dict[int, list[HostProcess]] = {}
    for p in among:
        children.setdefault(p.ppid, []).append(p)
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child.pid)
    return found


def members(namespaces: Mapping[str, str], among: Iterable[HostProcess] | None = None,
            kinds: tuple[str, ...] = SANDBOX_KEY) -> list[HostProcess]:
    """The processes in the instance's namespaces (all of ``kinds``): the instance, as the host sees it,
    whoever started them and whatever the driver thinks runs there."""
    wanted = {k: namespaces[k] for k in kinds}
    return [p for p in (processes() if among is None else among)
            if all(p.namespaces.get(k) == v for k, v in wanted.items())]


# The run's own cgroup folder (``/pairproof/<run>/`` in every hierarchy): the suite's fixture names it from
# the run id it gave the target (``watch_run_cgroup``), not the driver. A sandbox a container engine's daemon
# starts is no descendant of this process, but its processes sit in that folder (the reference runtime puts
# every sandbox there, whichever its engine).
_RUN_CGROUPS: list[str] = []


def watch_run_cgroup(run: str, parent: str = "pairproof") -> None:
    """Count the processes in the cgroup folder of ``run`` among the sandboxes below this process."""
    _RUN_CGROUPS.append(f"/{parent}/{run}/")


def _in_run_cgroup(pid: int, proc: Path) -> bool:
    return any(path.startswith(folder) for path in cgroups(pid, proc).values() for folder in _RUN_CGROUPS)


def sandboxes(root: int | None = None, proc: Path = PROC) -> dict[frozenset[str], list[HostProcess]]:
    """The sandboxes below ``root`` (default: this process): its descendants in a user or pid namespace
    other than ``root``'s (launchers, helpers and the lab's sinks share ours), joined into one sandbox when
    they share such a namespace (a launcher that entered the user namespace before forking into the pid
    namespace belongs with its child). Each is keyed by the namespaces of its own that it holds. The
    processes in the run's cgroup folder (``watch_run_cgroup``) count as below it too."""
    root = os.getpid() if root is None else root
    procs = processes(proc)
    own = next((p for p in procs if p.pid == root), None)
    if own is None:
        raise LookupError(f"process {root} is gone: no sandboxes to observe below it")
    mine = {own.namespaces.get(k, "") for k in SANDBOX_KEY}
    parent: dict[str, str] = {}

    def top(ns: str) -> str:
        while parent[ns] != ns:
            parent[ns] = parent[parent[ns]]
            ns = parent[ns]
        return ns

    below = descendants(root, procs)
    if _RUN_CGROUPS:
        seen = {p.pid for p in below}
        below += [p for p in procs if p.pid not in seen and p.pid != root and _in_run_cgroup(p.pid, proc)]
    inside = []
    for p in below:
        theirs = [p.namespaces[k] for k in SANDBOX_KEY if p.namespaces.get(k) and p.namespaces[k] not in mine]
        if not theirs:
            continue
        inside.append((p, theirs))
        for ns in theirs:
            parent.setdefault(ns, ns)
        for ns in theirs[1:]:
            parent[top(ns)] = top(theirs[0])
    joined: dict[str, tuple[set[str], list[HostProcess]]] = {}
    for p, theirs in inside:
        names, members_ = joined.setdefault(top(theirs[0]), (set(), []))
        names.update(theirs)
        members_.append(p)
    return {frozenset(names): members_ for names, members_ in joined.values()}


def sandbox_of(namespaces: Mapping[str, str], groups: Iterable[frozenset[str]]) -> frozenset[str] | None:
    """The key of the sandbox (among ``groups``) holding an instance of these namespace identities."""
    wanted = {namespaces.get(k) for k in SANDBOX_KEY} - {None}
    return next((key for key in groups if key & wanted), None)


def cgroups(pid: int, proc: Path = PROC) -> dict[str, str]:
    """``pid``'s cgroup per hierarchy (``memory``, ``pids``, ... for v1; ``""`` for v2): the kernel's own
    statement of which limits apply to it."""
    try:
        text = (proc / str(pid) / "cgroup").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return {}
    found = {}
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            found[controller.removeprefix("name=")] = path
    return found


def _cgroup_mounts(mountinfo: Path) -> dict[str, Path]:
    """Where each v1 controller's hierarchy is mounted (by controller name), and v2's under ``""``."""
    found: dict[str, Path] = {}
    for line in mountinfo.read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, rfields = left.split(), right.split()
        if len(fields) < 5 or len(rfields) < 3 or fields[3] != "/":
            continue
        if rfields[0] == "cgroup2":
            found.setdefault("", Path(fields[4]))
        elif rfields[0] == "cgroup":
            for option in rfields[2].split(","):
                found.setdefault(option.removeprefix("name="), Path(fields[4]))
    return found


def frozen(pid: int, proc: Path = PROC) -> bool | None:
    """Whether the kernel holds ``pid`` frozen, read from its own cgroup's freezer: v1 ``freezer.state`` reads
    FROZEN (FREEZING is not yet: some task of the cgroup may still run), or v2 ``cgroup.events`` says
    ``frozen 1``. None when no freezer file could be read
    for it (the process is gone, or no freezer governs its cgroup): no answer, not a "no"."""
    groups, mounts = cgroups(pid, proc), _cgroup_mounts(proc / "self" / "mountinfo")
    answers = []
    if "freezer" in groups and "freezer" in mounts:
        try:
            state = (mounts["freezer"] / groups["freezer"].lstrip("/") / "freezer.state").read_text().strip()
            answers.append(state == "FROZEN")
        except OSError:
            pass
    if "" in groups and "" in mounts:
        try:
            events = (mounts[""] / groups[""].lstrip("/") / "cgroup.events").read_text().splitlines()
            answers.append("frozen 1" in events)
        except OSError:
            pass
    return any(answers) if answers else None


def listening_ports(pid: int, proc: Path = PROC) -> set[tuple[str, int]]:
    """The TCP (v4 and v6) sockets listening in ``pid``'s network namespace: (address, port), as the
    kernel lists them for that namespace (``/proc/<pid>/net/tcp``)."""
    found = set()
    for name in ("tcp", "tcp6"):
        try:
            lines = (proc / str(pid) / "net" / name).read_text().splitlines()[1:]
        except (FileNotFoundError, ProcessLookupError):
            continue
        for line in lines:
            fields = line.split()
            if fields[3] != "0A":  # LISTEN
                continue
            address, port = fields[1].split(":")
            found.add((_address(address), int(port, 16)))
    return found


def _address(hex_address: str) -> str:
    if len(hex_address) == 8:  # IPv4, little-endian
        return ".".join(str(b) for b in reversed(bytes.fromhex(hex_address)))
    words = [bytes.fromhex(hex_address[i:i + 8])[::-1].hex() for i in range(0, 32, 8)]
    return ":".join("".join(words)[i:i + 4] for i in range(0, 32, 4))


def _mountinfo(path: Path) -> list[tuple[str, str, str]]:
    """(device major:minor, root of the mount within its filesystem, mount point) of each line."""
    found = []
    for line in path.read_text().splitlines():
        fields = line.split()
        found.append((fields[2], fields[3].replace("\\040", " "), fields[4].replace("\\040", " ")))
    return found


def _may(info: os.stat_result, uid: int, bit: int) -> bool:
    """Whether ``uid`` (whose only group is its own gid, ``uid``) has permission ``bit`` (4 r, 1 x) on a file."""
    if info.st_uid == uid:
        return bool(info.st_mode & (bit << 6))
    if info.st_gid == uid:
        return bool(info.st_mode & (bit << 3))
    return bool(info.st_mode & bit)


def unlistable_files(host_pid: int, uid: int, skip: Iterable[str] = (), limit: int = 2000,
                     proc: Path = PROC) -> list[str]:
    """Files a sandbox can open by name that no walk inside it can find: below a folder of one of its mounts
    that its uid may enter (x) but not list (r). Found from the host, which may list everything: for each
    mount of the sandbox backed by a host folder, that folder is walked as the sandbox's uid would be let
    through it. Paths as the sandbox sees them; mounts at or below ``skip`` are left out. More than
    ``limit`` is an error (ValueError): the caller could not scan them all."""
    host = _mountinfo(proc / "self" / "mountinfo")
    found: list[str] = []
    for device, root, point in _mountinfo(proc / str(host_pid) / "mountinfo"):
        if any(point == s or point.startswith(s.rstrip("/") + "/") for s in skip):
            continue
        bases = [(r, p) for d, r, p in host if d == device and (root == r or root.startswith(r.rstrip("/") + "/"))]
        if not bases:
            continue  # not backed by anything the host has mounted (the sandbox's own tmpfs, proc)
        base_root, base_point = max(bases, key=lambda b: len(b[0]))
        folder = Path(base_point) / os.path.relpath(root, base_root)
        if not folder.is_dir() or folder.is_symlink():
            continue
        hidden_below: list[Path] = []
        for dirpath, dirnames, filenames in walk_tree(folder):
            here = Path(dirpath)
            try:
                info = here.lstat()
            except OSError:
                dirnames[:] = []
                continue
            if not _may(info, uid, 1):
                dirnames[:] = []  # the sandbox cannot pass through: nothing below is reachable
                continue
            hidden = any(here == h or h in here.parents for h in hidden_below)
            if not hidden and not _may(info, uid, 4):
                hidden_below.append(here)
                hidden = True
            if hidden:  # regular files only: a socket or a fifo is not something to read
                for name in filenames:
                    try:
                        if not stat.S_ISREG((here / name).lstat().st_mode):
                            continue
                    except OSError:
                        continue
                    found.append(os.path.normpath(os.path.join(point, os.path.relpath(here / name, folder))))
            if len(found) > limit:
                raise ValueError(f"more than {limit} files hidden from listing below {point} in the sandbox")
    return sorted(set(found))
