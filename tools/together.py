"""Run commands side by side, then print each one's output whole, one after the other.

    python tools/together.py "pairproof qualify --target a ..." "pairproof qualify --target b ..."

Each argument is one command line (split as a shell would, nothing expanded). Each command's output goes
to a temporary file while they run and is printed, under a header with its exit code and wall time, once
all have ended (the files are then removed). SIGINT and SIGTERM are passed on to every command still
running (by its pid: only processes started here), and the run waits for them to end: `pairproof
qualify` tears its instances down and exits 130. Exit code: the largest of the commands' (130 if this
was interrupted), 2 for bad input. With ``--ok 0,1`` first, a command's exit among those counts as 0 (the
verdict's own judges, ``pairproof expect`` and ``gate``, decide on it) and any other (2, a setup error; 130; a
crash) is the exit: a qualification that published nothing fails here instead of leaving an older set to be judged.

tox's hermes env runs the two hermes qualifications with it: each is mostly hermes's own starts and turns,
about one core's worth, so side by side on two cores they take about the time of the longer one.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    ok: set[int] | None = None
    if argv[:1] == ["--ok"]:
        try:
            ok = {int(c) for c in argv[1].split(",")}
        except (IndexError, ValueError):
            print("together: --ok takes exit codes separated by commas, e.g. --ok 0,1", file=sys.stderr)
            return 2
        argv = argv[2:]
    if not argv or any(not a.strip() for a in argv):
        print("together: give each command as one argument, e.g. together.py \"cmd one\" \"cmd two\"",
              file=sys.stderr)
        return 2
    commands = [shlex.split(a) for a in argv]
    interrupted: list[int] = []
    with tempfile.TemporaryDirectory(prefix="pairproof-together-") as folder:
        logs = [Path(folder) / f"{i}.log" for i in range(len(commands))]
        procs, started = [], []
        try:
            for command, log in zip(commands, logs, strict=True):
                with log.open("wb") as out:
                    procs.append(subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT))
                started.append(time.monotonic())
        except OSError as exc:
            print(f"together: cannot start {shlex.join(command)}: {exc}", file=sys.stderr)
            for proc in procs:
                proc.terminate()
                proc.wait()
            return 2

        ended: dict[int, tuple[int, float]] = {}

        def forward(signum, _frame) -> None:
            interrupted.append(signum)
            for i, proc in enumerate(procs):
                if i not in ended:  # not reaped yet (only the loop below reaps): the pid is still its own
                    os.kill(proc.pid, signum)

        previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
        print(f"together: {len(procs)} commands side by side: "
              + "; ".join(shlex.join(c) for c in commands), flush=True)
        by_pid = {proc.pid: i for i, proc in enumerate(procs)}
        try:
            while len(ended) < len(procs):
                try:
                    pid, status = os.wait()  # whichever ends first: its own wall time
                except InterruptedError:
                    continue
                if pid in by_pid:
                    i = by_pid[pid]
                    procs[i].returncode = os.waitstatus_to_exitcode(status)
                    ended[i] = (procs[i].returncode, time.monotonic() - started[i])
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
        for i, (command, log) in enumerate(zip(commands, logs, strict=True)):
            code, seconds = ended[i]
            print(f"\n===== together: {shlex.join(command)}: exit {code} in {seconds:.0f} s =====", flush=True)
            sys.stdout.buffer.write(log.read_bytes())
            sys.stdout.flush()
    if interrupted:
        return 130
    codes = [code if code >= 0 else 128 - code for code, _ in ended.values()]
    if ok is not None:
        codes = [0 if code in ok else code for code in codes]
    return max(codes)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
