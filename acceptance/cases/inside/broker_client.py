"""Probe: one HTTP exchange with the instance's broker, from inside the sandbox (stdlib only).

Fed to the sandbox's python on stdin; argv: METHOD URL [JSON_BODY] or ``raw HOST PORT B64_BYTES`` to
send bytes as they are (an absolute-form request line, CONNECT...). Prints one JSON line
``{"status", "body"}`` (``body`` parsed when it is JSON), or ``{"error": ...}`` when nothing answered.
"""

import base64
import json
import socket
import sys
import urllib.error
import urllib.request


def answer(status, raw):
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        body = raw.decode(errors="replace")
    print(json.dumps({"status": status, "body": body}))


def main(argv):
    if argv[0] == "raw":
        host, port, payload = argv[1], int(argv[2]), base64.b64decode(argv[3])
        try:
            with socket.create_connection((host, port), timeout=30) as s:
                s.sendall(payload)
                s.shutdown(socket.SHUT_WR)
                data = b""
                while chunk := s.recv(65536):
                    data += chunk
        except OSError as exc:
            print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
            return
        head, _, body = data.partition(b"\r\n\r\n")
        status = int(head.split(b" ")[1]) if head.startswith(b"HTTP/") else 0
        answer(status, body)
        return
    method, url = argv[0], argv[1]
    data = argv[2].encode() if len(argv) > 2 else None
    request = urllib.request.Request(url, data, {"Content-Type": "application/json", "x-api-key": "sandbox-holds-no-key"},
                                     method=method)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            answer(response.status, response.read())
    except urllib.error.HTTPError as exc:
        answer(exc.code, exc.read())
    except OSError as exc:
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))


main(sys.argv[1:])
