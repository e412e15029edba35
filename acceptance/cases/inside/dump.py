"""Probe: carry the sandbox's whole visible filesystem out, for the host to search for known secrets.

Fed to the sandbox's python on stdin; argv: roots to walk, then ``--skip PATH`` entries (exact paths, never
entered or carried; /proc, /sys and /dev are never walked). Writes one JSON line per chunk of a file
``{"path", "b64"}`` (regular files only, whole files in chunks, up to LIMIT bytes a file); a symbolic link,
never followed, as its target text ``{"path": "PATH (link target)", "b64"}``; for /proc only each process's
environ and cmdline. The last line is the completeness record ``{"files", "bytes", "truncated", "problems",
"end"}``: what it read and every path it could not read, with the reason. A report without that line was
cut off, and the host treats it so. It is told no secret, so it carries none in. The static probe's
``--dump`` (probe/ppscan.c) writes the same lines where the sandbox has no Python.
"""

import base64
import errno
import json
import os
import stat
import sys

CHUNK = 1 << 20
LIMIT = 256 << 20  # a file larger than this is carried in part and counted as truncated
END_MARK = "pairproof-dump-end"
state = {"files": 0, "bytes": 0, "truncated": 0, "problems": []}


def note(path, error):
    code = errno.errorcode.get(getattr(error, "errno", 0) or 0, type(error).__name__)
    state["problems"].append(f"{path}: {getattr(error, 'strerror', None) or error} [{code}]")


def emit(path):
    try:
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode):  # never followed; its target text is carried instead
            target = os.readlink(path).encode("utf-8", "surrogateescape")
            sys.stdout.write(json.dumps({"path": path + " (link target)", "b64": base64.b64encode(target).decode()}) + "\n")
            return
        if not stat.S_ISREG(info.st_mode) and not path.startswith("/proc/"):
            return  # fifos, sockets and devices are never opened
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY)
    except OSError as error:
        note(path, error)
        return
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return
        total = 0
        while True:
            data = os.read(fd, CHUNK)
            if not data:
                break
            total += len(data)
            sys.stdout.write(json.dumps({"path": path, "b64": base64.b64encode(data).decode()}) + "\n")
            if total >= LIMIT:
                if os.read(fd, 1):
                    state["truncated"] += 1
                break
        state["files"] += 1
        state["bytes"] += total
    except OSError as error:
        note(path, error)
    finally:
        os.close(fd)


def main(argv):
    skip, roots = [], []
    it = iter(argv)
    for arg in it:
        if arg == "--skip":
            skip.append(next(it))
        else:
            roots.append(arg)
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        for leaf in ("environ", "cmdline"):
            emit(f"/proc/{pid}/{leaf}")
    skip += ["/proc", "/sys", "/dev"]
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root, onerror=lambda error: note(error.filename, error)):
            # A link to a directory is not entered; its target text is carried, as for any other link.
            links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
            dirnames[:] = [d for d in dirnames if d not in links and os.path.join(dirpath, d) not in skip]
            for name in links + filenames:
                if os.path.join(dirpath, name) not in skip:
                    emit(os.path.join(dirpath, name))
    sys.stdout.write(json.dumps({**state, "end": END_MARK}) + "\n")
    sys.stdout.flush()


main(sys.argv[1:])
