"""An agent's process that goes after the platform's probe while it runs (issue 28 item 4), and the bait it goes
after: used by the runtime's and the Docker engine's tests of ``Controller.run_binary_inside``."""

from __future__ import annotations

import os
import shutil

from acceptance.harness import observers as observe
from runtime.isolation import sandbox
from runtime.wait import until

# The agent's side: it looks in /proc for the bait's command line, takes its environment, opens its memory for
# writing, and says it did (``/data/touched``). It runs until killed. (Writing into the probe's output through
# ``/proc/PID/fd/1`` is refused here: the pipe is the host root's, whom the sandbox's user namespace does not map.)
WATCHER = r"""
import os, time
open("/data/watcher-ready", "w").close()
done = set()
while True:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if pid in done or int(pid) == os.getpid():
            continue
        try:
            if b"pairproof-bait" not in open(f"/proc/{pid}/cmdline", "rb").read():
                continue
            stolen = open(f"/proc/{pid}/environ", "rb").read()
        except OSError:
            continue
        done.add(pid)
        try:  # its memory, open for writing: anything it holds, its report among it, is the agent's to change
            open(f"/proc/{pid}/mem", "r+b").close()
            stolen += b"\nmem opened read-write"
        except OSError as exc:
            stolen += f"\nmem: {exc}".encode()
        open("/data/stolen", "wb").write(stolen)
        open("/data/touched", "w").close()
    time.sleep(0.01)
"""

# The bait (the host's sh, run by descriptor like the static probe): it waits up to 8 s for the watcher to have
# acted (it acts within milliseconds; the margin is for a loaded CI machine), then ends. Its marker is in its
# command line, its secret in its environment.
BAIT = 'i=0; while [ $i -lt 80 ] && [ ! -e /data/touched ]; do sleep 0.1; i=$((i+1)); done; echo bait-ended'
SECRET = "probe-sentinel-0c2e7d"


def start_watcher(controller, instance_id: str) -> None:
    written = controller.exec(instance_id, ["/bin/sh", "-c", "cat > /data/watcher.py"], stdin=WATCHER.encode())
    assert written.rc == 0, written
    started = controller.exec(instance_id, ["/bin/sh", "-c", "python3 /data/watcher.py </dev/null >/dev/null 2>&1 &"])
    assert started.rc == 0, started
    until(lambda: controller.exec(instance_id, ["test", "-e", "/data/watcher-ready"]).rc == 0, 10,
          "the watcher did not start in the sandbox")


def bait(run, proc):
    return run(proc, shutil.which("sh"), ["-c", BAIT, "pairproof-bait"], env={"PROBE_SECRET": SECRET}, timeout=30)


def stolen(controller, instance_id: str) -> str:
    """What the watcher took (empty: nothing), and its marks cleared for the next run."""
    stolen = controller.exec(instance_id, ["cat", "/data/stolen"]).stdout.decode(errors="replace")
    controller.exec(instance_id, ["rm", "-f", "/data/stolen", "/data/touched"])
    return stolen


def show_the_hold(controller, instance_id: str, monkeypatch) -> None:
    """The finding against the engine's own call (the old behaviour: the agent takes the probe's secret and opens
    its memory for writing), then the controller's: every process of the instance frozen from before the probe
    starts until it has ended, nothing taken, and all of them running again after."""
    proc = controller.sandbox(instance_id)
    engine = controller.engine if controller.engine is not None else sandbox
    start_watcher(controller, instance_id)

    old = bait(engine.run_binary_inside, proc)
    taken = stolen(controller, instance_id)
    assert SECRET in taken and "mem opened read-write" in taken, (old, taken)

    pids = proc.cgroup.pids()
    seen: list[dict[int, bool]] = []
    engine_run = engine.run_binary_inside

    def watched(*args, **kwargs):
        seen.append({pid: observe.frozen(pid) for pid in pids})
        return engine_run(*args, **kwargs)

    monkeypatch.setattr(engine, "run_binary_inside", watched)
    new = bait(controller.run_binary_inside, proc)  # nobody touches it: it waits its 8 s and ends
    assert new.rc == 0 and new.stdout == b"bait-ended\n", new
    assert seen == [dict.fromkeys(pids, True)], seen
    assert stolen(controller, instance_id) == ""
    # Thawed after, the watcher among them (stopped, not killed).
    assert {pid: observe.frozen(pid) for pid in pids} == dict.fromkeys(pids, False)
    assert proc.cgroup.pids() >= pids


def show_the_shell(controller, instance_id: str) -> None:
    """Items 4 and 5 for the suite's shell probes, which run with the instance running: the sandbox's own sh,
    started the way a shell probe was (``exec``), hands the watcher its secret; the suite's shell (busybox, by
    descriptor, mode 0711: ``run_binary_inside(hold=False, by_name=True)``) does not, though the watcher runs
    throughout (the old way's bait is taken again after it). And what runs is the suite's file, for the shell
    and for its commands: both are the host's busybox by device and inode, not a file of the image's."""
    from acceptance.harness.probes import shell_binary

    shell = shell_binary()
    assert shell is not None, "no suite shell: tools/setup-machine installs it as build/probe/sh"
    proc = controller.sandbox(instance_id)
    start_watcher(controller, instance_id)

    def the_sandbox_sh():
        # The marker only in the bait's own command line (an outer process naming it, without the secret yet,
        # would be taken first): the sh that execs it builds it from M.
        old = controller.exec(instance_id, ["env", f"PROBE_SECRET={SECRET}", "M=bait", f"B={BAIT}", "sh", "-c",
                                            'exec sh -c "$B" "pairproof-$M"'], timeout=30)
        assert old.rc == 0, old
        taken = stolen(controller, instance_id)
        assert SECRET in taken and "mem opened read-write" in taken, (old, taken)

    the_sandbox_sh()
    new = controller.run_binary_inside(proc, str(shell), ["-c", BAIT, "pairproof-bait"], env={"PROBE_SECRET": SECRET},
                                       timeout=30, hold=False, by_name=True)
    assert new.rc == 0 and new.stdout == b"bait-ended\n", new  # it waited its 8 s: nobody touched it
    assert stolen(controller, instance_id) == ""
    the_sandbox_sh()  # the watcher was alive all along

    which = controller.run_binary_inside(proc, str(shell), ["-c", "stat -L -c %d:%i /proc/$$/exe /proc/self/exe"],
                                         hold=False, by_name=True)
    host = os.stat(shell)
    assert which.rc == 0 and which.stdout.decode().split() == [f"{host.st_dev}:{host.st_ino}"] * 2, which
