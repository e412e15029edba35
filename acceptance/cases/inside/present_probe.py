"""Probe: send a list of HTTP requests to the instance's broker from inside the sandbox, one after another
(stdlib only); what the authority sweep presents (``judges.presented``).

Fed to the sandbox's python on stdin, after a first line ``PLAN = [...]`` that the host puts in front of this
file: each item ``{"id", "method", "path", "headers", "body"}`` (``path`` with its query; ``body`` text or
null), sent to the base URL in argv[1]. A request the broker does not answer is recorded with ``status`` 0 and
its error (the host decides what that means). Prints one JSON line ``{"answers": [{"id", "status",
"error"}...]}`` in the plan's order.
"""

import http.client
import json
import sys
import urllib.parse


def send(base, item):
    parts = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        body = item["body"].encode() if item["body"] is not None else None
        conn.request(item["method"], item["path"], body, item["headers"])
        response = conn.getresponse()
        response.read()
        return {"id": item["id"], "status": response.status, "error": ""}
    except (OSError, http.client.HTTPException) as exc:
        return {"id": item["id"], "status": 0, "error": f"{type(exc).__name__}: {exc}"}
    finally:
        conn.close()


def main(base):
    print(json.dumps({"answers": [send(base, item) for item in PLAN]}))  # noqa: F821 (the host's first line)


main(sys.argv[1])
