"""Probe: on every stream socket the sandbox can see, ``GET /v1/runs/run_doesnotexist`` with each run-control
key given (by label) and with none; report each answer (status and body). Uses ``listeners.py``.

The keys come with the script on stdin (``KEYS``: label -> key, set by the runner), never in argv, where a
scan of the sandbox's /proc would find them. Prints one JSON object: ``{"knocks": {where: {label: {"status",
"body"}}}}`` (a status that is not a number says why there was no answer). Knocks go to local addresses only.
"""

import json
import socket

from listeners import connect, knock_all, listeners, walk_record  # installed by the runner (acceptance/cases/judges/netprobes.py)


def status(entry, key):
    sock = connect(entry, 1.0)
    try:
        auth = f"Authorization: Bearer {key}\r\n" if key else ""
        sock.sendall(f"GET /v1/runs/run_doesnotexist HTTP/1.0\r\nHost: 127.0.0.1\r\n{auth}"
                     "Connection: close\r\n\r\n".encode())
        data = b""
        while len(data) < 65536:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    finally:
        sock.close()
    head, _, body = data.partition(b"\r\n\r\n")
    line = head.split(b"\r\n", 1)[0]
    if not (line.startswith(b"HTTP/") and len(line.split(b" ")) > 1):
        return {"status": "not HTTP"}
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = body[:200].decode("latin-1")
    return {"status": line.split(b" ", 2)[1].decode(), "body": parsed}


def knock(entry):
    answers = {}
    for label, key in [("no key", ""), *sorted(KEYS.items())]:  # noqa: F821 (set by the runner)
        try:
            answers[label] = status(entry, key)
        except OSError as exc:
            answers[label] = {"status": f"{type(exc).__name__}: errno {exc.errno}"}
    return answers


entries = [e for e in listeners(udp=False) if e.get("kind", socket.SOCK_STREAM) == socket.SOCK_STREAM]
print(json.dumps({"knocks": knock_all(entries, knock), "walk": walk_record()}))
