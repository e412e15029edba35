"""NT-1, NT-2, NT-3, NT-5: nothing leaves a sandbox but what goes to its broker.

Every address probed here exists only inside the run's lab (``acceptance/harness/lab``): the sink answers for the
world there, over IPv4 and IPv6, and records what reaches it. A sandbox as the platform builds it has no
interface but loopback, so the kernel refuses its attempts (ENETUNREACH, no resolver answering): the
refusals require exactly that answer, not merely "some error", because a sandbox that reaches a resolver
or a host outside the lab gets a different one even when the lab's sink cannot see it. The broken
controls give a sandbox a way out on purpose (a route into the lab; a resolver inside its namespace with
no route at all) and show the same probe recorded at the sink, canary and all.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from acceptance.cases.judges import holders, netprobes
from acceptance.cases.judges.netprobes import A_RESOLVER_ANSWERED, NO_RESOLVER_ANSWERED, NO_ROUTE, REFUSED
from acceptance.contract import Principal
from acceptance.errors import ProofError, TargetError
from acceptance.harness import hostscan
from acceptance.harness.evidence import attach
from acceptance.harness.lab.bpf import EGRESS
from acceptance.harness.lab.capture import Capture, egress_counters
from acceptance.harness.wait import until

pytestmark = pytest.mark.usefixtures("planted")
DNS_TARGETS = ("dns", "dns6")
CATALOG_HOST = "models.catalog.example"  # what the reference agent's catalog refresh looks up
AGENT_START_DEADLINE = 30.0  # hermes takes 3-9 s to its first lookup on a loaded machine
TCP_TARGETS = tuple(f"{name}{v}" for name in ("internet", "metadata", "product", "proxy", "provider") for v in ("", "6"))


@pytest.fixture
def egress(target, sandbox_host):
    """``egress(ref, label)``: the egress probe (``egress_probe.py``) run inside ``ref``; its report."""
    return lambda ref, label: netprobes.egress(sandbox_host(ref), target, ref, label)


@pytest.fixture
def sweep(sandbox_host):
    """``sweep(ref, urls)``: ``GET /whoami`` on every socket ``ref`` can see and on ``urls``."""
    return lambda ref, urls: netprobes.sweep(sandbox_host(ref), urls)


def _everyone(case: str):
    return [pytest.param(n, marks=pytest.mark.case(case, "refusal", pair=f"{n}->outside"), id=n) for n in ("A", "B", "C")]


def _looked(report: dict, lab, label: str, since: float) -> list[dict]:
    """Attach what the probe and the sink saw; the sink's records carrying ``label`` since ``since``."""
    carried = lab.records_carrying(label, since)
    attach("egress probe report (routes, attempts, resolvers, sockets knocked)", report)
    attach(f"lab sink: {len(lab.records(since))} records since the probe, {len(carried)} carry the canary",
           carried)
    return carried


# -- NT-1 / NT-2 -----------------------------------------------------------------------------------------

def _probe_open_egress(target, principal, lab, egress, label: str) -> tuple[float, dict]:
    """The egress probe run in a sandbox given open egress into the lab; (when it began, its report)."""
    since = time.time()
    with target.broken_open_egress(principal=principal, lab=lab) as leaky:
        return since, egress(leaky, label)


@pytest.mark.parametrize("name", _everyone("NT-1"))
def test_nt1_no_dns_reaches_any_resolver(name, instances, planted, lab, egress):
    """No DNS query from the sandbox reaches any resolver, by any path: a route of either family to a
    resolver (the lab's, IPv4 and IPv6); the nameservers its resolv.conf names, or glibc's 127.0.0.1 without
    one; the system resolver (getaddrinfo, through whatever nsswitch and /etc say); a resolver listening
    inside its namespace (a stub bound there by a platform process, as the broker is); any other socket it
    can see (TCP/UDP of either family, unix sockets by path or abstract, socket files mounted in). Each
    must fail as the kernel fails a loopback-only sandbox (no route; refused on loopback; no resolver
    answered), no socket may give a DNS answer, and the sink records nothing carrying the canary. A route
    beyond the lab is itself a finding (the probe then sends nothing, and reports the kernel's route). The
    socket sweep's walk must be complete (``netprobes.sweep_problems``), or the case is broken."""
    since = time.time()
    label = planted.tokens[name]["memory"]
    report = egress(instances[name], label)
    carried = _looked(report, lab, label, since)
    assert {t: report["attempts"][t] for t in DNS_TARGETS} == {t: NO_ROUTE for t in DNS_TARGETS}
    assert report["unsafe_routes"] == [], f"the sandbox has routes beyond loopback: {report['routes']}"
    assert {s: r for s, r in report["nameservers"].items() if r not in (NO_ROUTE, REFUSED)} == {}
    assert report["getaddrinfo"] == NO_RESOLVER_ANSWERED
    assert {w: r for w, r in report["knocks"].items() if r == "answered"} == {}
    if "skipped: the broker" not in report["knocks"].values():
        raise ProofError(f"the socket sweep did not see the sandbox's own broker: it looked at {sorted(report['knocks'])}")
    assert carried == []
    problems = netprobes.sweep_problems(report)  # after the findings: a leak found stands, a partial sweep proves nothing
    if problems:
        raise ProofError("the socket sweep did not look everywhere: " + "; ".join(problems))


@pytest.mark.case("NT-1", "X", pair="B->outside")
def test_nt1_broken_open_egress_dns_is_recorded(principals, planted, lab, target, egress):
    """With routes of both families into the lab, the same probe's queries reach the lab's resolver: it
    answers (NXDOMAIN, so getaddrinfo says "no such name", not "no resolver"), and the sink and its pcap
    hold the canary from the IPv4 query, the IPv6 query and the system resolver's."""
    label = planted.tokens["B"]["memory"]
    since, report = _probe_open_egress(target, principals["B"], lab, egress, label)
    carried = _looked(report, lab, label, since)
    assert {t: report["attempts"][t] for t in DNS_TARGETS} == {t: "answered" for t in DNS_TARGETS}
    assert report["getaddrinfo"] == A_RESOLVER_ANSWERED
    names = {r["name"] for r in carried if r["kind"] == "dns"}
    assert {f"{label}.{how}.lab.example" for how in ("dns", "dns6", "sys")} <= names, names
    assert label in hostscan.scan_files([lab.pcap_path], "the lab's pcap").tokens


@pytest.mark.case("NT-1", "X", pair="B->outside")
def test_nt1_broken_resolver_without_a_route_is_recorded(planted, lab, target, egress, dedicated):
    """A resolver reached by no route at all: a DNS stub listening inside the sandbox's own namespace
    (bound there from outside, as the broker's listener is) that forwards to the lab. The sandbox still has
    no route (its direct attempts fail with ENETUNREACH), yet the probe's system lookup and its socket sweep
    reach the stub, and the sink records their queries carrying the canary."""
    label = planted.tokens["B"]["memory"]
    nora = dedicated("N", "nora")
    since = time.time()
    with lab.stub_resolver(target.identity(nora).host_pid) as where:
        report = egress(nora, label)
    carried = _looked(report, lab, label, since)
    attach("stub resolver bound into the sandbox's namespace", where)
    assert report["unsafe_routes"] == [] and report["attempts"]["dns"] == NO_ROUTE
    assert report["getaddrinfo"] == A_RESOLVER_ANSWERED
    assert "answered" in report["knocks"].values()
    names = {r["name"] for r in carried if r["kind"] == "dns"}
    assert {f"{label}.sys.lab.example", f"{label}.knock.lab.example"} <= names, names


@pytest.mark.parametrize("name", _everyone("NT-2"))
def test_nt2_no_syn_to_the_world_or_the_platform(name, instances, planted, lab, egress):
    """No connection attempt leaves for the internet, the metadata service or the platform's own services,
    over IPv4 or IPv6: each fails with ENETUNREACH in the sandbox's own kernel (a sandbox on any network,
    even one the lab cannot see, gets another answer), and the sink records no SYN."""
    since = time.time()
    report = egress(instances[name], planted.tokens[name]["task"])
    _looked(report, lab, planted.tokens[name]["task"], since)
    syns = [r for r in lab.records(since) if r["kind"] == "syn"]
    assert {t: report["attempts"][t] for t in TCP_TARGETS} == {t: NO_ROUTE for t in TCP_TARGETS}
    assert report["unsafe_routes"] == [], f"the sandbox has routes beyond loopback: {report['routes']}"
    assert syns == []


@pytest.mark.case("NT-2", "P", pair="A->broker")
def test_nt2_own_broker_reachable(instances, broker_call):
    assert broker_call(instances["A"], "GET", "/whoami")["status"] == 200


@pytest.mark.case("NT-2", "X", pair="B->outside")
def test_nt2_broken_open_path_syns_are_recorded(principals, planted, lab, target, egress):
    from acceptance.harness.lab import ADDRESSES, ADDRESSES6

    label = planted.tokens["B"]["task"]
    since, report = _probe_open_egress(target, principals["B"], lab, egress, label)
    _looked(report, lab, label, since)
    assert {t: report["attempts"][t] for t in TCP_TARGETS} == {t: "connected" for t in TCP_TARGETS}
    syn_to = {r["dst"] for r in lab.records(since) if r["kind"] == "syn"}
    names = {t.rstrip("6") for t in TCP_TARGETS}
    assert {ADDRESSES[t] for t in names} | {ADDRESSES6[t] for t in names} <= syn_to, syn_to


# -- NT-3: each sandbox reaches its own broker, and only it -------------------------------------------

def _answering_as(knocks: dict, ref) -> list[str]:
    """The sockets whose answer names ``ref``'s instance."""
    return [where for where, answer in knocks.items() if isinstance(answer, dict) and ref.key in json.dumps(answer)]


@pytest.mark.parametrize("intruder", [pytest.param(n, marks=pytest.mark.case("NT-3", "refusal", pair=f"{n}->A"), id=n)
                                      for n in ("B", "C")])
def test_nt3_intruder_reaches_only_its_own_broker(intruder, instances, target, sandbox_host):
    """From the intruder's sandbox, every socket it can see is knocked on with ``GET /whoami``: TCP and
    TCP6 listeners of its namespace (whichever port, address or owner), unix sockets of its namespace by
    path and abstract name, socket files anywhere in its visible filesystem (a shared runtime folder mounted
    in), and A's broker address as the driver gives it. None answers as A's broker; and every socket the
    connect reached is held (found from the host by its inode, ``holders.py``) by a process of the
    intruder's own sandbox, or is the intruder's own broker. Ways this breaks that the sweep sees: a shared
    network namespace (every broker, the engine's and the host's services in reach), a broker listening on
    a wildcard address, a broker socket in a folder shared between sandboxes, an abstract socket in a
    shared namespace, the engine's socket mounted in, A's address reaching A from anywhere. The intruder's
    own broker must be among the answers, or the sweep could not tell a broker when it sees one; a socket
    it reached whose holder cannot be found leaves the case unjudged, and so does a sweep whose filesystem
    walk did not look everywhere (cut at its limit, or a folder it may search but could not list:
    ``netprobes.sweep_problems``)."""
    ref = instances[intruder]
    report = netprobes.sweep_report(sandbox_host(ref), [target.broker_endpoint(instances["A"])])
    knocks = report["knocks"]
    held = holders.socket_holders(target.identity(ref).host_pid, report)
    attach(f"{intruder}'s knocks ({len(knocks)} sockets) and their answers", knocks)
    attach(f"{intruder}'s sweep: its filesystem walk, judged complete", report["walk"])
    attach(f"the holders of the {len(held)} sockets {intruder} could connect to", held)
    own_broker = _answering_as(knocks, ref)
    if not own_broker:
        raise ProofError(f"the sweep from {intruder} never reached {intruder}'s own broker: it looked at {sorted(knocks)}")
    findings, unfound = holders.holder_findings(intruder, held, own_broker)
    assert _answering_as(knocks, instances["A"]) == []
    assert not findings, f"{len(findings)} sockets in {intruder}'s reach held by others: " + "; ".join(findings)
    if unfound:  # after the findings: a leak found stands even if another socket could not be judged
        raise TargetError(f"no host process holds the sockets {intruder} connected to: {unfound}")


@pytest.mark.case("NT-3", "P", pair="A->A")
def test_nt3_owner_reaches_its_broker(instances, target, sweep):
    """The very same sweep, from A, finds A's broker among what A's sandbox sees."""
    knocks = sweep(instances["A"], [target.broker_endpoint(instances["A"])])
    attach(f"A's knocks ({len(knocks)} sockets) and their answers", knocks)
    assert _answering_as(knocks, instances["A"]) != []


# -- NT-3 at the packet level -----------------------------------------------------------------------------

@pytest.mark.parametrize("intruder", [pytest.param(n, marks=pytest.mark.case("NT-3", "refusal", pair=f"{n}->A"), id=n)
                                      for n in ("B", "C")])
def test_nt3_nothing_of_the_intruder_arrives_in_a_namespace(intruder, instances, target, sweep, broker_call, tmp_path):
    """While the intruder knocks on every socket it can see and on A's broker address, a capture inside A's
    network namespace, live from before the first knock until after the last (its own start and stop
    markers arrive), sees no packet of any kind; the same capture around A's own call to its broker does
    see A's packets, so the silence means something."""
    a_pid = target.identity(instances["A"]).host_pid
    with Capture(a_pid, "ip or ip6 or arp", tmp_path / "intruder.pcap") as during_intruder:
        knocks = sweep(instances[intruder], [target.broker_endpoint(instances["A"])])
    with Capture(a_pid, "ip or ip6 or arp", tmp_path / "owner.pcap") as during_owner:
        broker_call(instances["A"], "GET", "/whoami")
    attach(f"{intruder}'s knocks ({len(knocks)} sockets)", knocks)
    attach(f"capture in A's namespace during {intruder}'s knocks", during_intruder.summary())
    attach("capture in A's namespace during A's own call", during_owner.summary())
    attach(f"A's namespace during {intruder}'s knocks.pcap", tmp_path / "intruder.pcap")
    attach("A's namespace during A's own call.pcap", tmp_path / "owner.pcap")
    if not during_owner.seen:
        raise ProofError("the capture in A's namespace saw nothing of A's own call to its broker: it is blind")
    assert during_intruder.seen == []


# -- NT-5 -------------------------------------------------------------------------------------------------

def _watched_is_probed(sandbox_host, ref, pid: int, name: str) -> None:
    """The proof of an idle observation, bound to what is watched: a proven probe ran in the very network
    namespace whose capture and counters are read (through ``pid``, the host's process in it)."""
    if sandbox_host(ref).run("readlink /proc/self/ns/net").stdout.strip() != os.readlink(f"/proc/{pid}/ns/net"):
        raise ProofError(f"the network namespace watched for {name} is not the one its proven probe ran in")


def _idle_observation(pids: dict[str, int], seconds: float, folder: Path) -> dict[str, tuple[Capture, dict, dict]]:
    """For each namespace (by a pid in it): a capture of egress for ``seconds`` (live throughout, by its
    markers), and its egress counters just before and just after. The refusal and its broken control both
    use this: ``{name: (capture, counters before, counters after)}``."""
    before = {name: egress_counters(pid) for name, pid in pids.items()}
    captures = {name: Capture(pid, EGRESS, folder / f"{name}.pcap") for name, pid in pids.items()}
    started = []
    try:
        for cap in captures.values():
            started.append(cap.start())
        time.sleep(seconds)  # the window itself: what is measured is what happens in it
    finally:
        for cap in started:
            cap.stop()
    return {name: (captures[name], before[name], egress_counters(pid)) for name, pid in pids.items()}


def _attach_observation(name: str, seconds: float, observed: tuple[Capture, dict, dict]) -> None:
    cap, before, after = observed
    attach(f"{name}: capture for {seconds}s", cap.summary())
    attach(f"{name}: egress counters of its namespace, before and after the window",
           {"before": before, "after": after})
    attach(f"{name} for {seconds}s.pcap", cap.pcap)


def _to_endpoint(frames: list[dict], endpoint: str) -> list[dict]:
    """The frames among ``frames`` that open a TCP connection to ``endpoint`` (a URL: its host and port) on
    loopback, where an instance's broker listens for it."""
    where = urlsplit(endpoint)
    return [f for f in frames if f.get("iface") == "lo" and f.get("kind") == "tcp" and f.get("dst") == where.hostname
            and f.get("dport") == where.port]


def _moved(before: dict, after: dict) -> dict:
    return {k: after[k] - before[k] for k in after if after[k] != before[k]}


# An idle instance is watched, from its last model call before the case to the end of the case, for at least
# this many idle windows (and at least the longest timer its profile declares): a periodic call with a period up
# to that shows in the provider's record, the period any timer of its profile has included.
IDLE_SPAN_WINDOWS = 4


def _model_calls(target, principal) -> list[dict]:
    """The provider's records of ``principal``'s model calls, in the order they arrived."""
    user = f"{principal.org}:{principal.user}"
    return [r for r in target.provider_records() if r["user"] == user]


# What an MCP client's session sends on its own, carrying nothing of the instance's data: its start (initialize,
# the initialized notification, the tool list page by page) and its keepalive, each with only the params MCP
# gives it (by name: ``_meta`` too), and small. A ping with params is a message, not a keepalive; anything else
# an idle instance's broker forwarded (a tool call, a model call) is egress through the broker no turn asked for.
MCP_HOUSEKEEPING = {"initialize": (frozenset({"protocolVersion", "capabilities", "clientInfo"}), 4096),
                    "notifications/initialized": (frozenset(), 2),
                    "tools/list": (frozenset({"cursor"}), 512),
                    "ping": (frozenset(), 2)}


def _housekeeping(record) -> bool:
    if record.get("route") != "/mcp" or record.get("method") not in MCP_HOUSEKEEPING:
        return False
    keys, most = MCP_HOUSEKEEPING[record["method"]]
    return set(record.get("params_keys") or ()) <= keys | {"_meta"} and (record.get("params_bytes") or 0) <= most


def _forwarded_since(target, ref, since: float | None) -> list[dict]:
    """What ``ref``'s broker forwarded for its agent (since ``since``; None: its whole life), but an MCP
    session's housekeeping."""
    return [dict(r) for r in target.broker_forwarded(ref)
            if (since is None or r["at"] >= since) and not _housekeeping(r)]


def _call_times(records: list[dict]) -> list[float]:
    times = [r.get("at") for r in records]
    if any(not isinstance(at, (int, float)) for at in times):
        raise ProofError("the provider's records carry no arrival time: an instance's last model call cannot be dated")
    return times


@pytest.mark.case("NT-5", "refusal", pair="A->outside")
def test_nt5_idle_window_has_no_egress(request, agent_profile, instances, target, dedicated, sandbox_host, tmp_path):
    """Idle instances send no DNS query, no UDP datagram and no SYN, and cause no model call. Two are watched over
    the same idle window: A, which holds the planted canaries (egress its data would trigger), and a fresh
    instance, never sent a turn. In each namespace a capture sees no egress during the window (periodic egress
    with a period up to the window shows there) and the kernel's counters do not move; the fresh instance's
    counters, over its whole life since its wake, count no datagram sent and no attempt to an address without a
    route (egress at start, or with a period longer than the window, shows there; A's lifetime counts hold the
    suite's own probes). A connection to its own broker (the endpoint the platform gives it) is the one way out,
    and is not egress outside the broker: hermes, idle, pings its tool server through it (an MCP keepalive every
    180 s); those SYNs are attached, and every other frame fails the case.

    What goes out through the broker is judged where it arrives, the provider's record of model calls (an agent
    sending its memory to the model while idle, a turn of nobody's, fails here though its SYNs are the
    broker's): the fresh instance has none over its whole life, from before it was provisioned to the end of the
    case (a call at wake shows there, whenever it is made), and the same of what its broker forwarded (a tool
    call, a model call; an MCP session's housekeeping aside); A has none from its last model call before the case
    (its last turn's, or the last of anything the suite had it do) to the end of the case, and that span lasts at
    least IDLE_SPAN_WINDOWS windows and the longest timer its profile declares (``[idle].timers``): when A's last
    call is more recent, the case waits out the rest, ending as soon as a call arrives. A periodic call with a
    period up to that span shows: the call after A's last one falls inside it."""
    seconds = request.config.getoption("pairproof_idle_seconds")
    span = max([seconds * IDLE_SPAN_WINDOWS, *agent_profile.idle_timers.values()])
    a = instances["A"]
    dana = Principal("D", "org3", "dana")
    fresh_before = len(_model_calls(target, dana))  # before it exists: its whole life is what follows
    fresh = dedicated(dana.name, dana.user, dana.org)
    refs = {"A": a, "fresh": fresh}
    pids = {name: target.identity(ref).host_pid for name, ref in refs.items()}
    for name, ref in refs.items():
        _watched_is_probed(sandbox_host, ref, pids[name], name)
    a_before = _model_calls(target, a.principal)
    a_last = max(_call_times(a_before), default=None)
    case_started = time.time()
    observed = _idle_observation(pids, seconds, tmp_path)
    idle_since = a_last if a_last is not None else case_started

    def calls_since() -> dict[str, list[dict]]:
        return {"A": _model_calls(target, a.principal)[len(a_before):],
                "fresh": _model_calls(target, fresh.principal)[fresh_before:]}

    def forwarded() -> dict[str, list[dict]]:
        return {"A": _forwarded_since(target, a, idle_since), "fresh": _forwarded_since(target, fresh, None)}

    while time.time() < idle_since + span and not any(calls_since().values()) and not any(forwarded().values()):
        time.sleep(0.5)  # the rest of the span A must be watched for; any call ends it (the finding is made)
    calls, through_broker = calls_since(), forwarded()
    watched = {"A: from its last model call (s)": round(time.time() - idle_since, 3),
               "A's last model call before the case, seconds before it": None if a_last is None
               else round(case_started - a_last, 3),
               "the span required (s)": span, "timers its profile declares": dict(agent_profile.idle_timers),
               "fresh: its whole life, from before it was provisioned"
               " (s)": round(time.time() - case_started, 3)}
    outside = {}
    for name, what in observed.items():
        _attach_observation(name, seconds, what)
        broker = _to_endpoint(what[0].seen, target.broker_endpoint(refs[name]))
        attach(f"{name}: SYNs to its own broker ({target.broker_endpoint(refs[name])}) in the window",
               broker)
        outside[name] = [frame for frame in what[0].seen if frame not in broker]
    attach("model calls the provider recorded: A's since its last call before the case, the fresh instance's "
           "over its whole life", {"watched": watched, "calls": {n: [{k: r.get(k) for k in ("seq", "at", "purpose",
                                                                                            "request_id")}
                                                                     for r in rs] for n, rs in calls.items()}})
    assert outside == {"A": [], "fresh": []}
    assert {name: _moved(before, after) for name, (_, before, after) in observed.items()} == {"A": {}, "fresh": {}}
    assert {k: v for k, v in observed["fresh"][2].items() if v} == {}
    attach("what each broker forwarded for its agent, but an MCP session's housekeeping: A's since its last model "
           "call before the case, the fresh instance's over its whole life", through_broker)
    assert {n: len(rs) for n, rs in calls.items()} == {"A": 0, "fresh": 0}, \
        "an idle instance called the model through its broker"
    assert through_broker == {"A": [], "fresh": []}, "an idle instance's broker forwarded a request no turn asked for"


@pytest.mark.case("NT-5", "X", pair="B->outside")
def test_nt5_broken_own_lookups_are_seen(request, principals, target, lab, sandbox_host, tmp_path):
    """An agent with its own lookups on and egress open into the run's lab only (the reference agent with its
    catalog refresh every half window; hermes with its defaults, no managed layer: a tirith download and model
    metadata at start), observed by the same code over the same window as the refusal: the lab's resolver
    records its lookups, and the refusal's checks fail on it. Its namespace's counters over its life count the
    datagrams (a lookup at start shows there), and every lookup the resolver saw inside the window is in the
    window's capture and moves the counters over the window (the refresh puts one there, whatever its phase:
    its period is half the window, which scales with --idle-seconds)."""
    seconds = request.config.getoption("pairproof_idle_seconds")
    started = time.time()
    with target.broken_open_egress(principal=principals["B"], lab=lab, catalog_refresh=seconds / 2) as leaky:
        # The window opens once the agent runs (its first lookup has arrived): a loaded machine is slow to
        # start it, and a window that closed before the agent started would show nothing of a refresh.
        until(lambda: [r for r in lab.records(started) if r["kind"] == "dns"], "the agent's first lookup after its start",
              AGENT_START_DEADLINE)
        pid = target.identity(leaky).host_pid
        _watched_is_probed(sandbox_host, leaky, pid, "the leaky instance")
        observed = _idle_observation({"refreshing": pid}, seconds, tmp_path)
    _attach_observation("agent with its lookups on", seconds, observed["refreshing"])
    cap, before, after = observed["refreshing"]
    lookups = [r for r in lab.records(started) if r["kind"] == "dns"]
    in_window = [r for r in lookups if cap.started_at <= r["at"] <= cap.stopped_at]
    attach("the lab's resolver: the agent's lookups", {"names": sorted({r.get("name") for r in lookups}),
                                                      "inside the window": len(in_window)})
    sent = lambda counters: counters.get("Udp.OutDatagrams", 0) + counters.get("Udp6OutDatagrams", 0)  # noqa: E731
    assert lookups
    assert sent(after) > 0, after  # the refusal's check of a fresh instance's whole life fails on it
    if in_window:
        assert [s for s in cap.seen if s["kind"] == "udp" and s["dport"] == 53] != []
        assert sent(_moved(before, after)) > 0
    if CATALOG_HOST in {r.get("name") for r in lookups}:  # the reference agent's refresh: periodic
        assert CATALOG_HOST in {r.get("name") for r in in_window}, in_window
