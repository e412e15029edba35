"""NT-3's holders: for every socket the intruder's sweep could connect to, the host process that holds it, found
from the host by the socket's inode; and the judging of who may hold one.

The socket's inode comes from its network namespace's own tables, read from the host through a process in it
(``/proc/<pid>/net/tcp``, ``tcp6``, ``unix``); a socket file reached by its path (which may be bound in
another namespace and mounted in) is matched by the device and inode of the file, as the host sees it through
``/proc/<pid>/root``, against sock_diag's ``UNIX_DIAG_VFS`` in every network namespace of the host (pyroute2's
``DiagSocket``, run under ``nsenter --net``). The holders are the processes with that ``socket:[inode]`` among
their descriptors (what ``ss -p`` reads). A holder is the instance's own when it is in the sandbox's pid and
mount namespaces (its agent and whatever the agent started); the only socket something else may hold is the
instance's own broker, known by its answer naming the instance.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from acceptance.cases.inside.listeners import hex_ip
from acceptance.errors import TargetError

DIAG = """
import json, socket
from pyroute2 import DiagSocket
with DiagSocket() as ds:
    ds.bind()
    out = []
    for s in ds.get_sock_stats(family=socket.AF_UNIX):
        vfs = s.get_attr("UNIX_DIAG_VFS")
        if vfs:
            out.append([s["udiag_ino"], vfs["udiag_vfs_dev"], vfs["udiag_vfs_ino"]])
print(json.dumps(out))
"""
NSENTER_DEADLINE = 20.0


def _inet_table(pid: int, proto: str, family: int) -> list[tuple[str, int, int]]:
    """(address, port, inode) of every TCP listener in ``pid``'s network namespace."""
    found = []
    for line in Path(f"/proc/{pid}/net/{proto}").read_text(errors="replace").splitlines()[1:]:
        fields = line.split()
        if len(fields) > 9 and fields[3] == "0A":
            address, port = fields[1].split(":")
            found.append((hex_ip(address, family), int(port, 16), int(fields[9])))
    return found


def _unix_table(pid: int) -> dict[str, list[int]]:
    """name (``/path`` or ``@abstract``) -> inodes of the bound unix sockets of ``pid``'s network namespace."""
    found: dict[str, list[int]] = {}
    for line in Path(f"/proc/{pid}/net/unix").read_text(errors="replace").splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8:
            found.setdefault(fields[7], []).append(int(fields[6]))
    return found


def _netns_pids() -> dict[str, int]:
    """One pid in each network namespace of the host: {ns link: pid}."""
    found: dict[str, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                found.setdefault(os.readlink(f"/proc/{entry}/ns/net"), int(entry))
            except OSError:
                pass
    return found


def vfs_index(pid: int) -> dict[tuple[int, int, int], int]:
    """(major, minor, vfs inode) -> socket inode of every path-bound unix socket of ``pid``'s namespace."""
    out = subprocess.run(["nsenter", f"--net=/proc/{pid}/ns/net", sys.executable, "-I", "-c", DIAG],
                         capture_output=True, text=True, timeout=NSENTER_DEADLINE, start_new_session=True)
    if out.returncode != 0:
        raise TargetError(f"sock_diag in the network namespace of pid {pid} failed: {out.stderr.strip()[-300:]}")
    return {(dev >> 20, dev & 0xFFFFF, vfs): ino for ino, dev, vfs in json.loads(out.stdout)}


def inodes(host_pid: int, entries: Mapping[str, Mapping]) -> dict[str, list[int]]:
    """{where: socket inodes} for the sweep's ``entries`` (as ``socket_probe.py`` describes them), from the
    host. An entry found nowhere maps to []."""
    tcp = {socket.AF_INET: _inet_table(host_pid, "tcp", socket.AF_INET),
           socket.AF_INET6: _inet_table(host_pid, "tcp6", socket.AF_INET6)}
    unix = _unix_table(host_pid)
    found: dict[str, list[int]] = {}
    files: dict[str, tuple[int, int, int]] = {}
    for where, entry in entries.items():
        proto = entry.get("proto")
        if proto in ("tcp", "tcp6"):
            family, host, port = entry["family"], entry["host"], entry["port"]
            wild = {socket.AF_INET: "0.0.0.0", socket.AF_INET6: "::"}[family]
            exact = [ino for a, p, ino in tcp[family] if p == port and a == host]
            found[where] = exact or [ino for a, p, ino in tcp[family] if p == port and a == wild]
        elif proto == "unix":
            path = entry["path"]
            found[where] = unix.get("@" + path[1:] if path.startswith("\0") else path, [])
        elif proto == "unix-file":
            found[where] = []
            try:
                st = os.stat(f"/proc/{host_pid}/root{entry['path']}")
            except OSError:
                continue
            files[where] = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    if files:
        own_ns = os.readlink(f"/proc/{host_pid}/ns/net")
        others = [pid for ns, pid in sorted(_netns_pids().items()) if ns != own_ns]
        pending = dict(files)
        for pid in [host_pid, *others]:
            index = vfs_index(pid)
            for where, key in list(pending.items()):
                if key in index:
                    found[where] = [index[key]]
                    del pending[where]
            if not pending:
                break
    return found


def _namespaces(pid: int | str) -> tuple[str, str]:
    return os.readlink(f"/proc/{pid}/ns/pid"), os.readlink(f"/proc/{pid}/ns/mnt")


def holders(host_pid: int, wanted: Iterable[int]) -> dict[int, list[dict]]:
    """{socket inode: [{"pid", "comm", "own"}]} for the ``wanted`` inodes: every host process holding one
    (``own``: in the sandbox's pid and mount namespaces)."""
    wanted = {f"socket:[{ino}]": ino for ino in wanted}
    sandbox = _namespaces(host_pid)
    found: dict[int, list[dict]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
        except OSError:
            continue  # gone, or not ours to read
        links = set()
        for fd in fds:
            try:
                links.add(os.readlink(f"/proc/{entry}/fd/{fd}"))
            except OSError:
                pass  # closed between the listing and the read (the suite's own process does that all along)
        held = [wanted[link] for link in links if link in wanted]
        if not held:
            continue
        try:
            comm = Path(f"/proc/{entry}/comm").read_text(errors="replace").strip()
            own = _namespaces(entry) == sandbox
        except OSError:
            continue  # gone since
        for ino in held:
            found.setdefault(ino, []).append({"pid": int(entry), "comm": comm, "own": own})
    return found


def socket_holders(host_pid: int, report: Mapping) -> dict[str, list[dict]]:
    """{where: holders} for every socket of the sweep ``report`` that the connect reached."""
    connected = {w: report["entries"][w] for w in report["connected"] if w in report["entries"]}
    by_where = inodes(host_pid, connected)
    held = holders(host_pid, {ino for inos in by_where.values() for ino in inos})
    return {where: [dict(h, inode=ino) for ino in by_where.get(where, []) for h in held.get(ino, [])]
            for where in connected}


def holder_findings(instance: str, held: Mapping[str, list[dict]], own_broker: Iterable[str]) -> tuple[list[str], list[str]]:
    """(findings, unfound). A finding: a socket the intruder could connect to held by a process outside its
    sandbox, other than its own broker (``own_broker``: the sockets that answered naming the instance).
    Unfound: a connectable socket whose holder could not be found, which leaves the case unjudged."""
    own_broker = set(own_broker)
    findings, unfound = [], []
    for where, hs in sorted(held.items()):
        if not hs:
            unfound.append(where)
            continue
        if where in own_broker:
            continue
        strangers = [h for h in hs if not h["own"]]
        if strangers:
            findings.append(f"{where} (socket {strangers[0]['inode']}) is held by "
                            + ", ".join(f"pid {h['pid']} ({h['comm']})" for h in strangers)
                            + f", outside {instance}'s sandbox, and is not {instance}'s broker")
    return findings, unfound
