"""Probe: carry the sandbox's whole visible filesystem out, for the host to search for known secrets.

Fed to the sandbox's python on stdin; argv: roots to walk, then ``--skip PATH`` entries. Writes one JSON
line per file ``{"path", "b64"}``: regular files only, symlinks not followed, at most 8 MiB each; for
/proc only each process's environ and cmdline. It is told no secret, so it carries none in.
"""

import base64
import json
import os
import stat
import sys

LIMIT = 8 << 20


def emit(path):
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return
        data = os.read(fd, LIMIT)
    except OSError:
        return
    finally:
        os.close(fd)
    sys.stdout.write(json.dumps({"path": path, "b64": base64.b64encode(data).decode()}) + "\n")


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
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if os.path.join(dirpath, d) not in skip]
            for name in filenames:
                emit(os.path.join(dirpath, name))


main(sys.argv[1:])
