"""Nothing in a reference sandbox can create a user namespace (catalogue PR-3): two layers, each shown by itself.
bwrap's ``--disable-userns`` refuses every call that would make one (ENOSPC: the nested namespace's limit is
zero), and the seccomp filter (``runtime/isolation/seccomp.py``) refuses ``unshare`` before the kernel looks
(EPERM); ``clone`` with CLONE_NEWUSER passes the filter and meets the first layer.

Real bwrap sandboxes (``Controller.launch_extra``), real processes calling ``unshare``: the sandbox's own
command (its pid-1 child, as the agent runs) and a command entered from the host (``run_inside``, as every
probe of the suite runs), which must also land in the sandbox's namespaces, nested user namespace included,
as the instance's uid with no capability. The same sandbox launched without ``--disable-userns`` and without the
filter lets both make one by either call, so the refusal is the two layers' doing and the checks can fail.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from runtime.isolation import sandbox

# Tries unshare(CLONE_NEWUSER) in a forked child, and clone(CLONE_NEWUSER) (the raw call, no new stack: the
# child runs on a copy of the caller's); prints, per call, the errno's name or "ok" and the child's user
# namespace after it, and the caller's before. Python 3.11 has no os.unshare: libc through ctypes.
TRY = r"""
import ctypes, errno, json, os, platform, signal
libc = ctypes.CDLL(None, use_errno=True)
before = os.readlink("/proc/self/ns/user")
def answer(rc, err):
    return {"result": "ok" if rc == 0 else errno.errorcode.get(err, str(err)), "after": os.readlink("/proc/self/ns/user")}
def by_unshare(w):
    pid = os.fork()
    if pid == 0:
        rc = libc.unshare(0x10000000)
        os.write(w, json.dumps(answer(rc, ctypes.get_errno())).encode())
        os._exit(0)
    return pid
def by_clone(w):
    nr = {"x86_64": 56, "aarch64": 220}[platform.machine()]
    pid = libc.syscall(ctypes.c_long(nr), ctypes.c_ulong(0x10000000 | signal.SIGCHLD), ctypes.c_ulong(0),
                       ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
    if pid == 0:
        os.write(w, json.dumps(answer(0, 0)).encode())
        os._exit(0)
    if pid < 0:
        os.write(w, json.dumps(answer(-1, ctypes.get_errno())).encode())
        return None
    return pid
out = {}
for name, call in (("unshare", by_unshare), ("clone", by_clone)):
    r, w = os.pipe()
    pid = call(w)
    os.close(w)
    out[name] = json.loads(os.read(r, 4096))
    os.close(r)
    if pid is not None:
        os.waitpid(pid, 0)
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
print(json.dumps({"before": before, **out, "uid": os.getuid(),
                  "caps": {k: status[k].strip() for k in ("CapInh", "CapPrm", "CapEff", "CapAmb")}}))
"""
# The sandbox's own command: the same attempt, its answer written where the host can read it, then it stays.
OWN = ("/bin/sh", "-c", "/usr/bin/python3 -I -S -c \"$0\" > /run/agent/answer.tmp && "
       "mv /run/agent/answer.tmp /run/agent/answer && exec /bin/sleep infinity", TRY)
NAMESPACES = ("user", "mnt", "pid", "net", "ipc", "uts", "cgroup")


def _answer(proc: sandbox.SandboxProcess, deadline: float = 15.0) -> dict:
    path = proc.spec.control_dir / "answer"
    end = time.monotonic() + deadline
    while not path.exists():
        if not proc.alive() or time.monotonic() > end:
            raise TimeoutError(f"the sandbox's own attempt gave no answer within {deadline}s")
        time.sleep(0.01)
    return json.loads(path.read_text())


def _entered(controller, proc) -> dict:
    out = controller.run_inside(proc, ["/usr/bin/python3", "-I", "-S", "-c", TRY], timeout=30)
    assert out.rc == 0, out.stderr
    return json.loads(out.stdout.decode().strip().splitlines()[-1])


def _open(argv: list[str]) -> list[str]:
    """The launcher's argv without ``--disable-userns`` and without ``--seccomp FD``."""
    at = argv.index("--seccomp")
    return [a for a in argv[:at] + argv[at + 2:] if a != "--disable-userns"]


# What each call answers: both layers (unshare meets the filter, clone passes it and meets --disable-userns);
# neither (both make one).
EXPECTED = {True: {"unshare": "EPERM", "clone": "ENOSPC"}, False: {"unshare": "ok", "clone": "ok"}}


@pytest.mark.parametrize("guarded", [True, False], ids=["both-layers", "without-either"])
def test_no_process_in_the_sandbox_can_create_a_user_namespace(controller, guarded):
    edit = None if guarded else _open
    name = f"userns-{'guarded' if guarded else 'open'}"
    uid = controller.spare_uid(1 if guarded else 2)
    proc = controller.launch_extra(name, OWN, uid=uid, edit=edit)
    try:
        own = _answer(proc)
        entered = _entered(controller, proc)
        # The entered command is where the agent is: the sandbox's namespaces (its nested user namespace
        # too), its uid, no capability in any set it could use.
        host = {ns: os.readlink(f"/proc/{proc.host_pid}/ns/{ns}") for ns in NAMESPACES}
        assert entered["before"] == own["before"] == host["user"]
        assert entered["uid"] == own["uid"] == uid
        assert set(entered["caps"].values()) == {"0000000000000000"}
        for answer in (own, entered):
            assert {call: answer[call]["result"] for call in EXPECTED[guarded]} == EXPECTED[guarded], answer
            for call in EXPECTED[guarded]:
                assert (answer[call]["after"] == answer["before"]) is guarded, answer
    finally:
        controller.remove_extra(name)


def test_a_command_entered_from_the_host_lands_in_every_namespace_of_the_sandbox(controller):
    """``enter_argv`` (root enters, then drops to the instance's uid): every namespace of the entered process
    is the sandbox's, checked on the host's /proc of the sandbox's pid 1."""
    name = "userns-enter"
    proc = controller.launch_extra(name, OWN, uid=controller.spare_uid(3))
    try:
        _answer(proc)
        script = f"import json, os; print(json.dumps({{n: os.readlink('/proc/self/ns/' + n) for n in {NAMESPACES!r}}}))"
        out = controller.run_inside(proc, ["/usr/bin/python3", "-I", "-S", "-c", script], timeout=30)
        assert out.rc == 0, out.stderr
        seen = json.loads(out.stdout.decode().strip().splitlines()[-1])
        host = {ns: os.readlink(f"/proc/{proc.host_pid}/ns/{ns}") for ns in NAMESPACES}
        assert seen == host
        assert all(host[ns] != os.readlink(f"/proc/self/ns/{ns}") for ns in NAMESPACES)
    finally:
        controller.remove_extra(name)
