"""Probe: try to leave the sandbox by DNS and TCP, over IPv4 and IPv6, toward the lab's stand-ins for the
world, and to reach any resolver by any path (configured nameservers, the system resolver, every socket
the sandbox can see). Uses ``listeners.py``.

argv: a label (the canary every query and connection carries), the broker's ``host:port`` (the sanctioned
path, not knocked on here), then ``NAME=HOST:PORT`` targets (``NAME=[V6]:PORT`` for IPv6; a name starting
with ``dns`` gets a DNS query, any other a TCP connection).

Safety interlock, before anything is sent: the IPv4 and IPv6 routing tables may use only the loopback and
lab links (``ppnet*``). With a route through any other interface the sandbox could reach beyond the lab:
the probe then sends nothing at all (no query, no connection, no getaddrinfo, no knock) and only asks the
kernel where each target *would* go (a UDP ``connect`` sends no packet); it reports ``unsafe_routes`` and,
per target, ``routable (not sent)`` with the source address the kernel picked: both are findings.

Prints one JSON object: routes, unsafe_routes, interfaces, attempts, resolv_conf, nameservers,
getaddrinfo, knocks.
"""

import json
import socket
import struct
import sys

from listeners import connect, knock_all, listeners, walk_record  # installed by the runner (acceptance/cases/judges/netprobes.py)

DNS_ID = 0x5050


def routes():
    found = []
    with open("/proc/net/route") as f:
        found += [("ipv4", line.split()[0], line.split()[1]) for line in f.read().splitlines()[1:] if line.strip()]
    try:
        with open("/proc/net/ipv6_route") as f:
            found += [("ipv6", line.split()[9], line.split()[0] + "/" + str(int(line.split()[1], 16)))
                      for line in f.read().splitlines() if line.strip()]
    except FileNotFoundError:  # IPv6 disabled in this namespace: no IPv6 route at all
        pass
    return found


def interfaces():
    with open("/proc/net/dev") as f:
        return sorted(line.split(":", 1)[0].strip() for line in f.read().splitlines()[2:] if ":" in line)


def dns_query(name):
    labels = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".") if p)
    return struct.pack(">HHHHHH", DNS_ID, 0x0100, 1, 0, 0, 0) + labels + b"\x00\x00\x01\x00\x01"


def is_dns_answer(data):
    return len(data) >= 12 and struct.unpack(">H", data[:2])[0] == DNS_ID and bool(data[2] & 0x80)


def split(where):
    host, port = where.rsplit(":", 1)
    if host.startswith("["):
        return socket.AF_INET6, host[1:-1], int(port)
    return socket.AF_INET, host, int(port)


def ask_dns(sock, name, stream):
    query = dns_query(name)
    if stream:
        sock.sendall(struct.pack(">H", len(query)) + query)
        data = sock.recv(4096)[2:]
    else:
        sock.send(query)
        data = sock.recv(4096)
    return "answered" if is_dns_answer(data) else f"replied, not DNS ({len(data)} bytes)"


def attempt(name, where, label):
    family, host, port = split(where)
    if name.startswith("dns"):
        s = socket.socket(family, socket.SOCK_DGRAM)
        s.settimeout(3.0)
        try:
            s.connect((host, port))  # connected: an ICMP refusal comes back as ECONNREFUSED, not a timeout
            return ask_dns(s, f"{label}.{name}.lab.example", stream=False)
        finally:
            s.close()
    c = socket.create_connection((host, port), timeout=3.0)
    c.sendall(label.encode())
    c.close()
    return "connected"


def routable(where):
    """Where the kernel would send a datagram to ``where``: a UDP connect does the route lookup and sends
    nothing."""
    family, host, port = split(where)
    s = socket.socket(family, socket.SOCK_DGRAM)
    try:
        s.connect((host, port))
        return f"routable (not sent): source {s.getsockname()[0]}"
    finally:
        s.close()


def nameservers():
    try:
        with open("/etc/resolv.conf") as f:
            text = f.read()
    except OSError:
        return None, ["127.0.0.1:53"]  # glibc's resolver without a resolv.conf asks 127.0.0.1
    found = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] == "nameserver":
            found.append(f"[{fields[1]}]:53" if ":" in fields[1] else f"{fields[1]}:53")
    return text, found or ["127.0.0.1:53"]


def result_of(call, *args):
    try:
        return call(*args)
    except socket.gaierror as exc:
        return f"gaierror: errno {exc.errno}"
    except OSError as exc:
        return f"{type(exc).__name__}: errno {exc.errno}"


def main(argv):
    label, broker, targets = argv[0], argv[1], [t.split("=", 1) for t in argv[2:]]
    table = routes()
    unsafe = sorted({iface for _, iface, _ in table if iface != "lo" and not iface.startswith("ppnet")})
    resolv, servers = nameservers()
    report = {"routes": [" ".join(r) for r in table], "unsafe_routes": unsafe, "interfaces": interfaces(),
              "resolv_conf": resolv, "attempts": {}, "nameservers": {}, "knocks": {}}
    if unsafe:
        for name, where in targets:
            report["attempts"][name] = result_of(routable, where)
        report["nameservers"] = {s: result_of(routable, s) for s in servers}
        report["getaddrinfo"] = "not tried: unsafe routes"
        report["knocks"] = {e["where"]: "not tried: unsafe routes" for e in listeners()}
        print(json.dumps(report))
        return
    for name, where in targets:
        report["attempts"][name] = result_of(attempt, name, where, label)
    for server in servers:
        report["nameservers"][server] = result_of(attempt, "dns-ns", server, label)
    # the system resolver, whatever the sandbox's /etc says (nsswitch, resolv.conf, a stub it reaches)
    report["getaddrinfo"] = result_of(lambda: socket.getaddrinfo(f"{label}.sys.lab.example", 80) and "resolved")
    broker_host = broker.rsplit(":", 1)

    def knock(entry):
        if entry.get("port") == int(broker_host[1]) and entry.get("host") in (broker_host[0], "127.0.0.1", "::1"):
            return "skipped: the broker"
        sock = connect(entry, 0.5)
        try:
            default = socket.SOCK_STREAM if entry["proto"].startswith("tcp") else socket.SOCK_DGRAM
            stream = entry.get("kind", default) != socket.SOCK_DGRAM
            return ask_dns(sock, f"{label}.knock.lab.example", stream)
        finally:
            sock.close()

    report["knocks"] = knock_all(listeners(), knock)
    report["walk"] = walk_record()
    print(json.dumps(report))


main(sys.argv[1:])
