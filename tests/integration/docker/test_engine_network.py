"""The Docker engine's network is closed (tools/setup-docker starts it in a network namespace of its own with
only loopback): the namespace itself, a container with ``network_mode="host"`` (what a broken control or a
mutant would ask for), and a pull of an image that does not exist (dockerd's own resolver and dial).

Each test that makes the engine or a container try to reach out first checks the namespace has lo alone
(``engine.network_problems``), so a broken engine fails the test before anything can leave the machine."""

from __future__ import annotations

import json
import os
import secrets
import subprocess

import docker
import pytest

from acceptance.harness.lab.capture import Capture, netns_counters
from acceptance.targets.docker import engine
from acceptance.targets.docker import image as images
from runtime.isolation import containers

# Run inside a host-network container: the interfaces it sees (two ways), and, only when that is lo alone,
# the errno of a TCP connect to a documentation address of each family (0 would mean connected).
PROBE = """
import errno, json, os, socket
names = sorted(os.listdir("/sys/class/net"))
indexed = sorted(name for _, name in socket.if_nameindex())
result = {"sys": names, "if_nameindex": indexed, "connect": {}}
if names == indexed == ["lo"]:
    for address, family in (("192.0.2.1", socket.AF_INET), ("2001:db8::1", socket.AF_INET6)):
        s = socket.socket(family, socket.SOCK_STREAM)
        s.settimeout(2)
        code = s.connect_ex((address, 9))
        s.close()
        result["connect"][address] = errno.errorcode.get(code, "connected")
print(json.dumps(result))
"""


@pytest.fixture
def run() -> str:
    return f"dn{secrets.token_hex(4)}"


@pytest.fixture
def client():
    made = containers.client(timeout=60)
    yield made
    made.close()


def _engine() -> int:
    pid = engine.engine_pid(engine.socket_path())
    assert pid is not None, "no dockerd holds the engine's socket"
    return pid


def _closed_or_stop() -> int:
    problems = engine.network_problems()
    if problems:  # nothing below may run against an engine that could reach off the machine
        pytest.fail(problems[0])
    return _engine()


def test_the_engines_network_namespace_has_only_loopback():
    pid = _engine()
    ns = os.readlink(f"/proc/{pid}/ns/net")
    assert ns != os.readlink("/proc/self/ns/net")
    links = json.loads(subprocess.run(["nsenter", "-t", str(pid), "-n", "ip", "-j", "link", "show"],
                                      capture_output=True, text=True, check=True).stdout)
    assert [(link["ifname"], "UP" in link["flags"]) for link in links] == [("lo", True)]
    for family in ("-4", "-6"):  # no route in either family but loopback's own
        routes = json.loads(subprocess.run(["nsenter", "-t", str(pid), "-n", "ip", "-j", family, "route", "show",
                                            "table", "all"], capture_output=True, text=True, check=True).stdout)
        assert {route.get("dev") for route in routes} <= {"lo"}, routes
    containerds = [child for child in engine.children(pid) if engine._comm(child) == "containerd"]
    assert containerds, "dockerd runs no containerd of its own"
    assert {os.readlink(f"/proc/{child}/ns/net") for child in containerds} == {ns}
    assert engine.network_problems() == []


def test_a_host_network_container_sees_only_loopback_and_reaches_nothing(client, run):
    pid = _closed_or_stop()
    container = client.containers.create(
        images.ensure("reference", docker_client=client), ["/usr/bin/python3", "-I", "-S", "-c", PROBE],
        network_mode="host", user="65534:65534", read_only=True, cap_drop=["ALL"],
        security_opt=["no-new-privileges"], labels={containers.LABEL_RUN: run}, detach=True)
    try:
        container.start()
        container.reload()
        inside = container.attrs["State"]["Pid"]
        if inside:  # still running: it is in the engine's namespace, not one of its own
            assert os.readlink(f"/proc/{inside}/ns/net") == os.readlink(f"/proc/{pid}/ns/net")
        assert container.wait(timeout=60)["StatusCode"] == 0
        seen = json.loads(container.logs(stdout=True, stderr=False))
    finally:
        container.remove(force=True)
    assert seen == {"sys": ["lo"], "if_nameindex": ["lo"],
                    "connect": {"192.0.2.1": "ENETUNREACH", "2001:db8::1": "ENETUNREACH"}}
    assert containers.run_containers(run) == []


def test_a_pull_of_a_missing_image_fails_without_a_packet_on_the_machine(client, tmp_path):
    pid = _closed_or_stop()
    token = secrets.token_hex(6)
    registry = f"pairproof-{token}.invalid"
    before = netns_counters(pid)
    # Everything a pull would send (its registry's name looked up, then HTTPS or HTTP to it), on every
    # interface of this host's namespace, the capture proven live from before the pull to after it.
    with Capture(os.getpid(), "port 53 or port 443 or port 80", tmp_path / "pull.pcap") as capture:
        with pytest.raises(docker.errors.APIError) as failed:
            client.images.pull(f"{registry}/made-up", tag="latest")
    after = netns_counters(pid)
    # dockerd's own resolver could not even send its query ("dial udp ...: connect: network is unreachable")
    assert registry in failed.value.explanation and "network is unreachable" in failed.value.explanation
    carrying = [frame.summary() for frame in capture.frames if token.encode() in bytes(frame)]
    assert carrying == [], carrying
    # It did try, in the engine's namespace, and the kernel found no route there for it.
    tried = sum(after[key] - before[key] for key in ("Ip.OutNoRoutes", "Ip6OutNoRoutes"))
    assert tried > 0, (str(failed.value), before, after)


@pytest.mark.parametrize("setup, refusal", [
    ("ip link add pp-a type veth peer name pp-b", ("pp-a", "pp-b", "not lo alone")),
    ("ip route add local 192.0.2.0/24 dev lo", ("routes to 192.0.2.1 (ECONNREFUSED)",)),
])
def test_the_check_refuses_a_namespace_that_is_not_lo_alone(setup, refusal):
    """What the preflight says of a namespace that is not closed: one of this test's own (a veth pair,
    or a route to a documentation address that stays on its loopback), and this host's."""
    holder = subprocess.Popen(["unshare", "--net", "--", "sh", "-c", f"ip link set lo up && {setup} && echo ready "
                               "&& exec sleep 600"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "ready\n"
        said = engine._closed(holder.pid, "the namespace")
        assert all(part in said for part in refusal), said
    finally:
        holder.kill()
        holder.wait()
    assert "runs in this host's network namespace" in engine._closed(os.getpid(), "this process")
