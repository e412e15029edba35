"""The Docker engine's network, proven closed before a run: a container with ``network_mode="host"`` (a broken
control, a mutant) gets the network namespace of the engine's containerd, and a pull is made by dockerd in
its own. tools/setup-docker starts both in a namespace of their own with only loopback; this checks it, by
what the kernel says of the processes rather than by how they were started:

- the dockerd listening on the engine's socket (``DOCKER_HOST``, else /var/run/docker.sock), found by the
  socket's inode among its open files, and the containerd it started (its child: a system containerd
  would put host-network containers in its own namespace) are each in a network namespace other than this
  process's, whose only interface is ``lo``;
- a TCP connect from inside that namespace to a documentation address (192.0.2.1, 2001:db8::1) fails at
  once with ENETUNREACH: there is no route, so nothing is sent. It is only tried once the interface list
  showed lo alone, so even a broken engine is never made to send a packet.

A few milliseconds: no container is started (tests/integration/docker proves the same end to end, with one).
"""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

from runtime.isolation.netns import socket_in

DEFAULT_SOCKET = "/var/run/docker.sock"
FIX = "run tools/setup-docker (it starts our engine in a network namespace of its own, and restarts an idle one of ours)"
UNROUTED = (("192.0.2.1", socket.AF_INET), ("2001:db8::1", socket.AF_INET6))  # TEST-NET-1, the IPv6 documentation prefix
SO_ACCEPTCON = 0x00010000  # /proc/net/unix flags of a listening socket


def socket_path() -> str | None:
    """The engine's unix socket (``DOCKER_HOST`` or the default), or None for an engine that is not local."""
    host = os.environ.get("DOCKER_HOST", "")
    if not host:
        return DEFAULT_SOCKET
    return host[len("unix://"):] if host.startswith("unix://") else None


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_bytes().decode(errors="replace").strip()  # any bytes the process set
    except OSError:
        return ""


def _listening_inodes(pid: int, path: str) -> set[str]:
    """Inodes of the listening unix sockets bound at ``path``, in the network namespace of ``pid``."""
    wanted = os.path.realpath(path)
    found = set()
    try:
        lines = Path(f"/proc/{pid}/net/unix").read_text().splitlines()[1:]
    except OSError:
        return found
    for line in lines:
        fields = line.split()
        if len(fields) >= 8 and int(fields[3], 16) & SO_ACCEPTCON and os.path.realpath(fields[7]) == wanted:
            found.add(fields[6])
    return found


def engine_pid(path: str) -> int | None:
    """The dockerd holding the listening socket at ``path`` open, or None."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or _comm(int(entry.name)) != "dockerd":
            continue
        pid = int(entry.name)
        inodes = _listening_inodes(pid, path)
        if inodes & _held_sockets(pid):
            return pid
    return None


def _held_sockets(pid: int) -> set[str]:
    """Inodes of the sockets among the descriptors of ``pid``. Each descriptor is read alone: a busy dockerd
    closes descriptors all along, and one closed between the listing and its read must not drop the process
    (it once did: the engine was reported absent while it served)."""
    found = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return found  # exited since listed
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            found.add(link[8:-1])
    return found


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def interfaces(pid: int) -> list[str]:
    """The interfaces of the network namespace of ``pid`` (``/proc/<pid>/net/dev``), as the kernel lists them."""
    return [line.split(":", 1)[0].strip() for line in Path(f"/proc/{pid}/net/dev").read_text().splitlines()[2:]]


def unrouted_errors(pid: int) -> dict[str, int]:
    """The errno of a TCP connect to each documentation address from the network namespace of ``pid``. Only
    call it for a namespace of lo alone (nothing can then leave it)."""
    results = {}
    for address, family in UNROUTED:
        try:
            sock = socket_in(pid, family, socket.SOCK_STREAM)
        except OSError as exc:
            if exc.errno == errno.EAFNOSUPPORT:  # no IPv6 in this kernel: nothing to reach by it either
                results[address] = errno.ENETUNREACH
                continue
            raise
        try:
            sock.settimeout(2)
            results[address] = sock.connect_ex((address, 9))
        finally:
            sock.close()
    return results


def _closed(pid: int, what: str) -> str:
    """'' when the network namespace of ``pid`` is closed, else why not."""
    try:
        if os.readlink(f"/proc/{pid}/ns/net") == os.readlink("/proc/self/ns/net"):
            return f"{what} runs in this host's network namespace (a host-network container would reach off the machine)"
        names = interfaces(pid)
    except OSError as exc:
        return f"{what} cannot be inspected ({exc.strerror})"
    if names != ["lo"]:
        return f"{what}'s network namespace has interfaces {', '.join(names)}, not lo alone"
    reached = {address: code for address, code in unrouted_errors(pid).items() if code != errno.ENETUNREACH}
    if reached:
        return f"{what}'s network namespace routes to " + ", ".join(
            f"{address} ({errno.errorcode.get(code, code) if code else 'connected'})" for address, code in reached.items())
    return ""


def network_problems() -> list[str]:
    """One fix-naming line if the engine's network is not closed, or none."""
    path = socket_path()
    if path is None:
        return [f"the Docker engine (DOCKER_HOST={os.environ['DOCKER_HOST']}) is not on a local socket, so its network "
                f"cannot be checked closed: unset DOCKER_HOST and {FIX}"]
    pid = engine_pid(path)
    if pid is None:
        return [f"no dockerd process holds the engine's socket {path}, so its network cannot be checked closed: {FIX}"]
    problem = _closed(pid, f"the Docker engine (dockerd {pid})")
    if not problem:
        managed = [child for child in children(pid) if _comm(child) == "containerd"]
        if not managed:
            problem = (f"the Docker engine (dockerd {pid}) has no containerd of its own (a system containerd's "
                       "namespace would be its containers' host network)")
        for child in managed:
            problem = problem or _closed(child, f"the Docker engine's containerd {child}")
    return [f"{problem}: {FIX}"] if problem else []
