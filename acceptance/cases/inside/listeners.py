"""Probe library (installed as the module ``listeners`` ahead of a probe fed to the sandbox's python): every
socket the sandbox can see, so a probe can knock on each.

What is enumerated, from inside the sandbox:
- TCP and TCP6 listeners and bound UDP and UDP6 sockets of its network namespace (``/proc/net/tcp``,
  ``tcp6``, ``udp``, ``udp6``), whoever owns them (a platform process binding into the namespace shows
  there too);
- unix sockets of its network namespace (``/proc/net/unix``): path-named and abstract (``@name``) ones;
- socket files anywhere in its visible filesystem (``/proc``, ``/sys`` and the host's read-only ``/usr``
  aside), /dev included, and every mount of its own mount table under /usr, or that is itself a socket (a
  host service's socket bound in as a file, as ``-v /dev/log:/dev/log``): a socket bound in another network
  namespace and mounted in (a shared runtime folder) is not in ``/proc/net/unix`` but is reachable by its
  path.
A wildcard listener (0.0.0.0, ::) is knocked on at the loopback address of its family. Knocks go to local
addresses only: nothing here routes a packet anywhere.

The filesystem walk says where it stopped, in the completeness record ``WALK`` (``walk_record()``, which each
probe using this library puts in its report as ``"walk"``): ``{"limit": WALK_LIMIT, "entries": files looked
at, "cut": "" or where the walk stopped at the limit, "unlisted": {folder: {"error": "errno N",
"searchable": bool}}}``. A folder it could not list but may search is a place a socket is reachable by a name
the walk cannot see. The host judges it (``netprobes.sweep_problems``): cut, unlisted for a reason other than a
denial or a folder gone, or unlisted and searchable, and the sweep is incomplete (the case broken, never passed).
"""

import os
import socket
import stat
import threading

WALK_SKIP = ("/proc", "/sys", "/usr")
WALK_LIMIT = 100000  # files looked at; more and the walk stops, and says so in WALK
MOUNTS_WALKED_UNDER = ("/usr",)  # skipped for its size (the host's /usr in a bubblewrap sandbox), not its mounts


def hex_ip(text, family):
    raw = bytes.fromhex(text)
    if family == socket.AF_INET:
        return socket.inet_ntop(family, raw[::-1])
    # /proc/net/*6 prints the address as four host-order 32-bit words
    return socket.inet_ntop(family, b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4)))


def _inet(proto, family, wanted_state):
    found = []
    try:
        with open("/proc/net/" + proto) as f:
            lines = f.read().splitlines()[1:]
    except OSError:
        return found
    for line in lines:
        fields = line.split()
        if len(fields) < 4 or fields[3] != wanted_state:
            continue
        address, port = fields[1].split(":")
        host = hex_ip(address, family)
        if host in ("0.0.0.0", "::"):
            host = "127.0.0.1" if family == socket.AF_INET else "::1"
        found.append({"proto": proto, "family": family, "host": host, "port": int(port, 16),
                      "where": f"{proto} {host if family == socket.AF_INET else '[' + host + ']'}:{int(port, 16)}"})
    return found


def _unix_table():
    found = []
    try:
        with open("/proc/net/unix") as f:
            lines = f.read().splitlines()[1:]
    except OSError:
        return found
    for line in lines:
        fields = line.split()
        if len(fields) < 8:
            continue  # unbound
        flags, kind, path = int(fields[3], 16), int(fields[4], 16), fields[7]
        listening = bool(flags & 0x10000)
        if kind == 1 and not listening:
            continue  # a connected stream socket, not a server
        if kind not in (1, 2, 5):
            continue
        found.append({"proto": "unix", "kind": {1: socket.SOCK_STREAM, 2: socket.SOCK_DGRAM, 5: socket.SOCK_SEQPACKET}[kind],
                      "path": "\0" + path[1:] if path.startswith("@") else path, "where": f"unix {path}"})
    return found


def _mount_points():
    """The mount points of the sandbox's own mount table (``/proc/self/mountinfo``, octal escapes undone)."""
    points = []
    try:
        with open("/proc/self/mountinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return points
    for line in lines:
        fields = line.split()
        if len(fields) > 4:
            text, out, i = fields[4], "", 0
            while i < len(text):
                if text[i] == "\\" and text[i + 1:i + 4].isdigit():
                    out, i = out + chr(int(text[i + 1:i + 4], 8)), i + 4
                else:
                    out, i = out + text[i], i + 1
            points.append(out)
    return points


def _socket_entries(path):
    return [{"proto": "unix-file", "kind": kind, "path": path,
             "where": f"unix-file {path} ({'stream' if kind == socket.SOCK_STREAM else 'dgram'})"}
            for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM)]


WALK = {"limit": WALK_LIMIT, "entries": 0, "cut": "", "unlisted": {}}


def walk_record():
    """The filesystem walk's completeness record (what ``listeners()`` looked at, and where it could not)."""
    return WALK


def _unlisted(error):
    path = error.filename or "?"
    WALK["unlisted"][path] = {"error": f"errno {error.errno}", "searchable": os.access(path, os.X_OK)}


def _socket_files():
    found, walked = [], 0
    points = _mount_points()
    tops = [mp for mp in points if any(mp.startswith(s + "/") for s in MOUNTS_WALKED_UNDER)] + ["/"]
    for mp in points:  # a socket bound in as a file is a mount point of its own, wherever it is
        try:
            if stat.S_ISSOCK(os.lstat(mp).st_mode):
                found += _socket_entries(mp)
        except OSError:
            pass
    for top in tops:
        for root, dirs, files in os.walk(top, onerror=_unlisted):
            dirs[:] = [d for d in dirs if os.path.join(root, d) not in WALK_SKIP]
            for name in files:
                walked += 1
                path = os.path.join(root, name)
                try:
                    if stat.S_ISSOCK(os.lstat(path).st_mode):
                        found += _socket_entries(path)
                except OSError:
                    pass
            WALK["entries"] = walked
            if walked > WALK_LIMIT:
                WALK["cut"] = f"stopped after {WALK_LIMIT} entries, in {root} (under {top})"
                return found
    return found


def listeners(udp=True):
    """Every socket the sandbox can see, as dicts with a ``where`` naming it."""
    found = _inet("tcp", socket.AF_INET, "0A") + _inet("tcp6", socket.AF_INET6, "0A")
    if udp:
        found += _inet("udp", socket.AF_INET, "07") + _inet("udp6", socket.AF_INET6, "07")
    found += _unix_table() + _socket_files()
    seen, unique = set(), []
    for entry in found:
        if entry["where"] not in seen:
            seen.add(entry["where"])
            unique.append(entry)
    return unique


def connect(entry, timeout):
    """A socket connected to ``entry`` (raises OSError)."""
    if entry["proto"] in ("unix", "unix-file"):
        sock = socket.socket(socket.AF_UNIX, entry["kind"])
        sock.settimeout(timeout)
        try:
            sock.connect(entry["path"])
        except OSError:
            sock.close()
            raise
        return sock
    kind = socket.SOCK_STREAM if entry["proto"].startswith("tcp") else socket.SOCK_DGRAM
    sock = socket.socket(entry["family"], kind)
    sock.settimeout(timeout)
    try:
        sock.connect((entry["host"], entry["port"]))
    except OSError:
        sock.close()
        raise
    return sock


def knock_all(entries, knock):
    """``knock(entry)`` on every entry at once (each bounded by its own timeout); {where: result}."""
    results = {}

    def one(entry):
        try:
            results[entry["where"]] = knock(entry)
        except OSError as exc:
            results[entry["where"]] = f"{type(exc).__name__}: errno {exc.errno}"
        except Exception as exc:  # a knock must not end the probe; its failure is its result
            results[entry["where"]] = f"{type(exc).__name__}"

    threads = [threading.Thread(target=one, args=(e,)) for e in entries]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results
