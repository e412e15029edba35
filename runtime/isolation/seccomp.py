"""The sandbox's seccomp filter: system calls that need no capability but widen the kernel surface an agent
can reach, refused with EPERM; everything else allowed.

Docker's default profile refuses these to a container without the capability they would need; bubblewrap
installs no filter of its own, so the reference sandbox is given this one (``bwrap --seccomp FD``, applied
after bwrap has built the sandbox, just before the agent's command runs). A command the platform runs inside a
running sandbox (``nsenter`` from the host: a probe, the agent's own commands) gets the same filter before it
enters (``python3 -I -S seccomp.py -- ARGV``: install, then exec), so what runs inside, entered or started,
is refused the same calls.

Refused (each reached with no capability, each a door into kernel code the agent has no use for):

- the key management calls (``keyctl``, ``add_key``, ``request_key``): the kernel keyrings are not
  namespaced per sandbox;
- ``bpf``, ``perf_event_open``, ``userfaultfd``: eBPF, the perf subsystem, user-space page-fault handling
  (a staple of kernel exploits: it stalls the kernel mid-copy);
- ``io_uring_setup``, ``io_uring_enter``, ``io_uring_register``: a second system-call interface that seccomp
  cannot see into;
- ``unshare``: no namespace of its own (the sandbox disables user namespaces too, ``--disable-userns``);
- ``ioctl`` creating a btrfs subvolume or snapshot (``BTRFS_IOCTLS``): the volume's size limit is a btrfs quota
  group of its subvolume (``quota.py``), and a subvolume made inside it, which any writer of a folder may make,
  would be a quota group of its own with no limit: a way around the quota.

``setns`` stays allowed: ``nsenter`` calls it after the filter is installed (and the agent holds no capability
it would need). Another architecture's calls (x86's 32-bit ABI, x32) would reach the kernel under other
numbers: the process is killed (x32: refused).

Standard library only (classic BPF assembled with ``struct``, installed with ``prctl`` through ``ctypes``):
this file also runs as a script.
"""

from __future__ import annotations

import errno
import os
import platform
import struct
import sys

# Per architecture: the AUDIT_ARCH value seccomp_data.arch carries, and the refused calls' numbers.
ARCHES = {
    "x86_64": (0xC000003E, {"keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321, "perf_event_open": 298,
                            "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426,
                            "io_uring_register": 427, "unshare": 272}),
    "aarch64": (0xC00000B7, {"keyctl": 219, "add_key": 217, "request_key": 218, "bpf": 280, "perf_event_open": 241,
                             "userfaultfd": 282, "io_uring_setup": 425, "io_uring_enter": 426,
                             "io_uring_register": 427, "unshare": 97}),
}
REFUSED = tuple(ARCHES["x86_64"][1])
X32_BIT = 0x40000000
IOCTL = {"x86_64": 16, "aarch64": 29}
# _IOW(0x94, nr, 4096-byte args): SNAP_CREATE (1), SUBVOL_CREATE (14), SNAP_CREATE_V2 (23), SUBVOL_CREATE_V2 (24).
# The kernel reads ioctl's command as 32 bits: only the argument's low word is compared (a high word set by the
# caller changes nothing).
BTRFS_IOCTLS = {"BTRFS_IOC_SNAP_CREATE": 0x50009401, "BTRFS_IOC_SUBVOL_CREATE": 0x5000940E,
                "BTRFS_IOC_SNAP_CREATE_V2": 0x50009417, "BTRFS_IOC_SUBVOL_CREATE_V2": 0x50009418}
_ARG1_LOW = 24  # offsetof(struct seccomp_data, args[1]), little-endian low word

_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_RET_K = 0x06
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_RET_KILL_PROCESS = 0x80000000


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k & 0xFFFFFFFF)


def program(machine: str | None = None) -> bytes:
    """The filter, as the ``struct sock_filter`` array bwrap's ``--seccomp`` and ``prctl`` take."""
    machine = machine or platform.machine()
    if machine not in ARCHES:
        raise RuntimeError(f"no seccomp filter for {machine}: only {sorted(ARCHES)}")
    arch, numbers = ARCHES[machine]
    nrs = [numbers[name] for name in REFUSED]
    # (code, jt, jf, k); a jump target of "refuse" or "allow" is resolved below to the last two instructions.
    body: list[tuple[int, object, object, int]] = [
        (_LD_W_ABS, 0, 0, 4),                    # A = seccomp_data.arch
        (_JEQ_K, 1, 0, arch),                    # native: skip the kill
        (_RET_K, 0, 0, _RET_KILL_PROCESS),
        (_LD_W_ABS, 0, 0, 0),                    # A = seccomp_data.nr
    ]
    if machine == "x86_64":
        body.append((_JGE_K, "refuse", 0, X32_BIT))  # x32 ABI
    body += [(_JEQ_K, "refuse", 0, nr) for nr in nrs]
    body.append((_JEQ_K, 0, "allow", IOCTL[machine]))  # ioctl: its command, below; anything else is allowed
    body.append((_LD_W_ABS, 0, 0, _ARG1_LOW))
    body += [(_JEQ_K, "refuse", 0, cmd) for cmd in BTRFS_IOCTLS.values()]
    allow, refuse = len(body), len(body) + 1
    out = []
    for at, (code, jt, jf, k) in enumerate(body):
        jumps = [{"allow": allow, "refuse": refuse}[j] - at - 1 if isinstance(j, str) else j for j in (jt, jf)]
        out.append(_insn(code, jumps[0], jumps[1], k))
    out.append(_insn(_RET_K, 0, 0, _RET_ALLOW))
    out.append(_insn(_RET_K, 0, 0, _RET_ERRNO | errno.EPERM))
    return b"".join(out)


# Docker's containers (runtime/isolation/containers.py) get a profile of the platform's own instead of the
# engine's default: the engine on this machine (20.10) lets io_uring through its default profile (Docker 25
# refuses it), and a container cannot have two profiles. Refused there: ``REFUSED`` (above) and, with them, the
# calls Docker documents its default profile as refusing to a container without the capability they need
# (https://docs.docker.com/engine/security/seccomp/), so that the platform's profile refuses at least what the
# engine's default did by name; clone3 answers ENOSYS (the C library then uses clone, whose namespace flags are
# refused below), and clone with any namespace flag is refused, as the default refuses it without CAP_SYS_ADMIN.
DOCKER_REFUSED = ("acct", "bpf", "clock_adjtime", "clock_settime", "create_module", "delete_module", "finit_module",
                  "get_kernel_syms", "init_module", "ioperm", "iopl", "kexec_file_load", "kexec_load",
                  "lookup_dcookie", "mount", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "open_tree",
                  "name_to_handle_at", "nfsservctl", "open_by_handle_at", "pivot_root", "query_module", "quotactl",
                  "reboot", "settimeofday", "stime", "swapoff", "swapon", "sysfs", "_sysctl", "umount", "umount2",
                  "uselib", "ustat", "vm86", "vm86old", "vhangup", "syslog")
CLONE_NAMESPACES = {"CLONE_NEWNS": 0x00020000, "CLONE_NEWCGROUP": 0x02000000, "CLONE_NEWUTS": 0x04000000,
                    "CLONE_NEWIPC": 0x08000000, "CLONE_NEWUSER": 0x10000000, "CLONE_NEWPID": 0x20000000,
                    "CLONE_NEWNET": 0x40000000}


def docker_profile() -> str:
    """The container's seccomp profile, in Docker's JSON (``--security-opt seccomp=<json>``)."""
    import json

    refused = sorted(set(REFUSED) | set(DOCKER_REFUSED))
    syscalls = [{"names": refused, "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM},
                {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.ENOSYS}]
    syscalls += [{"names": ["clone"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM,
                  "args": [{"index": 0, "value": flag, "valueTwo": flag, "op": "SCMP_CMP_MASKED_EQ"}]}
                 for flag in CLONE_NAMESPACES.values()]
    # (arg & 0xffffffff) == cmd: the kernel reads the command's low 32 bits only.
    syscalls += [{"names": ["ioctl"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM,
                  "args": [{"index": 1, "value": 0xFFFFFFFF, "valueTwo": cmd, "op": "SCMP_CMP_MASKED_EQ"}]}
                 for cmd in BTRFS_IOCTLS.values()]
    arches = {"x86_64": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
              "aarch64": ["SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"]}.get(platform.machine(), [])
    return json.dumps({"defaultAction": "SCMP_ACT_ALLOW", "architectures": arches, "syscalls": syscalls},
                      separators=(",", ":"))


def program_fd() -> int:
    """A new descriptor (inheritable, read from its start) holding ``program()``: what ``bwrap --seccomp`` reads."""
    data = program()
    fd = os.memfd_create("pairproof-seccomp", 0)
    try:
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


def filters_of(pid: int) -> list[bytes]:
    """The seccomp filters process ``pid`` runs under, oldest first (the order to install them in), read from the
    kernel as CRIU reads them (``PTRACE_SECCOMP_GET_FILTER``): the process is seized and interrupted for the read,
    a millisecond, then released as it was. Empty when it has none. Root only. A container's processes all run under
    its pid 1's filters (runc installs them before the container's first program; a filter is never removed), so a
    process of the platform's entered into the container from the host takes them from here: refused what the agent
    is refused, whatever profile the container was given (the platform's, the engine's default, none)."""
    import ctypes

    with open(f"/proc/{pid}/status", "rb") as status:
        mode = next((line.split()[1] for line in status if line.startswith(b"Seccomp:")), b"0")
    if mode == b"0":
        return []
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    libc.ptrace.restype = ctypes.c_long
    seize, interrupt, detach, get_filter, wall = 0x4206, 0x4207, 17, 0x420C, 0x40000000

    def fail(what: str) -> OSError:
        err = ctypes.get_errno()
        return OSError(err, f"cannot read the seccomp filters of pid {pid}: {what}: {os.strerror(err)}")

    if libc.ptrace(seize, pid, None, None) != 0:
        raise fail("PTRACE_SEIZE")
    filters = []
    try:
        if libc.ptrace(interrupt, pid, None, None) != 0:
            raise fail("PTRACE_INTERRUPT")
        os.waitpid(pid, wall)
        while True:
            count = libc.ptrace(get_filter, pid, ctypes.c_void_p(len(filters)), None)
            if count < 0:
                if ctypes.get_errno() == errno.ENOENT:
                    break
                raise fail("PTRACE_SECCOMP_GET_FILTER")
            buf = ctypes.create_string_buffer(count * 8)
            if libc.ptrace(get_filter, pid, ctypes.c_void_p(len(filters)), buf) != count:
                raise fail("PTRACE_SECCOMP_GET_FILTER")
            filters.append(buf.raw)
    finally:
        libc.ptrace(detach, pid, None, None)
    if not filters:
        raise OSError(errno.ENOENT, f"pid {pid} is in seccomp mode {mode.decode()} but the kernel gave no filter")
    return filters[::-1]  # the kernel lists the newest first


def pack(filters: list[bytes]) -> bytes:
    """Filters as one blob for ``containers.ENTER_AS`` (each: its length in bytes, 4 bytes big-endian, then itself)."""
    return b"".join(len(f).to_bytes(4, "big") + f for f in filters)


def install() -> None:
    """Install the filter on this process (and so on everything it execs or forks)."""
    import ctypes

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    data = program()
    buf = ctypes.create_string_buffer(data, len(data))
    prog = SockFprog(len(data) // 8, ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_seccomp, seccomp_mode_filter = 22, 2
    if libc.prctl(pr_set_seccomp, seccomp_mode_filter, ctypes.byref(prog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"cannot install the seccomp filter: {os.strerror(err)}")


def main(argv: list[str]) -> int:
    """``seccomp.py -- COMMAND...``: install the filter, then exec the command."""
    if len(argv) < 2 or argv[0] != "--":
        print("usage: seccomp.py -- COMMAND [ARG...]", file=sys.stderr)
        return 2
    install()
    os.execvp(argv[1], argv[1:])
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
