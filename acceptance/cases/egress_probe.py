"""Probe: try to leave the sandbox by DNS and TCP, toward the lab's stand-ins for the world.

Fed to the sandbox's python on stdin; argv: a label (the canary to carry), then NAME=IP:PORT targets.
Safety interlock, before anything is sent: the routing table must use only the loopback and lab links
(``ppnet*``). A route through any other interface means the sandbox could reach beyond the lab: the probe
then sends nothing and reports ``unsafe_routes`` (which is itself a finding). Prints one JSON object.
"""

import json
import os
import socket
import struct
import sys


def routes():
    with open("/proc/net/route") as f:
        return [line.split()[0] for line in f.read().splitlines()[1:] if line.strip()]


def dns_query(name):
    labels = b"".join(bytes([len(p)]) + p.encode() for p in name.split("."))
    return struct.pack(">HHHHHH", 0x5050, 0x0100, 1, 0, 0, 0) + labels + b"\x00\x00\x01\x00\x01"


def main(argv):
    label, targets = argv[0], [t.split("=", 1) for t in argv[1:]]
    unsafe = sorted({iface for iface in routes() if iface != "lo" and not iface.startswith("ppnet")})
    report = {"unsafe_routes": unsafe, "attempts": {}}
    if unsafe:
        print(json.dumps(report))
        return
    for name, where in targets:
        host, port = where.rsplit(":", 1)
        try:
            if name.startswith("dns"):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                s.settimeout(5.0)
                s.sendto(dns_query(f"{label}.{name}.lab.example"), (host, int(port)))
                s.recv(512)
                report["attempts"][name] = "answered"
            else:
                c = socket.create_connection((host, int(port)), timeout=5.0)
                c.sendall(label.encode())
                c.close()
                report["attempts"][name] = "connected"
        except OSError as exc:
            report["attempts"][name] = f"{type(exc).__name__}: errno {exc.errno}"
    try:  # the system resolver, whatever the sandbox's /etc says
        socket.getaddrinfo(f"{label}.sys.lab.example", 80)
        report["attempts"]["getaddrinfo"] = "resolved"
    except OSError as exc:
        report["attempts"]["getaddrinfo"] = f"{type(exc).__name__}: errno {exc.errno}"
    report["interfaces"] = sorted(os.listdir("/sys/class/net")) if os.path.isdir("/sys/class/net") else []
    print(json.dumps(report))


main(sys.argv[1:])
