"""The lab's sink: runs inside the lab's network namespace (started by ``Lab``), never anywhere else.

It gives itself the addresses the world would have (``ADDRESSES``, and their IPv6 twins ``ADDRESSES6``)
on its loopback, answers DNS with NXDOMAIN, accepts TCP on a few ports, and records every DNS query, TCP
SYN and UDP datagram reaching it over IPv4 or IPv6, from a BPF-filtered raw capture of all its interfaces,
as JSON lines; every captured frame also goes to a pcap. It prints ``ready`` once listening.

    python -m acceptance.harness.lab.sink RECORDS.jsonl CAPTURE.pcap
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time

from acceptance.harness.lab.bpf import EGRESS, dropped, is_egress, raw_socket

# All of the lab's world sits in TEST-NET-2 (198.51.100.0/24) and shared address space: none of it is an
# address this machine's own network uses (it lives in TEST-NET-1 and reaches its registries in TEST-NET-3).
ADDRESSES = {
    "internet": "198.51.100.10",
    "resolver": "198.51.100.53",
    "metadata": "169.254.169.254",
    "product": "100.64.0.10",
    "proxy": "100.64.0.11",
    "provider": "100.64.0.12",
}
# The same stand-ins over IPv6, in the documentation prefix (2001:db8::/32) and unique local addresses.
ADDRESSES6 = {
    "internet": "2001:db8::10",
    "resolver": "2001:db8::53",
    "metadata": "fd00:ec2::254",
    "product": "fd00:64::10",
    "proxy": "fd00:64::11",
    "provider": "fd00:64::12",
}
TCP_PORTS = (80, 443, 8080, 8765)
# The barrier: a datagram the host sends from 127.0.0.1 to 127.0.0.1 inside the sink's namespace (no
# sandbox can send one: 127.0.0.0/8 never arrives from outside). The capture reads frames in the order
# the kernel queued them, so once it records the barrier it has recorded everything that came before.
BARRIER_PORT = 9


def _record(out, lock: threading.Lock, entry: dict) -> None:
    with lock:
        out.write(json.dumps({"at": time.time(), **entry}) + "\n")
        out.flush()


def _dns(out, lock, sock: socket.socket) -> None:
    from scapy.layers.dns import DNS

    while True:
        data, peer = sock.recvfrom(4096)
        try:
            query = DNS(data)
            name = query.qd.qname.decode(errors="replace").rstrip(".") if query.qd else ""
            reply = DNS(id=query.id, qr=1, rcode=3, qd=query.qd)  # NXDOMAIN: the lab resolves nothing
            sock.sendto(bytes(reply), peer)
        except Exception:  # a malformed query is still recorded by the capture
            name = ""
        _record(out, lock, {"kind": "dns", "name": name, "src": peer[0]})


def _tcp(sock: socket.socket) -> None:
    while True:
        conn, _ = sock.accept()
        conn.settimeout(2)
        try:
            conn.recv(65536)
        except OSError:
            pass
        conn.close()


def _capture(out, lock, pcap_path: str, sock: socket.socket) -> None:
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Ether
    from scapy.utils import PcapWriter

    writer = PcapWriter(pcap_path, linktype=1, sync=True)
    drops = 0
    while True:
        frame, meta = sock.recvfrom(65535)
        if meta[2] == socket.PACKET_OUTGOING:  # the sink's own answers
            continue
        packet = Ether(frame)
        writer.write(packet)
        ip = packet.getlayer(IP) or packet.getlayer(IPv6)
        if ip is None or not is_egress(packet):
            continue
        if packet.haslayer(TCP):
            tcp = packet[TCP]
            if tcp.flags & 0x02 and not tcp.flags & 0x10:
                _record(out, lock, {"kind": "syn", "src": ip.src, "dst": ip.dst, "dport": tcp.dport,
                                    "payload": bytes(tcp.payload).hex()})
        elif packet.haslayer(UDP):
            udp = packet[UDP]
            if ip.src == ip.dst == "127.0.0.1" and udp.dport == BARRIER_PORT:
                drops += dropped(sock)
                _record(out, lock, {"kind": "barrier", "payload": bytes(udp.payload).hex(), "dropped": drops})
                continue
            _record(out, lock, {"kind": "udp", "src": ip.src, "dst": ip.dst, "dport": udp.dport,
                                "payload": bytes(udp.payload).hex()})


def main(records: str, pcap: str) -> None:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    for address in ADDRESSES.values():
        subprocess.run(["ip", "addr", "add", f"{address}/32", "dev", "lo"], check=True)
    for address in ADDRESSES6.values():
        subprocess.run(["ip", "-6", "addr", "add", f"{address}/128", "dev", "lo", "nodad"], check=True)
    # Everything is imported, bound and listening before "ready": a probe that comes at once is answered.
    import scapy.layers.dns  # noqa: F401
    import scapy.layers.inet  # noqa: F401
    import scapy.layers.inet6  # noqa: F401
    import scapy.utils  # noqa: F401

    out, lock = open(records, "a"), threading.Lock()
    capture = raw_socket(EGRESS)
    # One resolver socket per address, bound to it: an answer must come from the address the query went to
    # (a wildcard socket answers from whatever the route picks, and a connected client drops that).
    resolvers = []
    for family, address in ((socket.AF_INET, ADDRESSES["resolver"]), (socket.AF_INET6, ADDRESSES6["resolver"])):
        dns = socket.socket(family, socket.SOCK_DGRAM)
        dns.bind((address, 53))
        resolvers.append(dns)
    listeners = []
    for port in TCP_PORTS:
        sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(("::", port))
        sock.listen(64)
        listeners.append(sock)
    workers = [threading.Thread(target=_dns, args=(out, lock, dns), daemon=True) for dns in resolvers]
    workers += [threading.Thread(target=_capture, args=(out, lock, pcap, capture), daemon=True)]
    workers += [threading.Thread(target=_tcp, args=(sock,), daemon=True) for sock in listeners]
    for w in workers:
        w.start()
    print("ready", flush=True)
    for w in workers:
        w.join()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
