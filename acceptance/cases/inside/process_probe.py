"""Probe: what processes this sandbox can see, signal and trace.

Fed to the sandbox's python on stdin (standard library only); argv: pids to try. It lists every procfs
mount the sandbox has (not only /proc: a host /proc bound elsewhere is a view too) with each visible pid's
start time, so the host can tell whose process a number names. Then, for every pid given and every pid
visible in /proc, it tries ``kill(pid, 0)`` and ``ptrace(PTRACE_SEIZE)`` (which does not stop the tracee;
the kernel detaches it when this probe exits) and records "ok" or the errno's name. Prints one JSON object.
"""

import ctypes
import errno
import json
import os
import sys

PTRACE_SEIZE = 0x4206


def start_time(stat_path):
    with open(stat_path) as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])


def proc_mounts():
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            if right.split()[:1] == ["proc"]:
                points.append(left.split()[4])
    return sorted(set(points))


def view(point):
    try:
        names = os.listdir(point)
    except OSError as e:
        return {"error": errno.errorcode.get(e.errno, str(e.errno))}
    seen = {}
    for name in names:
        if name.isdigit():
            try:
                seen[name] = start_time(f"{point}/{name}/stat")
            except (OSError, ValueError, IndexError):
                pass  # exited while listed
    return {"pids": seen}


def attempt(libc, pid):
    out = {}
    try:
        os.kill(pid, 0)
        out["kill"] = "ok"
    except OSError as e:
        out["kill"] = errno.errorcode.get(e.errno, str(e.errno))
    ctypes.set_errno(0)
    rc = libc.ptrace(PTRACE_SEIZE, pid, None, None)
    out["ptrace"] = "ok" if rc == 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
    try:
        out["start"] = start_time(f"/proc/{pid}/stat")
    except (OSError, ValueError, IndexError):
        out["start"] = None
    return out


def main():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    libc.ptrace.restype = ctypes.c_long
    views = {point: view(point) for point in proc_mounts()}
    own = os.getpid()
    visible = [int(p) for p in views.get("/proc", {}).get("pids", {}) if int(p) != own]
    asked = [int(a) for a in sys.argv[1:]]
    tried = {str(pid): attempt(libc, pid) for pid in sorted(set(asked) | set(visible))}
    print(json.dumps({"self": own, "views": views, "tried": tried}))


main()
