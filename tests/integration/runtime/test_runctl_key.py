"""The run-control key: one per instance and wake, held by its broker and presented on the platform side;
the agent's run-control API refuses every request without it, and no other instance can read it."""

from __future__ import annotations

import json
import logging
import subprocess
import time
import urllib.error
import urllib.request

from runtime.controller import RUNCTL_KEY_FILE

# Run inside a sandbox: each (label, Authorization header or None) straight to the agent's run-control port,
# as anything in the sandbox could; the answers' statuses as JSON. Waits (bounded) for the port to open.
DIRECT = r"""
import http.client, json, sys, time
tries = json.loads(sys.argv[1])
own = open("/run/agent/runctl.key").read().strip()
out = {}
for label, header in tries:
    header = "Bearer " + own if header == "OWN" else header
    deadline = time.monotonic() + 10
    while True:
        conn = http.client.HTTPConnection("127.0.0.1", 8642, timeout=10)
        try:
            conn.request("POST", "/v1/runs", json.dumps({"input": "direct"}), {"Content-Type": "application/json",
                         **({"Authorization": header} if header else {})})
            out[label] = conn.getresponse().status
            break
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
        finally:
            conn.close()
print(json.dumps(out))
"""

# Run inside a sandbox: which of the given secrets appear in any file it can read (outside /proc, /sys and
# /usr, the system's own) or in any of its processes' environment and command line.
SCAN = r"""
import json, os, sys
secrets = json.loads(sys.argv[1])
found = {s: [] for s in secrets}
def look(path):
    try:
        with open(path, "rb") as f:
            data = f.read(1 << 20)
    except OSError:
        return
    for s in secrets:
        if s.encode() in data:
            found[s].append(path)
for top in os.listdir("/"):
    if top in ("proc", "sys", "usr", "dev"):
        continue
    for folder, dirs, files in os.walk("/" + top):
        for name in files:
            look(os.path.join(folder, name))
for pid in filter(str.isdigit, os.listdir("/proc")):
    if int(pid) == os.getpid():
        continue  # this scan's own command line names what it looks for
    look(f"/proc/{pid}/environ")
    look(f"/proc/{pid}/cmdline")
print(json.dumps(found))
"""


def _runctl(broker, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(broker.runctl_url + path, json.dumps(body).encode() if body is not None else None,
                                     {"Content-Type": "application/json"}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def _key_of(c, record) -> str:
    return (c.state / "instances" / record.id / "control" / RUNCTL_KEY_FILE).read_text().strip()


def _inside(c, record, script: str, argument: object) -> dict:
    done = c.exec(record.id, ["/usr/bin/python3", "-I", "-c", script, json.dumps(argument)], timeout=60)
    if done.rc != 0:
        raise RuntimeError(f"the probe in {record.id} failed: {done.stderr.decode(errors='replace')}")
    return json.loads(done.stdout)


def test_runctl_through_the_broker_works_and_straight_without_the_key_is_refused(platform_controller):
    c = platform_controller
    a = c.wake(c.provision("org1", "alice").id)
    b = c.wake(c.provision("org2", "bob").id)
    key_a, key_b = _key_of(c, a), _key_of(c, b)
    assert key_a and key_b and key_a != key_b
    # Through A's broker (which presents the key): a run starts and is read back.
    status, started = _runctl(c.broker(a.id), "POST", "/v1/runs", {"input": "hello"})
    assert status == 202, started
    assert _runctl(c.broker(a.id), "GET", f"/v1/runs/{started['run_id']}")[0] == 200
    # Straight to A's agent from inside A's sandbox: no key, a wrong one, B's key: refused; A's own key (read
    # where the agent reads it) is accepted, so the refusals are the key's doing, not a closed port.
    statuses = _inside(c, a, DIRECT, [["none", None], ["wrong", "Bearer " + "x" * len(key_a)],
                                      ["bare", key_a], ["b", "Bearer " + key_b], ["own", "OWN"]])
    assert statuses == {"none": 401, "wrong": 401, "bare": 401, "b": 401, "own": 202}


def test_the_key_of_a_is_not_readable_from_b_and_never_logged(platform_controller):
    c = platform_controller
    a = c.wake(c.provision("org1", "alice").id)
    b = c.wake(c.provision("org2", "bob").id)
    key_a, key_b = _key_of(c, a), _key_of(c, b)
    # Everything B's sandbox can read: its own key is there (the scan looks), A's is nowhere.
    found = _inside(c, b, SCAN, [key_a, key_b])
    assert found[key_b] == ["/run/agent/runctl.key"]
    assert found[key_a] == []
    # On the host, B's uid cannot open A's key file even given its path; A's uid can (the control).
    path = c.state / "instances" / a.id / "control" / RUNCTL_KEY_FILE

    def cat_as(uid: int) -> subprocess.CompletedProcess:
        return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "cat", str(path)],
                              capture_output=True, timeout=30)

    assert cat_as(b.uid).returncode != 0 and key_a.encode() not in cat_as(b.uid).stdout
    assert cat_as(a.uid).stdout.strip() == key_a.encode()
    # The other instance's broker holds its own key only.
    assert c.broker(b.id)._runctl_key == key_b and c.broker(a.id)._runctl_key == key_a
    # Used through the broker, and still in no line of the platform log.
    assert _runctl(c.broker(a.id), "POST", "/v1/runs", {"input": "hello"})[0] == 202
    for handler in logging.getLogger("pairproof").handlers:
        handler.flush()
    log = c.platform.log_path.read_text() if c.platform.log_path.exists() else ""
    assert key_a not in log and key_b not in log


def test_each_wake_has_a_fresh_key_and_the_old_one_is_refused(platform_controller):
    c = platform_controller
    a = c.wake(c.provision("org1", "alice").id)
    old = _key_of(c, a)
    c.sleep(a.id)
    a = c.wake(a.id)
    new = _key_of(c, a)
    assert new != old
    deadline = time.monotonic() + 10
    while (status := _runctl(c.broker(a.id), "GET", "/v1/runs/run_none")[0]) == 502 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert status == 404  # through the broker: the agent answered, so the new key was presented
    statuses = _inside(c, a, DIRECT, [["old", "Bearer " + old], ["own", "OWN"]])
    assert statuses == {"old": 401, "own": 202}
