"""Capturing inside another network namespace (an instance's) for a while, into a pcap."""

from __future__ import annotations

import select
import socket
import threading
import time
from pathlib import Path

from runtime.netns import socket_in

from .bpf import ETH_P_ALL, attach, drain


def capture(pid: int, seconds: float, expression: str, pcap: Path, ready: threading.Event | None = None) -> list[dict]:
    """Every frame matching ``expression`` seen in the network namespace of ``pid`` during ``seconds``
    (counted from when the capture is really listening; ``ready`` is set then)."""
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.layers.l2 import Ether
    from scapy.utils import wrpcap

    sock = socket_in(pid, socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    attach(sock, expression)
    drain(sock)
    if ready is not None:
        ready.set()
    frames, seen = [], []
    end = time.monotonic() + seconds
    try:
        while (left := end - time.monotonic()) > 0:
            ready, _, _ = select.select([sock], [], [], left)
            if not ready:
                continue
            frame, meta = sock.recvfrom(65535)
            if meta[2] == socket.PACKET_OUTGOING and meta[0] == "lo":
                continue  # loopback shows every frame twice; keep the incoming copy
            packet = Ether(frame)
            frames.append(packet)
            ip = packet.getlayer(IP)
            entry = {"iface": meta[0], "src": ip.src if ip else "", "dst": ip.dst if ip else ""}
            if packet.haslayer(TCP):
                entry.update(kind="tcp", dport=packet[TCP].dport, flags=str(packet[TCP].flags))
            elif packet.haslayer(UDP):
                entry.update(kind="udp", dport=packet[UDP].dport)
            seen.append(entry)
    finally:
        sock.close()
    wrpcap(str(pcap), frames, linktype=1)
    return seen
