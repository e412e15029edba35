"""Containment under Docker: while a docker qualification runs the network cases (NT-1, NT-2, NT-5, their
broken controls included: containers linked into the lab), a capture on every interface of the host's
network namespace but loopback sees no frame to or from an address a container or the lab has (the lab's
ranges, the sink's stand-ins, loopback addresses off loopback) and no frame carrying a canary. The capture
is shown able to see both first, on a veth of a throwaway namespace, so an empty result means
something. (tests/integration/lab/test_containment.py is the same property for the reference target.)"""

from __future__ import annotations

import errno
import ipaddress
import os
import secrets
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from acceptance.harness.fixtures import canary_run
from acceptance.harness.lab.bpf import ETH_P_ALL, dropped, enlarge, raw_socket
from acceptance.harness.lab.sink import ADDRESSES, ADDRESSES6
from canaries import detect
from runtime.isolation import cleanup

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[3]
# The key the qualification below makes its canaries' run id from (--pairproof-canaries): a token of that run in
# a frame is a leak. In the environment, so the control's subprocess (which imports this module) has the same.
KEY = os.environ.setdefault("PAIRPROOF_TEST_CONTAINMENT_KEY", secrets.token_hex(16))
RUN = canary_run(KEY, "main")
CANARY = detect.token_pattern(RUN)
# Addresses a container or the lab can have: the lab's ranges (a broken control's veth is 100.65.n.2 and
# fd00:65:n::2), the sink's stand-ins, and loopback, which a container with network none has only (on a
# real interface it would be a leak through a misrouted namespace).
CONTAINED = [ipaddress.ip_network(n) for n in (
    "100.64.0.0/10", "fd00:65::/32", "127.0.0.0/8", "::1/128",
    *(f"{a}/32" for a in ADDRESSES.values()), *(f"{a}/128" for a in ADDRESSES6.values()))]


# (the filter of tests/integration/lab/test_containment.py, for the socket on every interface)
LAB_TRAFFIC = " or ".join([f"host {a}" for a in (*ADDRESSES.values(), *ADDRESSES6.values())]
                         + ["net 100.64.0.0/10", "net fd00:65::/32"])


def _addresses(frame: bytes) -> list[ipaddress._BaseAddress]:
    """Source and destination of an Ethernet frame's IPv4 or IPv6 packet (a VLAN tag skipped)."""
    ethertype, offset = int.from_bytes(frame[12:14], "big"), 14
    if ethertype == 0x8100:
        ethertype, offset = int.from_bytes(frame[16:18], "big"), 18
    if ethertype == 0x0800 and len(frame) >= offset + 20:
        return [ipaddress.IPv4Address(frame[offset + 12:offset + 16]), ipaddress.IPv4Address(frame[offset + 16:offset + 20])]
    if ethertype == 0x86DD and len(frame) >= offset + 40:
        return [ipaddress.IPv6Address(frame[offset + 8:offset + 24]), ipaddress.IPv6Address(frame[offset + 24:offset + 40])]
    return []


def offending(frame: bytes) -> str:
    """Why a frame seen on a real interface is a containment failure, or ''."""
    if CANARY.search(frame):
        return "carries a canary"
    for address in _addresses(frame):
        if any(address in net for net in CONTAINED):
            return f"to or from {address}"
    return ""


def capture(stop: threading.Event, seen: list[tuple[str, str]], ready: threading.Event, drops: list[int],
            changes: list[str] | None = None) -> None:
    """Until ``stop``: every frame on every interface but lo (interfaces that appear meanwhile too: they are
    looked for every 50 ms, and a filtered socket on all interfaces catches lab traffic on one that comes
    and goes between two looks), recording (interface, why) for each offending one. ``changes`` gets the
    interfaces that went down meanwhile, and "done" last when the capture ended at ``stop``, not by an error."""
    changes = [] if changes is None else changes
    everywhere = raw_socket(LAB_TRAFFIC)
    bound: dict[str, socket.socket] = {}

    def bind_new() -> None:
        for _, name in socket.if_nameindex():  # (this namespace's: /sys/class/net is the mounter's)
            if name == "lo" or name in bound:
                continue
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
            enlarge(sock)
            try:
                sock.bind((name, ETH_P_ALL))
            except OSError:  # gone since the listing
                sock.close()
                continue
            dropped(sock)
            bound[name] = sock

    try:
        bind_new()
        ready.set()
        last_look = time.monotonic()
        while not stop.is_set():
            readable, _, _ = select.select([everywhere, *bound.values()], [], [], 0.05)
            for sock in readable:
                try:
                    frame, meta = sock.recvfrom(65535)
                except OSError as exc:  # the interface went down or away (ENETDOWN): bound again when back
                    if sock is everywhere or exc.errno not in (errno.ENETDOWN, errno.ENXIO, errno.ENODEV):
                        raise
                    name = next(n for n, bound_sock in bound.items() if bound_sock is sock)
                    changes.append(f"{name} went down")
                    drops.append(dropped(sock))
                    sock.close()
                    del bound[name]
                    continue
                if meta[0] == "lo":
                    continue
                why = offending(frame) if sock is not everywhere else (offending(frame) or "lab traffic")
                if why:
                    seen.append((meta[0], why))
            if time.monotonic() - last_look > 0.05:
                bind_new()
                last_look = time.monotonic()
        drops.extend(dropped(sock) for sock in [everywhere, *bound.values()])
        changes.append("done")
    finally:
        for sock in [everywhere, *bound.values()]:
            sock.close()


def test_the_capture_sees_a_container_address_and_a_canary_on_an_interface():
    """Control: the same capture, in a throwaway namespace with a veth addressed in the lab's range, sees a
    datagram sent out of it, and one carrying a canary sent to an address outside every contained range."""
    code = (
        "import subprocess, threading, socket, sys\n"
        f"sys.path.insert(0, {str(REPO)!r})\n"
        "from tests.integration.docker.test_containment import capture\n"
        "for c in (['link', 'add', 'pp0', 'type', 'veth', 'peer', 'name', 'pp1'], ['link', 'set', 'pp1', 'up'],\n"
        "          ['addr', 'add', '100.65.250.2/24', 'dev', 'pp0'], ['addr', 'add', '192.0.2.77/24', 'dev', 'pp0'],\n"
        "          ['link', 'set', 'pp0', 'up'],\n"
        "          ['neigh', 'add', '100.65.250.1', 'lladdr', '02:00:00:00:00:01', 'dev', 'pp0'],\n"
        "          ['neigh', 'add', '192.0.2.1', 'lladdr', '02:00:00:00:00:01', 'dev', 'pp0']):\n"
        "    subprocess.run(['ip', *c], check=True)\n"
        "stop, seen, ready, drops = threading.Event(), [], threading.Event(), []\n"
        "t = threading.Thread(target=capture, args=(stop, seen, ready, drops)); t.start(); assert ready.wait(30)\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "s.sendto(b'x', ('100.65.250.1', 9))\n"
        "s2 = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s2.bind(('192.0.2.77', 0))\n"
        f"s2.sendto(b'{RUN}-0123-4567-89ab-0123456789ab', ('192.0.2.1', 9))\n"
        "import time\n"
        "end = time.monotonic() + 10\n"
        "while time.monotonic() < end and len({w for _, w in seen}) < 2: time.sleep(0.02)\n"
        "stop.set(); t.join(); print(sorted({f'{i} {w}' for i, w in seen}))\n"
    )
    out = subprocess.run(["unshare", "--net", sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "pp0 to or from 100.65.250" in out.stdout and "pp0 carries a canary" in out.stdout, out.stdout


def test_no_container_packet_on_the_machines_interfaces(tmp_path):
    root = Path(tempfile.mkdtemp(prefix="pairproof-docker-contain-", dir="/var/tmp"))
    os.chmod(root, 0o711)
    stop, seen, ready, drops, changes = threading.Event(), [], threading.Event(), [], []
    watcher = threading.Thread(target=capture, args=(stop, seen, ready, drops, changes))
    watcher.start()
    try:
        assert ready.wait(30), "the capture did not start"
        result = subprocess.run(
            [sys.executable, "-m", "acceptance.cli", "qualify", "--target", "docker", "--state-dir", str(root),
             "--reports-dir", str(tmp_path / "reports"), "--", "--pairproof-canaries", KEY,
             "--case", "NT-1", "--case", "NT-2", "--case", "NT-5"],
            cwd=REPO, capture_output=True, text=True, timeout=900)
    finally:
        stop.set()
        watcher.join()
        cleanup.clean(root, include_live=True)
        shutil.rmtree(root, ignore_errors=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and " failed" not in result.stdout, result.stdout[-3000:]
    assert changes[-1:] == ["done"], f"the capture did not run to the end (it failed: see the warning above): {changes}"
    assert seen == [], f"{len(seen)} frames of the contained on the machine's interfaces, first: {seen[0]}"
    assert sum(drops) == 0, f"the capture dropped {sum(drops)} frames: it cannot say what it did not see"
