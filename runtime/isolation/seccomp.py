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
- ``unshare``: no namespace of its own (the sandbox disables user namespaces too, ``--disable-userns``).

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
    checks = len(nrs) + (1 if machine == "x86_64" else 0)
    out = [
        _insn(_LD_W_ABS, 0, 0, 4),               # A = seccomp_data.arch
        _insn(_JEQ_K, 1, 0, arch),               # native: skip the kill
        _insn(_RET_K, 0, 0, _RET_KILL_PROCESS),
        _insn(_LD_W_ABS, 0, 0, 0),               # A = seccomp_data.nr
    ]
    # Each check jumps to the refusal (after the remaining checks and the allow) when it matches.
    left = checks
    if machine == "x86_64":
        out.append(_insn(_JGE_K, left, 0, X32_BIT))  # x32 ABI
        left -= 1
    for nr in nrs:
        out.append(_insn(_JEQ_K, left, 0, nr))
        left -= 1
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
