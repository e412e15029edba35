"""Probe: every place the sandbox can write that another sandbox might see, written, looked at, cleaned.

Fed to the sandbox's python on stdin (standard library only). The places are read from inside, from the
sandbox's own mount table (``/proc/self/mountinfo``): every mount mounted read-write that is a folder (its
root, or, when its root is not writable by this uid, the writable folders under it on the same mount, as
/var/tmp on a writable root), plus /tmp, the home (/data and $HOME) and /dev/shm whether or not they are
mounts of their own; a file mounted read-write that this uid may write (a shared log) is opened for
writing, never written, and reported ``"opened"`` with its identity; and System V IPC (a shared memory
segment, a message queue and a semaphore set, each made with a key derived from the marker). A place that could not be
written is kept with its errno.

argv: ``write MARKER`` | ``look MARKER PATH...`` | ``clean MARKER PATH...``. Prints one JSON object:
- write: ``{"places": {path: {"wrote": bool, "id": "dev:ino", "fstype", "error"}}, "sysv": {kind:
  "ok" or "errno N"}, "ipc_ns": link, "key": int, "walk": record}``;
- look (``PATH``s besides the looker's own places, every mount point and the folders under each, read-only
  ones included): ``{"seen": [path], "sysv_seen": [kind], "places": {path: "dev:ino"}, "ipc_ns": link,
  "walk": record}``;
- clean: removes the marker file from each ``PATH`` and the marker's IPC objects: ``{"left": [...]}``.

The walks under mount points (the folders under a mount whose root this uid cannot write; every folder the
look searches) say where they stopped, in the completeness record ``walk``: ``{"limit": WALK_DIRS,
"folders": how many listed, "cut": [mount points whose walk reached the limit], "unlisted": {path: "errno
N"}, "searchable": [unlisted folders this uid may still search]}`` (a folder that could not be listed, its
subfolders unseen). The host judges it (``sharing.walk_problems``): a walk cut at the limit, a folder unlisted
for a reason other than a denial or a folder gone meanwhile, or unlisted yet searchable (a place under it is
reachable by a name the walk cannot see), leaves the case unjudged, never passed.
"""

import ctypes
import json
import os
import stat
import sys

HOME = "/data"
ALWAYS = ("/tmp", HOME, "/dev/shm")
SKIP = ("/proc", "/sys")
WALK_DIRS = 100000  # folders listed under one mount point; more and the walk stops, and says so (``WALK``)
FILE = "a file mount"
IPC_CREAT, IPC_EXCL, IPC_RMID = 0o1000, 0o2000, 0
SYSV = ("shm", "msg", "sem")


def _unescape(text):
    out, i = "", 0
    while i < len(text):
        if text[i] == "\\" and text[i + 1:i + 4].isdigit():
            out += chr(int(text[i + 1:i + 4], 8))
            i += 4
        else:
            out += text[i]
            i += 1
    return out


def mounts():
    """[(mount point, fstype, writable by its options)] from the sandbox's own mount table."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields, extra = left.split(), right.split()
            options, superoptions = fields[5].split(","), (extra[2].split(",") if len(extra) > 2 else [])
            found.append((_unescape(fields[4]), extra[0] if extra else "?", "rw" in options and "ro" not in superoptions))
    return found


def _skipped(path):
    return any(path == s or path.startswith(s + "/") for s in SKIP)


def _identity(path):
    st = os.stat(path)
    return f"{st.st_dev}:{st.st_ino}"


WALK = {"limit": WALK_DIRS, "folders": 0, "cut": [], "unlisted": {}, "searchable": []}  # this run's completeness record


def _unlisted(error):
    path = error.filename or "?"
    WALK["unlisted"][path] = f"errno {error.errno}"
    if os.path.isdir(path) and os.access(path, os.X_OK) and path not in WALK["searchable"]:
        WALK["searchable"].append(path)


def _folders_under(top):
    """Folders under ``top`` on the same mount (a walk bounded at WALK_DIRS folders listed, /proc and /sys left
    out); what it could not list, and where it stopped, go into ``WALK``."""
    try:
        dev = os.stat(top).st_dev
    except OSError as e:
        _unlisted(e)
        return []
    found, walked = [], 0
    for root, dirs, _ in os.walk(top, onerror=_unlisted):
        if walked >= WALK_DIRS:
            WALK["cut"].append(top)
            break
        keep = []
        for d in dirs:
            path = os.path.join(root, d)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode) and st.st_dev == dev and not _skipped(path):
                keep.append(d)
                found.append(path)
        dirs[:] = keep
        walked += 1
        WALK["folders"] += 1
    return found


def _writable_under(top):
    """Folders under ``top`` this uid may write: where a writable mount whose own root is closed to it still
    takes a file."""
    return [path for path in _folders_under(top) if os.access(path, os.W_OK | os.X_OK)]


def places():
    """{path: fstype} of every place to try, in a stable order."""
    out = {}
    for mp, fstype, writable in mounts():
        if writable and not _skipped(mp) and os.path.isfile(mp) and os.access(mp, os.W_OK):
            out[mp] = FILE  # a file bound in read-write (a shared log): opened for writing, left as it is
            continue
        if not writable or _skipped(mp) or not os.path.isdir(mp):
            continue
        out[mp] = fstype
        if not os.access(mp, os.W_OK | os.X_OK):
            for sub in _writable_under(mp):
                out.setdefault(sub, fstype + " (under " + mp + ")")
    for path in (*ALWAYS, os.environ.get("HOME") or HOME):
        out.setdefault(path, "in the mount table above it")
    return out


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def key_of(marker):
    return int(marker[:7], 16) + 1


def _mq_make(name):
    for lib in (None, "librt.so.1"):
        try:
            mq_open = ctypes.CDLL(lib, use_errno=True).mq_open
        except (OSError, AttributeError):
            continue
        mq_open.restype = ctypes.c_int
        fd = mq_open(("/" + name).encode(), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600, None)
        if fd < 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
        os.close(fd)  # an mqd_t is a descriptor on Linux
        return
    raise OSError(38, "no mq_open in the C library")


def _sysv_make(key):
    libc, flags, result = _libc(), IPC_CREAT | IPC_EXCL | 0o600, {}
    calls = {"shm": lambda: libc.shmget(key, ctypes.c_size_t(4096), flags),
             "msg": lambda: libc.msgget(key, flags),
             "sem": lambda: libc.semget(key, 1, flags)}
    for kind in SYSV:
        result[kind] = "ok" if calls[kind]() >= 0 else f"errno {ctypes.get_errno()}"
    return result


def _sysv_remove(key):
    libc, left = _libc(), []
    found = {"shm": libc.shmget(key, ctypes.c_size_t(0), 0), "msg": libc.msgget(key, 0), "sem": libc.semget(key, 0, 0)}
    for kind, ident in found.items():
        if ident < 0:
            continue
        if kind == "shm":
            rc = libc.shmctl(ident, IPC_RMID, None)
        elif kind == "msg":
            rc = libc.msgctl(ident, IPC_RMID, None)
        else:
            rc = libc.semctl(ident, 0, IPC_RMID)
        if rc != 0:
            left.append(f"sysv {kind} {ident}: errno {ctypes.get_errno()}")
    return left


def sysv_keys(kind):
    """The keys of /proc/sysvipc/<kind> (what every process of this IPC namespace sees)."""
    try:
        with open(f"/proc/sysvipc/{kind}") as f:
            return {int(line.split()[0]) for line in f.read().splitlines()[1:] if line.split()}
    except OSError:
        return set()


def ipc_ns():
    try:
        return os.readlink("/proc/self/ns/ipc")
    except OSError as e:
        return f"errno {e.errno}"


def write(marker):
    name, report = f".pairproof-shared-{marker}", {}
    for path, fstype in places().items():
        entry = {"fstype": fstype}
        try:
            entry["id"] = _identity(path)
            if fstype == FILE:
                os.close(os.open(path, os.O_WRONLY | os.O_APPEND))  # writable by this uid: its identity is compared
                entry["opened"] = True
                report[path] = entry
                continue
            if fstype == "mqueue":
                _mq_make(name)  # a POSIX message queue: the mqueue filesystem lists it, open(2) cannot make it
            else:
                fd = os.open(os.path.join(path, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                os.write(fd, b"here\n")
                os.close(fd)
            entry["wrote"] = True
        except OSError as e:
            entry["wrote"], entry["error"] = False, f"errno {e.errno}"
        report[path] = entry
    return {"places": report, "sysv": _sysv_make(key_of(marker)), "ipc_ns": ipc_ns(), "key": key_of(marker),
            "walk": WALK}


def look(marker, paths):
    name, own = f".pairproof-shared-{marker}", places()
    tops = {mp for mp, _, _ in mounts() if not _skipped(mp)}
    everywhere = sorted(set(paths) | set(own) | tops)
    # The marker may sit deeper than a mount point on this side: the writer wrote in a folder under a mount
    # whose root it could not write, and this side has that mount elsewhere, or read-only (not a place of its own).
    below = sorted({sub for top in tops if os.path.isdir(top) for sub in _folders_under(top)} - set(everywhere))
    seen = [p for p in everywhere + below if os.path.lexists(os.path.join(p, name))]
    ids = {}
    for p in everywhere:
        try:
            ids[p] = _identity(p)
        except OSError:
            pass
    key = key_of(marker)
    return {"seen": seen, "sysv_seen": [k for k in SYSV if key in sysv_keys(k)], "places": ids, "ipc_ns": ipc_ns(),
            "walk": WALK}


def clean(marker, paths):
    left = []
    for p in paths:
        try:
            os.unlink(os.path.join(p, f".pairproof-shared-{marker}"))
        except (FileNotFoundError, NotADirectoryError):  # nothing made there (a file mount is never written)
            pass
        except OSError as e:
            left.append(f"{p}: errno {e.errno}")
    return {"left": left + _sysv_remove(key_of(marker))}


def main(argv):
    mode, marker, rest = argv[0], argv[1], argv[2:]
    if not all(c in "0123456789abcdef" for c in marker) or len(marker) < 8:
        raise SystemExit("the marker must be hex, at least 8 digits")
    print(json.dumps({"write": lambda: write(marker), "look": lambda: look(marker, rest),
                      "clean": lambda: clean(marker, rest)}[mode]()))


main(sys.argv[1:])
