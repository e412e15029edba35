"""Containment: while the network cases run (their broken controls included), a capture on the machine's
real interfaces sees no packet to or from any lab address. The capture is shown able to see such a
packet first, inside a throwaway namespace, so an empty result means something."""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import threading

import pytest

from acceptance.harness.lab.bpf import raw_socket
from acceptance.harness.lab.sink import ADDRESSES, ADDRESSES6

pytestmark = pytest.mark.slow
LAB_TRAFFIC = " or ".join([f"host {a}" for a in (*ADDRESSES.values(), *ADDRESSES6.values())]
                         + ["net 100.64.0.0/10", "net fd00:65::/32"])


def watch(stop: threading.Event, seen: list[tuple[str, bytes]], ready: threading.Event | None = None) -> None:
    sock = raw_socket(LAB_TRAFFIC)
    if ready is not None:
        ready.set()
    try:
        while not stop.is_set():
            ready, _, _ = select.select([sock], [], [], 0.1)
            if ready:
                frame, meta = sock.recvfrom(65535)
                seen.append((meta[0], frame[:64]))
    finally:
        sock.close()


def test_the_capture_sees_lab_traffic_where_there_is_some():
    """Control: the same capture, run in a namespace where a lab address is routed, sees the packet."""
    code = (
        "import subprocess, threading, socket, time, sys\n"
        f"sys.path.insert(0, {os.getcwd()!r})\n"
        "from tests.integration.lab.test_containment import watch\n"
        "subprocess.run(['ip', 'link', 'set', 'lo', 'up'], check=True)\n"
        "subprocess.run(['ip', 'addr', 'add', '198.51.100.10/32', 'dev', 'lo'], check=True)\n"
        "stop, seen, ready = threading.Event(), [], threading.Event()\n"
        "t = threading.Thread(target=watch, args=(stop, seen, ready)); t.start(); assert ready.wait(30)\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'x', ('198.51.100.10', 9))\n"
        "time.sleep(0.3); stop.set(); t.join(); print(len(seen))\n"
    )
    out = subprocess.run(["unshare", "--net", sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.strip()) >= 1


def test_no_lab_packet_on_the_machines_interfaces(tmp_path):
    stop, seen, ready = threading.Event(), [], threading.Event()
    watcher = threading.Thread(target=watch, args=(stop, seen, ready))
    watcher.start()
    assert ready.wait(30), "the capture did not start"
    try:
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "acceptance/cases", "--target", "reference", "-p", "no:cacheprovider",
             "-q", "--case", "NT-1", "--case", "NT-2", "--case", "NT-3", "--case", "NT-5",
             "--pairproof-verdict", str(tmp_path / "verdict.json")],
            capture_output=True, text=True, timeout=600)
    finally:
        stop.set()
        watcher.join()
    assert result.returncode == 0, result.stdout[-3000:]
    assert seen == [], f"{len(seen)} lab packets on the machine's interfaces, first on {seen[0][0]}"
    assert socket.gethostname()  # the host is still itself; nothing was reconfigured
