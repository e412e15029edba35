"""NT-1, NT-2, NT-5 and NT-3 at the packet level: nothing leaves a sandbox but what goes to its broker.

Every address probed here exists only inside the run's lab (``acceptance/lab``): the sink answers for the
world there and records what reaches it. A sandbox as the platform builds it has no interface but
loopback, so its attempts die in the kernel (ENETUNREACH) and the sink records nothing; the broken
controls link a sandbox to the lab on purpose and show the same probe being recorded, canary and all.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from canaries import detect

from ..fixtures import _attach_file
from ..lab.bpf import EGRESS
from ..lab.capture import capture

pytestmark = pytest.mark.usefixtures("planted")
TCP_TARGETS = ("internet", "metadata", "product", "proxy", "provider")


def _records_carrying(lab, since: float, label: str) -> list[dict]:
    hits = []
    for record in lab.records(since):
        data = (record.get("name", "") + bytes.fromhex(record.get("payload", "")).decode("latin-1"))
        if label in data:
            hits.append(record)
    return hits


def _everyone(case: str):
    return [pytest.param(n, marks=pytest.mark.case(case, "refusal", pair=f"{n}->outside"), id=n) for n in ("A", "B", "C")]


# -- NT-1 / NT-2 -----------------------------------------------------------------------------------------

def _probe_open_egress(target, principal, lab, egress_probe, label: str) -> tuple[float, dict]:
    """The egress probe run in a sandbox given open egress into the lab; (when it began, its report)."""
    since = time.time()
    with target.broken("open-egress", principal=principal, lab=lab) as leaky:
        return since, egress_probe(leaky, label)


@pytest.mark.parametrize("name", _everyone("NT-1"))
def test_nt1_no_dns_reaches_any_resolver(name, instances, planted, lab, egress_probe):
    since = time.time()
    label = planted.tokens[name]["memory"]
    report = egress_probe(instances[name], label)
    assert report["unsafe_routes"] == [], "the sandbox has a route beyond loopback"
    assert report["attempts"]["dns"].startswith("OSError")
    assert report["attempts"]["getaddrinfo"].startswith(("gaierror", "OSError"))
    assert lab.records(since) == []


@pytest.mark.case("NT-1", "X", pair="B->outside")
def test_nt1_broken_open_egress_dns_is_recorded(principals, planted, lab, target, egress_probe):
    label = planted.tokens["B"]["memory"]
    since, report = _probe_open_egress(target, principals["B"], lab, egress_probe, label)
    assert report["attempts"]["dns"] == "answered"
    names = [r["name"] for r in lab.records(since) if r["kind"] == "dns"]
    assert any(label in n for n in names), names
    assert label in {h.token for h in detect.find(Path(lab.pcap_path).read_bytes())}


@pytest.mark.parametrize("name", _everyone("NT-2"))
def test_nt2_no_syn_to_the_world_or_the_platform(name, instances, planted, lab, egress_probe):
    since = time.time()
    report = egress_probe(instances[name], planted.tokens[name]["task"])
    assert report["unsafe_routes"] == []
    assert {t: report["attempts"][t].split(":")[0] for t in TCP_TARGETS} == {t: "OSError" for t in TCP_TARGETS}
    assert [r for r in lab.records(since) if r["kind"] == "syn"] == []


@pytest.mark.case("NT-2", "P", pair="A->broker")
def test_nt2_own_broker_reachable(instances, broker_call):
    assert broker_call(instances["A"], "GET", "/whoami")["status"] == 200


@pytest.mark.case("NT-2", "X", pair="B->outside")
def test_nt2_broken_open_path_syns_are_recorded(principals, planted, lab, target, egress_probe):
    from ..lab import ADDRESSES

    label = planted.tokens["B"]["task"]
    since, report = _probe_open_egress(target, principals["B"], lab, egress_probe, label)
    assert all(report["attempts"][t] == "connected" for t in TCP_TARGETS), report
    syn_to = {r["dst"] for r in lab.records(since) if r["kind"] == "syn"}
    assert {ADDRESSES[t] for t in TCP_TARGETS} <= syn_to


# -- NT-3 at the packet level -----------------------------------------------------------------------------

@pytest.mark.parametrize("intruder", [pytest.param(n, marks=pytest.mark.case("NT-3", "refusal", pair=f"{n}->A"), id=n)
                                      for n in ("B", "C")])
def test_nt3_nothing_of_the_intruder_arrives_in_a_namespace(intruder, instances, target, broker_call, tmp_path):
    """While the intruder calls 'the broker' a capture inside A's network namespace sees no packet at all;
    the same capture, while A calls its own broker, does see A's packets (so the silence means something)."""
    import threading

    a_pid = target.identity(instances["A"]).host_pid

    def captured_during(action, name: str) -> list[dict]:
        seen: list[dict] = []
        listening = threading.Event()
        watcher = threading.Thread(target=lambda: seen.extend(
            capture(a_pid, 2.0, "ip or ip6 or arp", tmp_path / f"{name}.pcap", ready=listening)))
        watcher.start()
        assert listening.wait(30), "the capture in A's namespace did not start"
        action()
        watcher.join()
        _attach_file(tmp_path / f"{name}.pcap", f"A's namespace during {name}.pcap")
        return seen

    def intruder_calls() -> None:
        for _ in range(3):
            assert broker_call(instances[intruder], "GET", "/whoami")["body"] == {"instance": instances[intruder].key}

    assert captured_during(intruder_calls, f"{intruder}'s calls") == []
    assert captured_during(lambda: broker_call(instances["A"], "GET", "/whoami"), "A's own call") != []


# -- NT-5 -------------------------------------------------------------------------------------------------

@pytest.mark.case("NT-5", "refusal", pair="A->outside")
def test_nt5_idle_window_has_no_egress(request, instances, target, lab, tmp_path, sandbox_host):
    """An idle instance, observed from inside its own network namespace for the idle window, sends no DNS
    query, no UDP datagram and no SYN (its broker is idle too: nothing of it is captured either)."""
    seconds = request.config.getoption("pairproof_idle_seconds")
    since = time.time()
    sandbox_host(instances["A"]).run("true")  # proof: the instance answers, and it is this one we watch
    seen = capture(target.identity(instances["A"]).host_pid, seconds, EGRESS, tmp_path / "idle.pcap")
    _attach_file(tmp_path / "idle.pcap", f"A idle for {seconds}s.pcap")
    assert seen == []
    assert lab.records(since) == []


@pytest.mark.case("NT-5", "X", pair="B->outside")
def test_nt5_broken_catalog_refresh_is_seen(request, principals, target, lab):
    seconds = request.config.getoption("pairproof_idle_seconds")
    since = time.time()
    with target.broken("open-egress", principal=principals["B"], lab=lab, catalog_refresh=0.5):
        end = time.monotonic() + max(seconds, 15.0)  # until the first lookups arrive; a loaded machine is slow to start the agent
        while time.monotonic() < end and "models.catalog.example" not in {r.get("name") for r in lab.records(since)}:
            time.sleep(0.1)
    names = {r["name"] for r in lab.records(since) if r["kind"] == "dns"}
    assert "models.catalog.example" in names, names
