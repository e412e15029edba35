"""Probe: which namespaces this sandbox's processes can create.

Fed to the sandbox's python on stdin (standard library only; Python 3.11 has no ``os.unshare``, so libc's
``unshare`` through ctypes). For every kind of namespace Linux has (user, mount, pid, net, ipc, uts, cgroup,
time), and for each of them together with a new user namespace (which is how an unprivileged process gets
the others), a fresh child process calls ``unshare`` and reports "ok" or the errno's name; where it
succeeded, the child also reports its own ``/proc/self/ns/<kind>`` after the call, so the host can tell a
new namespace from the old one. Prints one JSON object: this process's own namespaces, its uid and the
attempts.
"""

import ctypes
import errno
import json
import os

KINDS = {"user": 0x10000000, "mnt": 0x00020000, "pid": 0x20000000, "net": 0x40000000, "ipc": 0x08000000,
         "uts": 0x04000000, "cgroup": 0x02000000, "time": 0x00000080}


# unshare(CLONE_NEWPID) and unshare(CLONE_NEWTIME) give the caller's children the new namespace, not the caller.
LINK = {"pid": "pid_for_children", "time": "time_for_children"}


def namespace(kind):
    try:
        return os.readlink(f"/proc/self/ns/{LINK.get(kind, kind)}")
    except OSError as e:
        return "unreadable: " + errno.errorcode.get(e.errno, str(e.errno))


def attempt(libc, flags, kind):
    """``unshare(flags)`` in a child (the call changes its caller); its answer, read back through a pipe."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        ctypes.set_errno(0)
        rc = libc.unshare(flags)
        err = ctypes.get_errno()
        out = {"result": "ok" if rc == 0 else errno.errorcode.get(err, str(err))}
        if rc == 0:
            out["after"] = {k: namespace(k) for k in sorted({"user", kind})}
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    chunks = []
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(r)
    os.waitpid(pid, 0)
    try:
        return json.loads(b"".join(chunks))
    except ValueError:
        return {"result": "no answer"}


def main():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.unshare.argtypes = [ctypes.c_int]
    own = {k: namespace(k) for k in KINDS}
    tried = {}
    for kind, flag in KINDS.items():
        tried[kind] = attempt(libc, flag, kind)
        if kind != "user":
            tried["user+" + kind] = attempt(libc, KINDS["user"] | flag, kind)
    print(json.dumps({"uid": os.getuid(), "own": own, "tried": tried}))


main()
