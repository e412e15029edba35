"""The sink's records are complete when read: a burst sent just before ``records()`` is all there.

The capture parses frame by frame (scapy) and lags a fast sender; ``records()`` drains it up to a
barrier first. Without that drain a refusal could read the file before the SYN it should have failed on
was written, and pass without having looked."""

from __future__ import annotations

import os
import socket
import subprocess
import time

from acceptance.harness.lab.lab import Lab
from acceptance.harness.lab.netns import socket_in
from acceptance.harness.lab.sink import ADDRESSES

BURST = 300


def test_a_burst_sent_just_before_reading_is_all_recorded(tmp_path):
    lab = Lab(tmp_path / "lab")
    # A namespace of our own, linked to the lab like a broken control's sandbox; it dies with this test.
    holder = subprocess.Popen(["setpriv", "--pdeathsig", "KILL", "--", "unshare", "--net", "--", "sleep", "600"])
    try:
        # Link it only once it is in its own namespace (a veth given to the host's would be a leak).
        end = time.monotonic() + 10
        while os.readlink(f"/proc/{holder.pid}/ns/net") == os.readlink("/proc/self/ns/net"):
            assert time.monotonic() < end, "the holder never entered its own network namespace"
            time.sleep(0.01)
        lab.connect(holder.pid)
        sender = socket_in(holder.pid, socket.AF_INET, socket.SOCK_DGRAM)
        try:
            for i in range(BURST):
                sender.sendto(f"burst-{i:04d}".encode(), (ADDRESSES["internet"], 5353))
        finally:
            sender.close()
        got = {bytes.fromhex(r["payload"]).decode() for r in lab.records() if r["kind"] == "udp"}
        assert {f"burst-{i:04d}" for i in range(BURST)} <= got, f"{len(got)} of {BURST} recorded"
        assert all(r["kind"] != "barrier" for r in lab.records())
    finally:
        holder.kill()
        holder.wait()
        lab.close()
