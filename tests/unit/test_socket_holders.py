"""NT-3's holders on real processes: a "sandbox" made with unshare (its own user, mount, pid and network
namespaces) listens on TCP, on an abstract unix socket and on a socket file; the suite's own process binds a
listener into the sandbox's namespace (as a broker does) and one in the host's namespace at a path the sandbox
sees. Each socket's holder is found from the host by its inode, and judged."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from acceptance.cases.judges import holders

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="entering another network namespace needs root")

LISTENER = """
import json, os, socket, sys, time
folder = sys.argv[1]
tcp = socket.socket(); tcp.bind(("127.0.0.1", 0)); tcp.listen()
abstract = socket.socket(socket.AF_UNIX); abstract.bind("\\0pairproof-holders-test"); abstract.listen()
named = socket.socket(socket.AF_UNIX); named.bind(os.path.join(folder, "own.sock")); named.listen()
print(json.dumps({"port": tcp.getsockname()[1], "pid": os.getpid()}), flush=True)
time.sleep(60)
"""


def _children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


@pytest.fixture
def sandbox(tmp_path):
    """(host pid of the listener in its namespaces, its TCP port, the folder of its socket file)."""
    proc = subprocess.Popen(["unshare", "--user", "--map-root-user", "--mount", "--pid", "--net", "--fork",
                             "--kill-child", "python3", "-I", "-c", LISTENER, str(tmp_path)],
                            stdout=subprocess.PIPE, text=True)
    try:
        port = json.loads(proc.stdout.readline())["port"]
        end = time.monotonic() + 10
        while not _children(proc.pid):
            assert time.monotonic() < end, "unshare started no child"
            time.sleep(0.01)
        yield _children(proc.pid)[0], port, tmp_path
    finally:
        proc.kill()
        proc.wait()


def test_a_connectable_socket_without_a_holder_is_unfound():
    held = {"tcp 127.0.0.1:1": [], "unix @x": [{"pid": 5, "comm": "agent", "own": True, "inode": 9}]}
    assert holders.holder_findings("C", held, []) == ([], ["tcp 127.0.0.1:1"])
    assert holders.holder_findings("C", held, ["tcp 127.0.0.1:1"]) == ([], ["tcp 127.0.0.1:1"])
