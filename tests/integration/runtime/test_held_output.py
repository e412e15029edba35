"""A command entered into a sandbox that runs past its timeout is killed, and the call returns, even when a
process of the sandbox left the command's session and holds its output open (issue 28 item 4: after the kill,
``_finish`` waited on the output with no timeout, and one ``setsid`` in the agent's hands held a qualification
for ever)."""

from __future__ import annotations

import subprocess
import threading

import pytest

from runtime.isolation import sandbox
from runtime.isolation.sandbox import SandboxError

# The command leaves a process of its own session behind, holding stdout and stderr, then outlives its timeout.
HOLDS = ["/bin/sh", "-c", "setsid /bin/sleep 600 & exec /bin/sleep 600"]
STAY = ("/bin/sleep", "infinity")


def _finish_before(child, stdin, timeout, what):
    """``_finish`` as it was: after the kill, ``communicate()`` with no timeout."""
    try:
        out, err = child.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        import os
        import signal

        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        raise SandboxError(f"{what} ran past {timeout}s and was killed") from exc
    return sandbox.ExecOutcome(child.returncode, out, err)


@pytest.mark.parametrize("finish", ["before", "now"])
def test_a_command_whose_output_outlives_it_still_returns(controller, monkeypatch, finish):
    if finish == "before":
        monkeypatch.setattr(sandbox, "_finish", _finish_before)
    name = f"held-{finish}"
    proc = controller.launch_extra(name, STAY, uid=controller.spare_uid(4 if finish == "before" else 5))
    outcome: dict = {}

    def call() -> None:
        try:
            controller.run_inside(proc, HOLDS, timeout=2)
        except SandboxError as exc:
            outcome["error"] = str(exc)

    caller = threading.Thread(target=call, daemon=True)
    try:
        caller.start()
        # Now: killed at 2 s, the output drained for at most DRAIN_AFTER_KILL, then cut off.
        caller.join(timeout=2 + sandbox.DRAIN_AFTER_KILL + 10)
        if finish == "before":
            assert caller.is_alive(), "the old wait returned: the held output did not hold it"
        else:
            assert not caller.is_alive() and "ran past 2s and was killed" in outcome.get("error", ""), outcome
    finally:
        controller.remove_extra(name)  # the sandbox's processes go with it, the held pipe too
        caller.join(timeout=60)
    assert not caller.is_alive()


def test_a_command_that_prints_without_end_is_killed_at_the_output_bound(controller, monkeypatch):
    """Issue 28 item 10: what a command prints was read whole into the platform's memory, outside every cgroup:
    ``yes`` inside a sandbox grew it for the whole timeout. Past ``OUTPUT_MAX`` bytes (made small here) the
    command is killed and the call says so; a command under the bound keeps its whole output, stdin included."""
    monkeypatch.setattr(sandbox, "OUTPUT_MAX", 1 << 20)
    name = "prints"
    proc = controller.launch_extra(name, STAY, uid=controller.spare_uid(6))
    try:
        with pytest.raises(SandboxError, match="printed more than 1048576 bytes and was killed"):
            controller.run_inside(proc, ["/usr/bin/yes"], timeout=60)
        big = b"x" * (3 << 18)  # 768 KiB through stdin and back, beside stderr
        outcome = controller.run_inside(proc, ["/bin/sh", "-c", "cat; echo done >&2"], stdin=big, timeout=60)
        assert (outcome.rc, outcome.stdout, outcome.stderr) == (0, big, b"done\n")
    finally:
        controller.remove_extra(name)
