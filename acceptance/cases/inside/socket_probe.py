"""Probe: knock on every socket the sandbox can see, and on the broker URLs given, with ``GET /whoami``;
report who answered. Uses ``listeners.py``.

argv: broker base URLs (``http://HOST:PORT``) to try besides what is enumerated. Prints one JSON object:
``{"knocks": {where: {"status", "body"} or "Error: ..."}, "connected": [where], "entries": {where: entry}}``:
``connected`` names every socket the connect reached (whatever came after), ``entries`` says what each
``where`` is (protocol, address or path), for the host to find the socket's holder; ``walk`` is the
filesystem walk's completeness record (``listeners.walk_record``). Knocks go to local addresses only.
"""

import json
import socket
import sys

from listeners import connect, knock_all, listeners, walk_record  # installed by the runner (acceptance/cases/judges/netprobes.py)

CONNECTED = []


def whoami(entry):
    sock = connect(entry, 1.0)
    CONNECTED.append(entry["where"])
    try:
        sock.sendall(b"GET /whoami HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        data = b""
        while len(data) < 65536:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    finally:
        sock.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status = head.split(b" ", 2)[1].decode() if head.startswith(b"HTTP/") and len(head.split(b" ")) > 1 else ""
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = body[:80].decode("latin-1")
    return {"status": status, "body": parsed}


def main(urls):
    entries = listeners(udp=False)
    for url in urls:
        host, port = url.split("//", 1)[1].rstrip("/").rsplit(":", 1)
        family = socket.AF_INET6 if host.startswith("[") else socket.AF_INET
        entries.append({"proto": "tcp", "family": family, "host": host.strip("[]"), "port": int(port),
                        "where": f"given {url}"})
    knocks = knock_all(entries, whoami)
    described = {e["where"]: {k: v for k, v in e.items() if k in ("proto", "family", "host", "port", "path", "kind")}
                 for e in entries}
    print(json.dumps({"knocks": knocks, "connected": sorted(set(CONNECTED)), "entries": described, "walk": walk_record()}))


main(sys.argv[1:])
