"""Probe: which namespaces this sandbox's processes can create.

Fed to the sandbox's python on stdin (standard library only; Python 3.11 has no ``os.unshare``, so libc's
``unshare`` through ctypes). For every kind of namespace Linux has (user, mount, pid, net, ipc, uts, cgroup,
time), and for each of them together with a new user namespace (which is how an unprivileged process gets
the others), a fresh child process calls ``unshare`` and reports "ok" or the errno's name; where it
succeeded, the child also reports its own ``/proc/self/ns/<kind>`` after the call, so the host can tell a
new namespace from the old one. Prints one JSON object: this process's own namespaces, its uid and the
attempts.

``unshare`` is one door of three: ``clone`` and ``clone3`` with CLONE_NEWUSER make a user namespace too (a
filter that refuses ``unshare`` alone leaves them open), so a new user namespace is also tried through each,
as raw system calls with no new stack (the child runs on a copy of the caller's, as after ``fork``):
"clone:user" and "clone3:user", and one combination, "clone:user+mnt".
"""

import ctypes
import errno
import json
import os
import platform
import signal
import struct

KINDS = {"user": 0x10000000, "mnt": 0x00020000, "pid": 0x20000000, "net": 0x40000000, "ipc": 0x08000000,
         "uts": 0x04000000, "cgroup": 0x02000000, "time": 0x00000080}


# unshare(CLONE_NEWPID) and unshare(CLONE_NEWTIME) give the caller's children the new namespace, not the caller.
LINK = {"pid": "pid_for_children", "time": "time_for_children"}


def namespace(kind):
    try:
        return os.readlink(f"/proc/self/ns/{LINK.get(kind, kind)}")
    except OSError as e:
        return "unreadable: " + errno.errorcode.get(e.errno, str(e.errno))


# clone and clone3 by number (x86_64, aarch64): the C library's wrappers need a stack for the child.
SYS_CLONE = {"x86_64": 56, "aarch64": 220}.get(platform.machine())
SYS_CLONE3 = 435


def _answer(rc, err, kind):
    out = {"result": "ok" if rc == 0 else errno.errorcode.get(err, str(err))}
    if rc == 0:
        out["after"] = {k: namespace(k) for k in sorted({"user", kind})}
    return out


def _cloned(libc, flags, kind, w, via):
    """``clone``/``clone3`` with ``flags``: in the child, its answer written to ``w`` and exit; in the
    caller, the child's pid (or, refused, the answer written to ``w`` and None)."""
    ctypes.set_errno(0)
    if via == "clone":
        if SYS_CLONE is None:
            os.write(w, json.dumps({"result": "no clone number for " + platform.machine()}).encode())
            return None
        pid = libc.syscall(ctypes.c_long(SYS_CLONE), ctypes.c_ulong(flags | signal.SIGCHLD), ctypes.c_ulong(0),
                           ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
    else:
        # struct clone_args, its first version (64 bytes): flags, pidfd, child_tid, parent_tid, exit_signal,
        # stack, stack_size, tls.
        args = ctypes.create_string_buffer(struct.pack("8Q", flags, 0, 0, 0, signal.SIGCHLD, 0, 0, 0))
        pid = libc.syscall(ctypes.c_long(SYS_CLONE3), args, ctypes.c_size_t(64))
    err = ctypes.get_errno()
    if pid == 0:
        os.write(w, json.dumps(_answer(0, 0, kind)).encode())
        os._exit(0)
    if pid < 0:
        os.write(w, json.dumps(_answer(-1, err, kind)).encode())
        return None
    return pid


def attempt(libc, flags, kind, via="unshare"):
    """``unshare(flags)`` in a child (the call changes its caller), or a child made by ``clone``/``clone3`` with
    ``flags``; its answer, read back through a pipe."""
    r, w = os.pipe()
    if via == "unshare":
        pid = os.fork()
        if pid == 0:
            os.close(r)
            ctypes.set_errno(0)
            rc = libc.unshare(flags)
            os.write(w, json.dumps(_answer(rc, ctypes.get_errno(), kind)).encode())
            os._exit(0)
    else:
        pid = _cloned(libc, flags, kind, w, via)
    os.close(w)
    chunks = []
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(r)
    if pid is not None:
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
    for via in ("clone", "clone3"):
        tried[via + ":user"] = attempt(libc, KINDS["user"], "user", via)
    # (a filter that matches clone's flags exactly, not by mask, lets a combination through)
    tried["clone:user+mnt"] = attempt(libc, KINDS["user"] | KINDS["mnt"], "mnt", "clone")
    print(json.dumps({"uid": os.getuid(), "own": own, "tried": tried}))


main()
