"""``engine.engine_pid`` finds the process named dockerd that listens on the engine's socket, and keeps finding it
while that process opens and closes other descriptors (a busy dockerd does all along: one closed between the
listing of /proc/PID/fd and its read once made the engine look absent, and a docker qualification refused to
start). A real process, named dockerd, listens on a real unix socket and churns descriptors."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

from acceptance.targets.docker import engine

SERVER = textwrap.dedent("""
    import os, socket, sys
    with open("/proc/self/comm", "w") as comm:
        comm.write("dockerd")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(sys.argv[1])
    listener.listen()
    print("ready", flush=True)
    while True:  # a descriptor opened and closed all along
        os.close(os.open("/dev/null", os.O_RDONLY))
""")


def test_a_dockerd_churning_descriptors_is_found_every_time(tmp_path):
    path = str(tmp_path / "engine.sock")
    proc = subprocess.Popen([sys.executable, "-c", SERVER, path], stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"ready\n"
        found = {engine.engine_pid(path) for _ in range(200)}
        assert found == {proc.pid}
    finally:
        proc.kill()
        proc.wait()


def test_a_descriptor_that_vanishes_mid_read_does_not_drop_the_process(tmp_path, monkeypatch):
    """Forced: every descriptor but the listening socket's reads as closed (ENOENT)."""
    path = str(tmp_path / "engine.sock")
    proc = subprocess.Popen([sys.executable, "-c", SERVER, path], stdout=subprocess.PIPE)
    real = os.readlink

    def readlink(link, *args, **kwargs):
        target = real(link, *args, **kwargs)
        if link.startswith(f"/proc/{proc.pid}/fd/") and not target.startswith("socket:["):
            raise FileNotFoundError(2, "No such file or directory", link)
        return target

    try:
        assert proc.stdout.readline() == b"ready\n"
        monkeypatch.setattr(engine.os, "readlink", readlink)
        assert engine.engine_pid(path) == proc.pid
        monkeypatch.undo()
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 5
        while engine.engine_pid(path) is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert engine.engine_pid(path) is None  # and the finding is of a live listener, not of the path
    finally:
        proc.kill()
        proc.wait()
