"""PB-1: the platform's probe is out of the instance's reach while it runs.

The static probe runs where the agent lives (its uid, its namespaces), and what it reports is the evidence every
refusal rests on. An agent that can find it in /proc can read its environment (the sentinels it must find), open
its memory for writing and trace it: it could hand the harness a report of its own, a false PASS. So a hostile
instance is simulated: a *watcher* started in A's sandbox as any process of the agent's (Python where the sandbox
has it, else a shell loop) records the environment of every process that carries a sentinel and whether it could
open that process's memory read-write. A's whole visible filesystem is
then scanned as the FS cases scan it, with the watcher running, and the watcher must have recorded nothing.

The suite's shell probes must act on the running agent (signal it, trace it, call its API), so they cannot run
with it frozen: they run the suite's own shell (busybox, by descriptor, mode 0711 so the kernel runs it
non-dumpable), which the agent can neither trace nor read. The refusal therefore also runs a shell probe carrying
a sentinel for 100 ms after the scan, and the watcher must not have recorded it either.

Its P control shows the watcher sees what it is meant to see, fast enough: a process started beside it from the
sandbox's own files (its ``/bin/sh``, which has no such protection) that lives 100 ms with a fresh sentinel in its
environment is recorded. The refusal checks the same again after its scan and shell probe, so the watcher is
known to have been alive and watching across them. The mutants that break the guard (the probe run beside a
running agent; only the agent's first process stopped; commands started in the sandbox left out of the freezer;
the suite's shell run from a readable copy) are each killed by the refusal.
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass

import pytest

from acceptance.errors import ProofError
from acceptance.harness.evidence import attach
from acceptance.harness.probes import SHELL_BUILT, shell_binary

pytestmark = pytest.mark.usefixtures("planted")

# The watcher, as an agent would write it: it records every process whose environment names a sentinel (pid,
# command line, environment) and opens its memory read-write (``mem-rw`` recorded when that worked). Python where
# the sandbox has it (a pass over /proc takes well under a millisecond), else a shell loop (sh and coreutils: tens
# of milliseconds a pass, which the P control's short bait then shows too slow, and the case is broken, not
# passed). It writes its pid, marks itself ready and runs until killed. ``rec`` is a file in the sandbox's /tmp.
WATCHER_PY = r"""
import os, sys
rec = sys.argv[1]
me = os.getpid()
open(rec + ".pid", "w").write(str(me))
open(rec, "w").close()
open(rec + ".ready", "w").close()
done = set()
while True:
    for p in os.listdir("/proc"):
        if not p.isdigit() or p in done or int(p) == me:
            continue
        try:
            with open(f"/proc/{p}/environ", "rb") as f:
                env = f.read()
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if b"SENTINEL" not in env:
            continue
        done.add(p)
        cmd, env = (b.replace(bytes(1), b" ").decode(errors="replace") for b in (cmd, env))
        line = f"seen {p}: {cmd} | {env}\n"
        try:
            os.close(os.open(f"/proc/{p}/mem", os.O_RDWR))
            line += f"mem-rw {p}\n"
        except OSError:
            pass
        with open(rec, "a") as out:
            out.write(line)
"""
WATCHER_SH = r"""
rec=$1
echo $$ > $rec.pid
: > $rec
: > $rec.ready
while :; do
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = $$ ] && continue
    e=$(tr '\0' ' ' < $d/environ 2>/dev/null) || continue
    case "$e" in *SENTINEL*) ;; *) continue;; esac
    c=$(tr '\0' ' ' < $d/cmdline 2>/dev/null)
    echo "seen $p: $c | $e" >> $rec
    if (exec 3<>$d/mem) 2>/dev/null; then echo "mem-rw $p" >> $rec; fi
  done
done
"""
# The bait: a process of the sandbox's own files (its /bin/sh, started by a probe) that lives as long as the suite's
# shell probe below (100 ms: a bait shorter than the probe it stands for measures the machine's load, not the
# watcher's reach; under CI's load a 20 ms bait went unseen and the case was broken) with a fresh
# sentinel in its environment, shorter than any scan of a whole visible filesystem; then up to 2 s for the
# watcher's record to name it. (The suite's own shell, busybox run non-dumpable, would not do: the watcher cannot
# read it, which is what the refusal checks.)
BAIT = ("env PAIRPROOF_BAIT_SENTINEL={token} /bin/sh -c 'sleep 0.1'; i=0; while [ $i -lt 40 ]; do "
        "case \"$(cat {rec})\" in *{token}*) exit 0;; esac; sleep 0.05; i=$((i+1)); done; exit 1")
# A shell probe of the suite's carrying a sentinel for 100 ms, run in the refusal after the scan: the probes that
# run with the instance running (the suite's shell) must be out of the watcher's reach too.
SHELL_PROBE = "env PAIRPROOF_SHELL_SENTINEL={token} sleep 0.1"
READY_TRIES = 100  # x 0.05 s
WATCH_MAX = 600.0  # the watcher's command's own timeout (it is killed long before)
WATCH_END = 30.0  # how long its command may take to end once it is killed


@dataclass
class Watcher:
    """A watcher running in the foreground of its own ``exec`` (a thread here waits on it): its parent is the
    command the platform started, which reaps it when it is killed. Started in the background instead, it would
    be left to the sandbox's first process, which under Docker is the agent itself: a watcher killed there stays
    a zombie of A's, outside every cgroup, and the cases that count A's processes would see it."""

    rec: str
    pid: str
    thread: threading.Thread
    ended: list


def _start(h) -> Watcher:
    """Start the watcher in the sandbox of ``h`` and wait until it says it is ready (proven probes)."""
    rec = f"/tmp/.pb1-{secrets.token_hex(4)}"
    if h.run("command -v python3").rc == 0:
        command = h.backend.get_command("python3 -c %s %s </dev/null >/dev/null 2>&1", WATCHER_PY, rec)
    else:
        command = h.backend.get_command("sh -c %s watcher %s </dev/null >/dev/null 2>&1", WATCHER_SH, rec)
    ended: list = []
    thread = threading.Thread(target=lambda: ended.append(h.backend.run_with_stdin(command, timeout=WATCH_MAX)),
                              name="pb1-watcher", daemon=True)
    thread.start()
    ready = h.run(f"i=0; while [ ! -e {rec}.ready ] && [ $i -lt {READY_TRIES} ]; do sleep 0.05; i=$((i+1)); done; "
                  f"cat {rec}.pid")
    pid = ready.stdout.strip()
    if ready.rc != 0 or not pid.isdigit():
        # Not left behind in A (its instance serves the whole session): whatever runs with the record's name goes.
        h.run(f"for d in /proc/[0-9]*; do case \"$(tr '\\0' ' ' < $d/cmdline 2>/dev/null)\" in *{rec}*) "
              f"[ \"${{d#/proc/}}\" = $$ ] || kill ${{d#/proc/}};; esac; done; rm -f {rec} {rec}.pid {rec}.ready")
        raise ProofError(f"the watcher never said it was ready in {h.backend.ref.key}: {ready.stdout!r} {ready.stderr!r}"
                         f" (its command ended: {bool(ended)})")
    return Watcher(rec, pid, thread, ended)


def _sees_a_bait(h, rec: str) -> str:
    """Start a bait beside the watcher; it must be recorded (the watcher is alive and sees the platform's
    processes). Return the bait's token."""
    token = f"bait{secrets.token_hex(6)}"
    caught = h.run(BAIT.format(token=token, rec=rec))
    record = h.file(rec).content_string
    if caught.rc != 0 or token not in record:
        raise ProofError(f"the watcher did not record a 100 ms bait started beside it (rc {caught.rc}): it is not "
                         f"watching, or too slow to see a process as short as a probe, so its empty record shows "
                         f"nothing; its record: {record[-500:]!r}")
    return token


def _stop(h, watcher: Watcher) -> None:
    """Kill the watcher; its command (its parent) ends with it, and its files go."""
    h.run(f"kill {watcher.pid}; rm -f {watcher.rec} {watcher.rec}.pid {watcher.rec}.ready")
    watcher.thread.join(WATCH_END)
    if watcher.thread.is_alive():
        raise ProofError(f"the watcher's command did not end {WATCH_END} s after it was killed")


@pytest.mark.case("PB-1", "refusal", pair="A")
def test_pb1_the_instance_cannot_reach_the_probe_while_it_runs(instances, sandbox_host, scan_visible):
    """A's whole visible filesystem is scanned (the static probe, with its sentinels), then a shell probe carrying
    a sentinel runs for 100 ms, while a watcher of A's runs beside them: the watcher records no process of the
    suite's and opens none's memory. A bait started after them is recorded at once: it watched throughout."""
    if shell_binary() is None:
        raise ProofError(f"the suite has no shell of its own to probe with ({SHELL_BUILT} is missing: run "
                         "tools/setup-machine): the refusal would judge the sandbox's /bin/sh, not the suite's probes")
    h = sandbox_host(instances["A"])
    watcher = _start(h)
    try:
        scan_visible(h)
        h.run(SHELL_PROBE.format(token=f"shell{secrets.token_hex(6)}"))
        token = _sees_a_bait(h, watcher.rec)
        record = h.file(watcher.rec).content_string
    finally:
        _stop(h, watcher)
    lines = [line for line in record.splitlines() if line.strip()]
    # The bait's own lines (its sh and sleep, and their memory) are the P check's; everything else was the suite's.
    bait = {line.split()[1].rstrip(":") for line in lines if line.startswith("seen ") and token in line}
    seen = [line for line in lines if token not in line and not (line.startswith("mem-rw ") and line.split()[1] in bait)]
    attach("PB-1 A: the watcher's record", {"recorded of the suite's probes": seen, "bait recorded after them": token,
                                            "whole record": lines})
    assert seen == [], f"a process of A's reached the suite's probes while they ran: {seen[:3]}"


@pytest.mark.case("PB-1", "P", pair="A")
def test_pb1_the_watcher_records_a_platform_process_beside_it(instances, sandbox_host):
    """The watcher records a process that lives 100 ms carrying a sentinel (a bait run by the sandbox's own
    ``/bin/sh``, beside the agent): its environment, and whether its memory opened read-write."""
    h = sandbox_host(instances["A"])
    watcher = _start(h)
    try:
        token = _sees_a_bait(h, watcher.rec)
        record = h.file(watcher.rec).content_string
    finally:
        _stop(h, watcher)
    attach("PB-1 P: the watcher's record", record)
    assert f"PAIRPROOF_BAIT_SENTINEL={token}" in record
