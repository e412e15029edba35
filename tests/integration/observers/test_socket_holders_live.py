"""NT-3's holders on real processes: a "sandbox" made with unshare (its own user, mount, pid and network
namespaces) listens on TCP, on an abstract unix socket and on a socket file; the suite's own process binds a
listener into the sandbox's namespace (as a broker does) and one in the host's namespace at a path the sandbox
sees. Each socket's holder is found from the host by its inode, and judged.

The part of tests/unit/test_socket_holders.py that the unit tier cannot hold: they start sandboxes with unshare."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from acceptance.cases.judges import holders
from runtime.isolation.netns import socket_in

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


def _entries(port: int, folder: Path, *extra: tuple[str, dict]) -> dict:
    entries = {f"tcp 127.0.0.1:{port}": {"proto": "tcp", "family": socket.AF_INET, "host": "127.0.0.1", "port": port},
               "unix @pairproof-holders-test": {"proto": "unix", "path": "\0pairproof-holders-test"},
               f"unix-file {folder}/own.sock (stream)": {"proto": "unix-file", "path": f"{folder}/own.sock"}}
    entries.update(dict(extra))
    return {"connected": sorted(entries), "entries": entries}


def test_the_sandboxs_own_listeners_are_held_by_it(sandbox):
    pid, port, folder = sandbox
    held = holders.socket_holders(pid, _entries(port, folder))
    assert {w: [(h["pid"], h["own"]) for h in hs] for w, hs in held.items()} == {w: [(pid, True)] for w in held}
    assert holders.holder_findings("B", held, []) == ([], [])


def test_a_listener_bound_into_the_namespace_from_outside_is_a_finding_unless_it_is_the_broker(sandbox):
    pid, port, folder = sandbox
    outsider = socket_in(pid)
    try:
        outsider.bind(("127.0.0.1", 0))
        outsider.listen()
        where = f"tcp 127.0.0.1:{outsider.getsockname()[1]}"
        report = _entries(port, folder, (where, {"proto": "tcp", "family": socket.AF_INET, "host": "127.0.0.1",
                                                 "port": outsider.getsockname()[1]}))
        held = holders.socket_holders(pid, report)
        assert [(h["pid"], h["own"]) for h in held[where]] == [(os.getpid(), False)]
        findings, unfound = holders.holder_findings("B", held, [])
        assert unfound == [] and len(findings) == 1 and findings[0].startswith(f"{where} (socket ")
        assert f"pid {os.getpid()}" in findings[0] and "outside B's sandbox" in findings[0]
        assert holders.holder_findings("B", held, [where]) == ([], [])  # the same socket, as B's own broker
    finally:
        outsider.close()


def test_a_socket_file_bound_in_another_namespace_is_found_through_its_file(sandbox):
    """A socket the host's namespace holds, reached by its path (as a mounted engine socket would be): not in
    the sandbox's own tables, found by the file's device and inode among every namespace's sockets."""
    pid, port, folder = sandbox
    host_side = socket.socket(socket.AF_UNIX)
    try:
        host_side.bind(str(folder / "engine.sock"))
        host_side.listen()
        where = f"unix-file {folder}/engine.sock (stream)"
        held = holders.socket_holders(pid, _entries(port, folder, (where, {"proto": "unix-file",
                                                                           "path": f"{folder}/engine.sock"})))
        assert [(h["pid"], h["own"]) for h in held[where]] == [(os.getpid(), False)]
        assert len(holders.holder_findings("B", held, [])[0]) == 1
    finally:
        host_side.close()
