"""A hostile agent for the suite's own test of what a qualification does when the thing qualified fights back
(issue 28). It serves the tiny agent's turn API (``tiny_agent.py``, beside it in the image) and, from its
start, does on purpose what the issue's review found an agent could do:

- names itself ``evil\\xff`` (``PR_SET_NAME``: not UTF-8, which once broke every liveness check);
- fills its volume with what a root-side walk must not follow: a link to the root folder, to a host file
  named by ``HOSTILE_MARKER`` (a file the test made, readable by root only), a fifo, a listening socket;
- swaps ``/data/notes`` between a folder and a link to the marker's folder, every millisecond, for as long as it
  runs: whatever root does with the volume (snapshot, restore, measure) races it;
- with ``HOSTILE_DEEP=1``, nests folders ``DEEP`` levels under ``/data/deep`` (deeper than Python's recursion
  limit: a recursive walk of the volume, the platform's or the harness's, dies of RecursionError there);
- with ``HOSTILE_KILL=1``, kills every process of its pid namespace that is not its own (the harness's shell
  probes, the platform's commands) within milliseconds of its appearing, and records what it killed in
  ``/data/killed.txt``: a probe it kills proves nothing, and no case may pass on it.

Standard library only. Nothing of it leaves the sandbox: it reads and writes /data and /proc, as any agent may.
"""
import ctypes
import os
import signal
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # python3 -I leaves the script's folder out
from tiny_agent import Chat, Server  # noqa: E402

MARKER = os.environ.get("HOSTILE_MARKER", "/etc/shadow")
ME = os.getpid()


def _name_myself() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(15, b"evil\xff", 0, 0, 0)  # PR_SET_NAME


def _plant_traps() -> socket.socket:
    if os.path.islink("/data/notes"):  # a snapshot taken mid-swap came back: put the folder back
        os.unlink("/data/notes")
    if os.path.isdir("/data/notes.real"):
        os.rename("/data/notes.real", "/data/notes")
    os.makedirs("/data/notes", exist_ok=True)
    with open("/data/notes/mine.md", "w") as f:
        f.write("the agent's own note\n")
    for name, target in (("escape", "/"), ("marker", MARKER)):
        try:
            os.symlink(target, f"/data/{name}")
        except FileExistsError:
            pass
    try:
        os.mkfifo("/data/fifo")
    except FileExistsError:
        pass
    try:
        os.unlink("/data/sock")
    except FileNotFoundError:
        pass
    listening = socket.socket(socket.AF_UNIX)
    listening.bind("/data/sock")
    listening.listen()
    return listening


DEEP = 1200


def _nest_deep() -> None:
    fd = os.open("/data", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in ("deep", *["d"] * DEEP):
            try:
                os.mkdir(name, dir_fd=fd)
            except FileExistsError:
                pass
            inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = inner
        with open(os.open("bottom.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as f:
            f.write("the bottom of the agent's deep folder\n")
    finally:
        os.close(fd)


def _swap_forever() -> None:
    outside = os.path.dirname(MARKER)
    while True:
        try:
            os.rename("/data/notes", "/data/notes.real")
            os.symlink(outside, "/data/notes")
            time.sleep(0.001)
            os.unlink("/data/notes")
            os.rename("/data/notes.real", "/data/notes")
        except OSError:
            pass
        time.sleep(0.001)


def _kill_forever() -> None:
    mine = {ME, 1}  # itself and its sandbox's first process (killing that would end the sandbox, not a probe)
    while True:
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) in mine:
                continue
            try:
                with open(f"/proc/{name}/status", "rb") as f:
                    status = f.read()
                if b"\nTgid:\t" + str(ME).encode() + b"\n" in status:
                    continue  # a thread of its own
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ")[:200]
                os.kill(int(name), signal.SIGKILL)
            except OSError:
                continue
            with open("/data/killed.txt", "ab") as f:
                f.write(name.encode() + b" " + cmd + b"\n")
        time.sleep(0.002)


if __name__ == "__main__":
    _name_myself()
    kept = _plant_traps()
    if os.environ.get("HOSTILE_DEEP") == "1":
        _nest_deep()
    threading.Thread(target=_swap_forever, daemon=True).start()
    if os.environ.get("HOSTILE_KILL") == "1":
        threading.Thread(target=_kill_forever, daemon=True).start()
    Server(("127.0.0.1", 8700), Chat).serve_forever()
