"""The reference platform's traced cold start: ``strace`` attached from the host to the launcher of one start
(the controller's ``start_observer`` hands over its pid while the launcher still waits at its gate, so nothing
it does is missed), following every process it starts, recording every ``open``/``openat``/``openat2``, and
detached once the agent is ready (the instance then runs untraced). The paths are the ones the processes
passed, inside the sandbox; a relative path is joined to the folder the tracer names for its dirfd.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from acceptance.contract import Opened
from acceptance.errors import SetupError, TargetError
from acceptance.harness.wait import until

ATTACH_DEADLINE = 10.0
# openat(AT_FDCWD</data>, "/etc/ld.so.cache", O_RDONLY|O_CLOEXEC) = 3</etc/ld.so.cache>
# openat(3</data/hermes>, "config.yaml", O_RDONLY) = -1 ENOENT (No such file or directory)
# open("/x", O_RDONLY) = 3 ; openat2(AT_FDCWD</d>, "/x", {flags=O_RDONLY|O_CLOEXEC, ...}, 24) = 3
LINE = re.compile(r'^(?P<call>open|openat|openat2)\((?:(?P<dirfd>[^,]*?), )?"(?P<path>(?:[^"\\]|\\.)*)", '
                  r'(?:\{flags=)?(?P<flags>[A-Z_0-9|]+)[^=]*= (?P<ret>-?\d+)(?: (?P<errno>E[A-Z]+))?')
DIRFD = re.compile(r"<(?P<dir>[^>]*)>$")
# getdents64(3</data/hermes/hooks>, 0x... /* 2 entries */, 32768) = 48: a folder listed
LISTED = re.compile(r'^getdents64\(\d+<(?P<dir>[^>]*)>')
# execve("/usr/bin/python3", ["python3", "-P"], 0x7ffd... /* 5 vars */) = 0; execveat(3</d>, "x", ...) = -1 ENOENT (...)
EXEC = re.compile(r'^(?:execve\(|execveat\((?P<dirfd>[^,]*), )"(?P<path>(?:[^"\\]|\\.)*)".*\) = (?P<ret>-?\d+)'
                  r'(?: (?P<errno>E[A-Z]+))?')


def strace() -> str:
    found = shutil.which("strace")
    if not found:
        raise SetupError("strace is not installed: the startup facet traces a cold start with it "
                         "(tools/setup-machine installs it)")
    return found


class StartTracer:
    """One traced start: ``attach`` (the controller's start observer), then ``stop`` once it is ready."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="pairproof-starttrace-"))
        self.proc: subprocess.Popen | None = None

    def attach(self, pid: int) -> None:
        """Attach to ``pid`` (waiting at its gate) and return once strace says it is attached. Its messages go
        to a file, never a pipe: a pipe nobody reads would stall strace, and the agent with it."""
        said = self.folder / "strace.err"
        with open(said, "wb") as err:
            self.proc = subprocess.Popen(
                [strace(), "-p", str(pid), "-f", "-ff", "-o", str(self.folder / "t"), "-y", "-s", "4096",
                 "-e", "trace=open,openat,openat2,getdents64,execve,execveat", "-e", "signal=none"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        marker = f"Process {pid} attached".encode()

        def attached() -> bool:
            if self.proc.poll() is not None:
                raise TargetError(f"strace ended before attaching to the launcher {pid}: {said.read_bytes()[-300:]!r}")
            return marker in said.read_bytes()

        try:
            until(attached, f"strace attaching to the launcher {pid}", ATTACH_DEADLINE, every=0.005)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Detach (strace detaches every tracee on SIGINT and exits) and wait for it."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise TargetError("strace did not detach within 20 s") from None

    def opened(self) -> tuple[Opened, ...]:
        if self.proc is None:
            raise TargetError("the traced start never reached its launcher: nothing was traced")
        return parse(self.folder)

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def parse(folder: Path) -> tuple[Opened, ...]:
    """Every open in the per-process trace files ``folder/t.<pid>`` (strace ``-ff -y``), each folder marked
    ``listed`` if any process read its entries."""
    out, listed = [], set()
    for file in sorted(folder.glob("t.*")):
        for line in file.read_text(errors="replace").splitlines():
            if (dents := LISTED.match(line)) is not None:
                listed.add(os.path.normpath(dents["dir"]))
                continue
            if (ran := EXEC.match(line)) is not None:
                # A program run is a file read at start too (flags EXEC); a relative one needs its folder.
                path = ran["path"].encode().decode("unicode_escape", errors="replace")
                where = DIRFD.search(ran["dirfd"] or "")
                if not path.startswith("/") and where is not None:
                    path = os.path.join(where["dir"], path)
                if path.startswith("/"):
                    ok = int(ran["ret"]) >= 0
                    out.append((os.path.normpath(path), "EXEC", "ok" if ok else (ran["errno"] or "error")))
                continue
            match = LINE.match(line)
            if match is None:
                continue
            path = match["path"].encode().decode("unicode_escape", errors="replace")
            if not path.startswith("/"):
                where = DIRFD.search(match["dirfd"] or "")
                if where is None:
                    continue  # a relative open whose folder the tracer could not name: not attributable
                path = os.path.join(where["dir"], path)
            ok = int(match["ret"]) >= 0
            out.append((os.path.normpath(path), match["flags"], "ok" if ok else (match["errno"] or "error")))
    return tuple(Opened(path, flags, result, listed=path in listed) for path, flags, result in out)
