"""Probe: the runtime's posture as the agent meets it (PS-1), judged by behaviour from inside the sandbox.

Fed to the sandbox's python on stdin (standard library only: raw system calls through ctypes), with the sections
to run and the declared writable mount points as arguments::

    python3 -I -S - NONCE SECTION[,SECTION...] WRITABLE...

Sections (each one key of the JSON object printed on the last line):

- ``walk``: every folder of the visible filesystem (/proc and /sys left out), links not followed. In every folder
  whose mount is not one of the declared writable mount points, a new file is created (``O_CREAT|O_EXCL``; removed
  at once if it was made) and the answer kept: "EROFS" is the only one a read-only root gives. Every entry
  that is neither folder, file nor link is looked at, and every mount point (a device bound over a file is
  listed by its folder as the file): each character or block device node is listed with its numbers. A folder
  this uid cannot search answers EACCES before its mount is looked at: its mount's read-only flag (statvfs)
  answers for it. The walk proves it looked: the counts per mount, the folders it could not list, and the same
  create in the first declared writable mount point that is a mount (it must succeed) and /dev/null found as a
  device (the detector sees a device).
- ``seccomp``: the ``Seccomp:`` line of /proc/self/status, and each system call that needs no capability but
  widens the kernel surface, made with arguments that do no harm (an invalid command, a NULL pointer, no
  flags): "ok" or the errno's name; EPERM/ENOSYS only when something refused the call before the kernel
  looked at it. Ordinary calls (getpid, open) are made the same way.
- ``mounts``: every line of /proc/self/mountinfo whose optional fields carry ``shared:`` propagation.
- ``ns``: this process's namespace links (read from /proc/self/ns) and its /proc/self/cgroup.
- ``hog``: one more process than the CPUs this sandbox sees, each spinning for HOG_SECONDS of wall time; the CPU
  time they got (their rusage) over the wall time they ran.
"""

import ctypes
import errno
import json
import os
import platform
import stat
import sys
import time

SKIP = ("/proc", "/sys")
HOG_SECONDS = 1.0
# name -> (x86_64 number, aarch64 number, arguments): each made so that, let through, the kernel answers it
# without creating anything (an invalid command or flag, a NULL pointer).
CALLS = {
    "keyctl": (250, 219, (-1, 0, 0, 0, 0)),            # no such command: EOPNOTSUPP
    "add_key": (248, 217, (0, 0, 0, 0, 0)),            # type NULL: EFAULT
    "request_key": (249, 218, (0, 0, 0, 0)),           # type NULL: EFAULT
    "bpf": (321, 280, (9999, 0, 0)),                   # no such command: EINVAL
    "perf_event_open": (298, 241, (0, 0, -1, -1, 0)),  # attr NULL: EFAULT
    "userfaultfd": (323, 282, (0x1 | 0x4000000,)),     # user-mode only, with an unknown flag: EINVAL
    "io_uring_setup": (425, 425, (0, 0)),              # no entries, params NULL: EFAULT or EINVAL
    "unshare": (272, 97, (0,)),                        # no flags: a no-op that succeeds
}
ORDINARY = {"getpid": (39, 172, ())}


def err(e):
    return errno.errorcode.get(e, str(e))


def mountinfo():
    """[(mount point, optional fields, fstype)] from /proc/self/mountinfo."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields = left.split()
            point = fields[4].replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")
            out.append((point, fields[6:], right.split()[0] if right.split() else "?", line.rstrip("\n")))
    return out


def mount_of(path, points):
    best = "/"
    for p in points:
        if (path == p or path.startswith(p.rstrip("/") + "/")) and len(p) > len(best):
            best = p
    return best


def try_create(folder, nonce):
    path = os.path.join(folder, f".pp-posture-{nonce}")
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
    except OSError as e:
        if e.errno == errno.EACCES and not os.access(folder, os.X_OK):
            # A folder this uid cannot search answers EACCES before the kernel looks at its mount: the mount's
            # own flag (statvfs needs no search permission on the folder itself) says whether it is read-only.
            try:
                read_only = os.statvfs(folder).f_flag & os.ST_RDONLY
            except OSError as e2:
                return "unsearchable, statvfs " + err(e2.errno)
            return "EROFS" if read_only else "EACCES (unsearchable folder on a writable mount)"
        return err(e.errno)
    os.close(fd)
    try:
        os.unlink(path)
    except OSError:
        pass
    return "created"


def walk(nonce, writable):
    mounts = mountinfo()
    points = sorted({m[0] for m in mounts})
    exempt = {p for p in writable if p in points}
    counts, open_folders, devices, unlisted = {}, {}, [], []
    stack = ["/"]
    while stack:
        folder = stack.pop()
        mount = mount_of(folder, points)
        if mount not in exempt:
            answer = try_create(folder, nonce)
            key = f"{mount} {answer}"
            counts[key] = counts.get(key, 0) + 1
            if answer != "EROFS":
                open_folders[folder] = {"mount": mount, "answer": answer}
        else:
            counts[f"{mount} exempt"] = counts.get(f"{mount} exempt", 0) + 1
        try:
            entries = list(os.scandir(folder))
        except OSError as e:
            unlisted.append(f"{folder}: {err(e.errno)}")
            continue
        for entry in entries:
            path = entry.path if folder != "/" else "/" + entry.name
            if path in SKIP:
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(path)
                    continue
                if entry.is_file(follow_symlinks=False) or entry.is_symlink():
                    continue
                st = os.lstat(path)
            except OSError as e:
                unlisted.append(f"{path}: {err(e.errno)}")
                continue
            if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
                devices.append({"path": path, "kind": "char" if stat.S_ISCHR(st.st_mode) else "block",
                                "major": os.major(st.st_rdev), "minor": os.minor(st.st_rdev)})
    # A device bound over a file (bubblewrap's --dev-bind) is listed by its folder as the file it covers: every
    # mount point is looked at itself.
    listed = {d["path"] for d in devices}
    for point in points:
        if point in listed or any(point == s or point.startswith(s + "/") for s in SKIP):
            continue
        try:
            st = os.lstat(point)
        except OSError as e:
            unlisted.append(f"{point}: {err(e.errno)}")
            continue
        if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
            devices.append({"path": point, "kind": "char" if stat.S_ISCHR(st.st_mode) else "block",
                            "major": os.major(st.st_rdev), "minor": os.minor(st.st_rdev)})
    proof_at = sorted(exempt)[0] if exempt else None
    return {"counts": counts, "open": open_folders, "devices": devices, "unlisted": unlisted,
            "exempt": sorted(exempt), "proof_create": {"at": proof_at, "answer": try_create(proof_at, nonce)
                                                       if proof_at else "no declared writable mount"}}


def syscalls():
    machine = platform.machine()
    column = {"x86_64": 0, "aarch64": 1}.get(machine)
    with open("/proc/self/status") as f:
        status = dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
    out = {"machine": machine, "Seccomp": status.get("Seccomp", "absent").strip(),
           "Seccomp_filters": status.get("Seccomp_filters", "absent").strip(), "calls": {}, "ordinary": {}}
    if column is None:
        return {**out, "error": f"no system call numbers for {machine}"}
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    for group, table in (("calls", CALLS), ("ordinary", ORDINARY)):
        for name, spec in table.items():
            args = [ctypes.c_long(a) for a in spec[2]]
            ctypes.set_errno(0)
            rc = libc.syscall(ctypes.c_long(spec[column]), *args)
            e = ctypes.get_errno()
            if rc >= 0 and name in ("userfaultfd", "io_uring_setup", "perf_event_open"):
                os.close(rc)  # a descriptor after all: not kept
            out[group][name] = "ok" if rc >= 0 else err(e)
    try:
        fd = os.open("/proc/self/status", os.O_RDONLY)
        os.close(fd)
        out["ordinary"]["open"] = "ok"
    except OSError as e:
        out["ordinary"]["open"] = err(e.errno)
    return out


def shared_mounts():
    return {"mounts": len(mountinfo()),
            "shared": [line for _, optional, _, line in mountinfo() if any(o.startswith("shared:") for o in optional)]}


def namespaces():
    out = {}
    for kind in ("uts", "cgroup", "mnt", "pid", "net", "ipc", "user"):
        try:
            out[kind] = os.readlink(f"/proc/self/ns/{kind}")
        except OSError as e:
            out[kind] = "unreadable: " + err(e.errno)
    with open("/proc/self/cgroup") as f:
        return {"ns": out, "cgroup": f.read().splitlines()}


def hog():
    workers = (os.cpu_count() or 1) + 1
    start = time.monotonic()
    end = start + HOG_SECONDS
    pids = []
    for _ in range(workers):
        pid = os.fork()
        if pid == 0:
            while time.monotonic() < end:
                pass
            os._exit(0)
        pids.append(pid)
    cpu = 0.0
    for pid in pids:
        _, _, usage = os.wait4(pid, 0)
        cpu += usage.ru_utime + usage.ru_stime
    wall = time.monotonic() - start
    return {"workers": workers, "cpu_seconds": round(cpu, 3), "wall_seconds": round(wall, 3),
            "cpus_used": round(cpu / wall, 3) if wall else None}


def main(argv):
    nonce, sections, writable = argv[0], argv[1].split(","), argv[2:]
    report = {"nonce": nonce, "uid": os.getuid()}
    for section in sections:
        report[section] = {"walk": lambda: walk(nonce, writable), "seccomp": syscalls, "mounts": shared_mounts,
                           "ns": namespaces, "hog": hog}[section]()
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1:])
