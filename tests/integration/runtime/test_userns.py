"""Nothing in a reference sandbox can create a user namespace (bwrap ``--disable-userns``; catalogue PR-3).

Real bwrap sandboxes (``Controller.launch_extra``), real processes calling ``unshare``: the sandbox's own
command (its pid-1 child, as the agent runs) and a command entered from the host (``run_inside``, as every
probe of the suite runs), which must also land in the sandbox's namespaces, nested user namespace included,
as the instance's uid with no capability. The same sandbox launched without ``--disable-userns`` lets both
make one, so the refusal is the flag's doing and the checks can fail.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from runtime.isolation import sandbox

# Tries unshare(CLONE_NEWUSER) in a child; prints the errno's name or "ok", and the child's user namespace
# before and after. Python 3.11 has no os.unshare: libc through ctypes.
TRY = r"""
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
before = os.readlink("/proc/self/ns/user")
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    rc = libc.unshare(0x10000000)
    err = ctypes.get_errno()
    os.write(w, json.dumps({"result": "ok" if rc == 0 else errno.errorcode.get(err, str(err)),
                            "after": os.readlink("/proc/self/ns/user")}).encode())
    os._exit(0)
os.close(w)
answer = json.loads(os.read(r, 4096))
os.waitpid(pid, 0)
status = dict(line.split(":", 1) for line in open("/proc/self/status") if ":" in line)
print(json.dumps({"before": before, **answer, "uid": os.getuid(),
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


@pytest.mark.parametrize("guarded", [True, False], ids=["disable-userns", "without-it"])
def test_no_process_in_the_sandbox_can_create_a_user_namespace(controller, guarded):
    edit = None if guarded else (lambda argv: [a for a in argv if a != "--disable-userns"])
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
            if guarded:
                assert answer["result"] == "ENOSPC", answer
                assert answer["after"] == answer["before"]
            else:
                assert answer["result"] == "ok", answer
                assert answer["after"] != answer["before"]
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
