"""``pairproof check-driver``: a conformance run for a driver, in seconds, not the suite.

It builds the driver as a qualification would (``TargetOptions``, a run of its own), checks the core with one
small real round trip per method, then exercises each facet the driver claims (``contract.FACETS``: the
driver has every method of it) the same way, and says facet by facet: *works*, *missing* (with the cases
that will be not covered for it) or *fails* (with the error). It proves the driver is wired, not that the
platform is isolated: that is what ``pairproof qualify`` judges.

Each step is a real call whose result is checked against the host where the host can see it: ``identity``
must agree with ``/proc`` for its ``host_pid`` and with what ``exec`` sees inside; a planted token must come
back through ``read_back``; a request id given to a turn must appear in the platform's own record; a sandbox
a broken arrangement started must be gone when the arrangement is left.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from acceptance import catalogue
from acceptance.contract import CORE, FACETS, LOCATIONS, Artifacts, Identity, InstanceRef, Principal, core_missing, facets_of
from acceptance.harness.probes import PROOF_NAMESPACES

OWNER = Principal("K", "org3", "kit")
OTHER = Principal("L", "org3", "lou")
GONE_DEADLINE = 10.0


class CheckFailed(Exception):
    """A round trip did not give what the contract says."""


@dataclass
class Result:
    name: str
    state: str  # works | missing | fails | not checked
    detail: str = ""
    seconds: float = 0.0
    steps: list[str] = field(default_factory=list)


METER_SETTLE = 10.0


def _owner_usage(usage: Mapping) -> tuple[int, int, int]:
    """(calls, input tokens, output tokens) the ledger holds for OWNER, all purposes."""
    _check(isinstance(usage, Mapping), f"ledger_usage returned {type(usage).__name__}, not a mapping")
    rows = [v for k, v in usage.items() if tuple(k[:2]) == (OWNER.org, OWNER.user)]
    return (sum(int(v["calls"]) for v in rows), sum(int(v["input_tokens"]) for v in rows),
            sum(int(v["output_tokens"]) for v in rows))


def _counts(usage: Mapping) -> dict:
    return {k: v["calls"] for k, v in usage.items()}


def _check(condition: object, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def _until_gone(pid: int, what: str) -> None:
    end = time.monotonic() + GONE_DEADLINE
    while _alive(pid):
        if time.monotonic() > end:
            raise CheckFailed(f"{what}: its sandbox process {pid} still runs {GONE_DEADLINE:.0f} s later")
        time.sleep(0.02)


def _identity_agrees(target, ref: InstanceRef) -> Identity:
    """``identity`` against the host's /proc for its host_pid, and against what ``exec`` sees inside (for the
    namespaces the suite's proofs rest on)."""
    ident = target.identity(ref)
    _check(isinstance(ident, Identity), f"identity returned {type(ident).__name__}, not contract.Identity")
    status = Path(f"/proc/{ident.host_pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    host_uid = int(fields["Uid"].split()[0])
    _check(host_uid == ident.uid, f"identity says uid {ident.uid}, /proc/{ident.host_pid}/status says {host_uid}")
    _check(ident.namespaces, "identity names no namespaces")
    # The namespaces a probe's proof is checked against (probe.PROOF_NAMESPACES): those exec must share.
    names = [ns for ns in PROOF_NAMESPACES if ns in ident.namespaces]
    _check(names == list(PROOF_NAMESPACES), f"identity does not name the {', '.join(PROOF_NAMESPACES)} namespaces "
                                            f"(it names {', '.join(sorted(ident.namespaces))})")
    for ns in names:
        on_host = os.readlink(f"/proc/{ident.host_pid}/ns/{ns}")
        _check(on_host == ident.namespaces[ns], f"identity says {ns} namespace {ident.namespaces[ns]}, /proc/"
                                                f"{ident.host_pid}/ns/{ns} is {on_host}")
    inside = target.exec(ref, ["readlink", *(f"/proc/self/ns/{ns}" for ns in names)], timeout=30)
    seen = inside.stdout.decode(errors="replace").split()
    _check(inside.rc == 0 and seen == [ident.namespaces[ns] for ns in names],
           f"exec does not run in the namespaces identity names: inside {seen} (rc {inside.rc}), identity "
           f"{[ident.namespaces[ns] for ns in names]}")
    return ident


class Checker:
    def __init__(self, target, say: Callable[[Result], None]) -> None:
        self.target, self.say = target, say
        self.token = f"ppcheck{secrets.token_hex(6)}"
        self.ref: InstanceRef | None = None
        self.results: list[Result] = []

    def step(self, name: str, body: Callable[[], str]) -> Result:
        start = time.monotonic()
        try:
            detail, state = body(), "works"
        except Exception as exc:  # any failure of a round trip is the driver's, reported with its error
            where = traceback.extract_tb(exc.__traceback__)[-1]
            detail, state = f"{type(exc).__name__}: {exc} (at {Path(where.filename).name}:{where.lineno})", "fails"
        result = Result(name, state, detail, time.monotonic() - start)
        self.results.append(result)
        self.say(result)
        return result

    # -- the core ------------------------------------------------------------------------------------

    def core(self) -> str:
        t = self.target
        _check(isinstance(t.name, str) and t.name, "name is not a non-empty string")
        self.ref = ref = t.provision(OWNER)
        _check(isinstance(ref, InstanceRef) and ref.principal == OWNER, f"provision returned {ref!r}")
        out = t.exec(ref, ["id"], timeout=30)
        _check(out.rc == 0 and b"uid=" in out.stdout, f"exec id: rc {out.rc}, {out.stdout[:80]!r} {out.stderr[:80]!r}")
        ident = _identity_agrees(t, ref)
        reply = t.turn(ref, "hello")
        _check(isinstance(reply, str), f"turn returned {type(reply).__name__}, not the reply text")
        for location in LOCATIONS:
            token = f"{self.token}{location}"
            t.plant(ref, location, token)
            back = t.read_back(ref, location)
            _check(token in back, f"plant then read_back of {location}: the token did not come back ({back[:120]!r})")
        arts = t.artifacts()
        _check(isinstance(arts, Artifacts) and Path(arts.state_dir).exists(),
               f"artifacts: {arts!r} (its state_dir must exist)")
        held = t.platform_secrets()
        _check(isinstance(held, Mapping) and held and all(isinstance(v, str) and v for v in held.values()),
               "platform_secrets is not a non-empty mapping of names to secret strings")
        throwaway = t.provision(OTHER)
        pid = t.identity(throwaway).host_pid
        t.destroy(throwaway)
        _until_gone(pid, "destroy")
        return (f"provision, exec id, identity = /proc/{ident.host_pid} and exec's namespaces, turn, plant + "
                f"read_back x{len(LOCATIONS)}, artifacts, platform_secrets ({len(held)}), destroy")

    def close(self) -> str:
        """``close`` tears down everything: the checker's own instance's sandbox is gone after it."""
        pid = None
        if self.ref is not None:
            try:
                pid = self.target.identity(self.ref).host_pid
            except Exception:  # noqa: S110 (an instance a failed step left without a sandbox has no pid to watch)
                pid = None
        self.target.close()
        if pid is not None:
            _until_gone(pid, "close")
            return f"everything torn down (the instance's sandbox {pid} is gone)"
        return "closed"

    # -- the facets ----------------------------------------------------------------------------------

    def lifecycle(self) -> str:
        t, ref = self.target, self.ref
        t.sleep(ref)
        _check(not t.running(OWNER), "running() is still true after sleep")
        ref = self.ref = t.wake(ref)
        _check(t.running(OWNER), "running() is false after wake")
        pid = t.identity(ref).host_pid
        t.freeze(ref)
        ref = self.ref = t.wake(ref)
        _check(t.identity(ref).host_pid == pid, "wake after freeze started a new sandbox: freeze did not keep it")
        again = t.recreate(ref)
        _check(again.generation > ref.generation, f"recreate kept generation {ref.generation}")
        self.ref = again
        _check(self.token + "memory" in t.read_back(again, "memory"), "recreate lost the volume (memory token gone)")
        return "sleep, running, wake, freeze and thaw (same sandbox), recreate (next generation, volume kept)"

    def credentials(self) -> str:
        t, ref = self.target, self.ref
        before = dict(t.capabilities(ref))
        _check(before and all(isinstance(v, str) for v in before.values()), f"capabilities: {before!r}")
        _check(dict(t.capabilities(ref)) == before, "capabilities gave other values when asked again with nothing "
                                                    "rotated: it does not report what the platform holds")
        t.rotate(ref)
        after = dict(t.capabilities(ref))
        _check(after != before, "rotate changed none of the capabilities")
        detail = f"capabilities ({', '.join(sorted(before))}), rotate (they changed"
        if "model" in facets_of(t) and before.get("model") and after.get("model"):
            # The platform, not the driver's word, says whether it rotated: the old model capability is refused.
            call = {"model": "any", "messages": [{"role": "user", "content": "ping"}], "metadata": {"purpose": "turn"}}
            old, new = t.model_call(before["model"], call)[0], t.model_call(after["model"], call)[0]
            _check(old != 200 and new == 200, f"after rotate the proxy answers the old model capability {old} and "
                                              f"the new one {new}: the platform did not rotate what it honours")
            detail += "; the proxy refuses the old model capability and takes the new one"
        return detail + "); revoke not exercised (irreversible)"

    def broker(self) -> str:
        t, ref = self.target, self.ref
        endpoint = t.broker_endpoint(ref)
        _check(isinstance(endpoint, str) and "://" in endpoint, f"broker_endpoint: {endpoint!r} is not a URL")
        refusals = t.broker_refusals(ref)
        _check(isinstance(refusals, list), f"broker_refusals returned {type(refusals).__name__}")
        status, body = t.runctl(ref, "GET", "/v1/runs/run_doesnotexist")
        _check(isinstance(status, int) and isinstance(body, dict), f"runctl returned ({status!r}, {body!r})")
        return f"broker_endpoint {endpoint}, broker_refusals ({len(refusals)}), runctl (status {status})"

    def model(self) -> str:
        t, ref = self.target, self.ref
        word = f"pong{secrets.token_hex(4)}"
        before = len(t.provider_records())
        metered_before = _owner_usage(t.ledger_usage())
        t.script_model(OWNER, [{"reply": word}])
        reply = t.turn(ref, "ping")
        _check(word in reply, f"script_model then turn: the scripted reply did not come back ({reply[:120]!r})")
        _check(len(t.provider_records()) > before, "provider_records did not grow with the turn's model call")

        def compared() -> tuple[tuple[int, ...], tuple[int, ...]]:
            billed = [r for r in t.provider_records()[before:]
                      if r.get("user") == f"{OWNER.org}:{OWNER.user}" and r.get("status") == 200]
            _check(all(isinstance(r.get("usage"), Mapping) for r in billed),
                   "provider_records: an answered call's record has no usage ({'input': n, 'output': n})")
            expected = (len(billed), sum(int(r["usage"].get("input", 0)) for r in billed),
                        sum(int(r["usage"].get("output", 0)) for r in billed))
            return tuple(a - b for a, b in zip(_owner_usage(t.ledger_usage()), metered_before)), expected

        # The provider records a call when it arrives, the meter when it is answered (background calls
        # follow the turn): compared once both settle, or as they stand after METER_SETTLE seconds.
        end = time.monotonic() + METER_SETTLE
        added, expected = compared()
        while added != expected and time.monotonic() < end:
            time.sleep(0.1)
            added, expected = compared()
        _check(added == expected and expected[1] + expected[2] > 0,
               f"ledger_usage: the turn added (calls, input, output tokens) {added} to {OWNER.org}/{OWNER.user}'s "
               f"meter; the provider billed {expected}")
        t.set_spend_cap(OWNER, 100.0)
        detail = f"script_model + turn, provider_records, ledger_usage (metered {added} as billed), set_spend_cap"
        if "credentials" in facets_of(t):
            status, _ = t.model_call(t.capabilities(ref)["model"], {"model": "any", "messages": [
                {"role": "user", "content": "ping"}], "metadata": {"purpose": "turn"}})
            _check(status == 200, f"model_call with the instance's own model capability: status {status}")
            detail += f", model_call with the instance's capability (status {status})"
        return detail

    def snapshots(self) -> str:
        t, ref = self.target, self.ref
        snap = t.snapshot(ref)
        _check(snap in t.snapshots(OWNER), f"snapshot {snap} is not in snapshots({OWNER.name})")
        # Written after the snapshot: a restore brings back the volume as it was, so this goes (a restore that
        # restores nothing keeps it).
        later = f"{self.token}later"
        t.plant(ref, "memory", later)
        _check(later in t.read_back(ref, "memory"), "plant after the snapshot: the token did not come back")
        self.ref = restored = t.restore(snap, into=ref)
        _check(isinstance(restored, InstanceRef), f"restore returned {restored!r}")
        memory = t.read_back(restored, "memory")
        _check(self.token + "memory" in memory, "the restored instance lost its memory token")
        _check(later not in memory, "restore left what was written after the snapshot: it restored nothing")
        _check(len(t.snapshot_bytes(snap)) > 0, "snapshot_bytes is empty")
        return "snapshot, snapshots, restore (the volume as snapshotted: later memory gone), snapshot_bytes"

    def recovery(self) -> str:
        t, ref = self.target, self.ref
        _check(isinstance(t.journal(ref), list), "journal is not a list")
        if "lifecycle" not in facets_of(t):
            return "journal; recover not exercised (it follows a crash, which is the lifecycle facet)"
        pid = t.identity(ref).host_pid
        t.crash(ref)
        _until_gone(pid, "crash")
        after = self.ref = t.recover(ref)
        _check(after.generation > ref.generation, "recover did not admit a successor of the next generation")
        out = t.exec(after, ["true"], timeout=30)
        _check(out.rc == 0, f"exec in the recovered instance: rc {out.rc}")
        return "journal, crash, recover (next generation, exec works)"

    def tools(self) -> str:
        t, ref = self.target, self.ref
        intended = t.intended_tools()
        _check(isinstance(intended, Mapping) and intended, "intended_tools is empty")
        surface = t.tool_surface(ref)
        _check(isinstance(surface, Mapping), f"tool_surface returned {type(surface).__name__}")
        config = t.managed_config()
        _check(isinstance(config, bytes) and config, "managed_config is not non-empty bytes")
        t.configure(ref, {})
        served = [n for n, route in intended.items() if route.startswith("mcp:")]
        if served:
            t.pin_tool(ref, served[0])
        other = t.start_with_managed_config(OTHER, config)
        try:
            out = t.exec(other, ["true"], timeout=30)
            _check(out.rc == 0, f"exec in an instance started with the managed config: rc {out.rc}")
        finally:
            t.destroy(other)
        return (f"intended_tools ({len(intended)}), tool_surface ({len(surface)}), managed_config, configure, "
                f"pin_tool{' ' + served[0] if served else ' (no mcp tool to pin)'}, start_with_managed_config")

    def product(self) -> str:
        t = self.target
        routes = t.product_routes()
        _check(routes and all(len(r) == 3 for r in routes), f"product_routes: {routes!r}"[:300])
        plain = [path for method, path, _ in routes if method == "GET" and "{" not in path]
        _check(plain, "product_routes lists no GET route without a parameter to call")
        status, _ = t.person(OWNER).request("GET", plain[0])
        _check(isinstance(status, int), f"person().request returned status {status!r}")
        op_status, _ = t.operator("checker").request("GET", plain[0])
        _check(isinstance(op_status, int), f"operator().request returned status {op_status!r}")
        return f"product_routes ({len(routes)}), person and operator GET {plain[0]} ({status}, {op_status})"

    def capacity(self) -> str:
        t = self.target
        fleet_need = t.fleet_need()
        for key in ("memory_mb", "disk_mb", "host_memory_mb", "host_disk_mb"):
            _check(isinstance(fleet_need.get(key), int), f"fleet_need has no integer {key}")
        budget_keys = ("shared_memory_mb", "memory_headroom_mb", "idle_instance_mb", "active_instance_mb",
                       "broker_mb", "volume_mb", "disk_headroom_mb")
        fleet_keys = ("resident", "active", "stored_users", "snapshots_mb")
        budget = {k: fleet_need[k] for k in budget_keys}
        fleet = {k: fleet_need[k] for k in fleet_keys}
        need = t.capacity_need(budget, fleet)
        _check((need["memory_mb"], need["disk_mb"]) == (fleet_need["memory_mb"], fleet_need["disk_mb"]),
               f"capacity_need of the current fleet {dict(need)} disagrees with fleet_need {dict(fleet_need)}")
        ok, why = t.capacity_admit(budget, fleet, {"memory_mb": 1, "disk_mb": 1})
        _check(not ok and "memory" in why, f"capacity_admit on a 1 MB host: ({ok}, {why!r})")
        with t.host_limits(memory_mb=fleet_need["host_memory_mb"]):
            pass
        return "fleet_need, capacity_need (agrees with fleet_need), capacity_admit (1 MB host refused), host_limits"

    def platform_log(self) -> str:
        t, ref = self.target, self.ref
        nonce = f"pp-{secrets.token_hex(8)}"
        t.turn(ref, "hello again", request_id=nonce)
        record = t.platform_log()
        if nonce not in record and "model" in facets_of(t):
            record += "\n".join(map(str, t.provider_records()))
        _check(nonce in record, f"a turn's request id {nonce} is not in the platform's record ({len(record)} "
                                "characters): platform-side probes could not prove they ran")
        return "platform_log names a turn's request id"

    def broken(self, facet: str, lab_dir: Callable[[], object]) -> str:
        t, ref = self.target, self.ref
        args: dict[str, object] = {
            "broken_shared_volume": {"owner": ref, "intruder": OTHER},
            "broken_shared_tmp": {"owner": OWNER, "intruder": OTHER},
            "broken_secret_in_env": {"principal": OTHER},
            "broken_shared_pid_ns": {"intruder": OTHER},
            "broken_nested_userns": {"intruder": OTHER},
            "broken_same_uid": {"owner": ref, "intruder": OTHER},
            "broken_host_account_uid": {"intruder": OTHER},
            "broken_open_egress": {"principal": OTHER},
            "broken_unmetered_model_call": {"principal": OWNER},
            "broken_lossy_product_link": {"ref": ref},
            "broken_unreachable_product": {"ref": ref},
        }.get(facet, {})
        if facet == "broken_open_egress":
            args["lab"] = lab_dir()
        arrangement = getattr(t, facet)(**args)
        _check(isinstance(arrangement, AbstractContextManager), f"{facet}(...) is not a context manager")
        pids: list[int] = []
        claimed = facets_of(t)
        if facet == "broken_unmetered_model_call" and "model" in claimed:
            calls, metered = len(t.provider_records()), _counts(t.ledger_usage())
        if facet == "broken_capacity_without_brokers" and "capacity" in claimed:
            fleet_need = t.fleet_need()
            budget = {k: fleet_need[k] for k in ("shared_memory_mb", "memory_headroom_mb", "idle_instance_mb",
                                                "active_instance_mb", "broker_mb", "volume_mb", "disk_headroom_mb")}
            fleet = {"resident": 2, "active": 0, "stored_users": 2, "snapshots_mb": 0}
            outside = t.capacity_need(budget, fleet)["memory_mb"]
        with arrangement as given:
            refs = [r for r in (given if isinstance(given, tuple) else (given,)) if isinstance(r, InstanceRef)]
            if facet == "broken_unaudited_operator_route":
                _check(isinstance(given, str) and given.startswith("/"), f"it yielded {given!r}, not a route path")
            if facet == "broken_unmetered_model_call" and "model" in claimed:
                _check(len(t.provider_records()) > calls and _counts(t.ledger_usage()) == metered,
                       "no call reached the provider past the meter (the provider's record did not grow, or the "
                       "meter counted it)")
            if facet == "broken_capacity_without_brokers" and "capacity" in claimed:
                inside = t.capacity_need(budget, fleet)["memory_mb"]
                _check(inside < outside, f"two resident instances need {inside} MB inside and {outside} MB "
                                         "outside: the arithmetic still budgets their brokers")
            for r in refs:
                out = t.exec(r, ["true"], timeout=30)
                _check(out.rc == 0, f"exec in the arrangement's sandbox {r.key}: rc {out.rc}")
                pids.append(t.identity(r).host_pid)
        for pid in pids:
            _until_gone(pid, f"leaving {facet}")
        out = t.exec(self.ref, ["true"], timeout=30)
        _check(out.rc == 0, f"after leaving {facet}, exec in the checker's own instance: rc {out.rc}")
        seen = {"broken_unmetered_model_call": ("model", "a call reached the provider unmetered"),
                "broken_capacity_without_brokers": ("capacity", "the arithmetic dropped the brokers")}.get(facet)
        return (f"entered and left; {len(pids)} sandbox{'es' if len(pids) != 1 else ''} it started gone"
                if pids else f"entered and left (yielded {type(given).__name__})"
                + (f"; inside, {seen[1]}" if seen and seen[0] in claimed else ""))


@contextmanager
def _lab() -> Iterator[Callable[[], object]]:
    """The lab network, started only if a check needs it (``broken_open_egress``), torn down after."""
    made: list[tuple[object, Path]] = []

    def get() -> object:
        if not made:
            from acceptance.harness.lab import Lab

            workdir = Path(tempfile.mkdtemp(prefix="pairproof-lab-check-"))
            made.append((Lab(workdir), workdir))
        return made[0][0]
    try:
        yield get
    finally:
        for lab, workdir in made:
            lab.close()
            shutil.rmtree(workdir, ignore_errors=True)


def cases_needing(facet: str) -> list[str]:
    return [c.id for c in catalogue.load().values() if facet in c.facets]


def run(target, say: Callable[[Result], None]) -> list[Result]:
    """Check ``target`` (a built driver) facet by facet; closes it. One ``Result`` per line, core first."""
    checker = Checker(target, say)
    results = checker.results
    missing = core_missing(target)
    if missing:
        result = Result("core", "missing", f"(no {', '.join(missing)}): every driver implements the core "
                                           f"({', '.join(CORE)})")
        results.append(result)
        say(result)
    claimed = facets_of(target)
    try:
        core_ok = not missing and checker.step("core", checker.core).state == "works"
        for name, facet in FACETS.items():
            if name not in claimed:
                has = [m for m in facet.methods if hasattr(target, m)]
                lacking = [m for m in facet.methods if m not in has]
                needing = cases_needing(name)
                detail = (f"(no {', '.join(lacking)}{'; has ' + ', '.join(has) + ' alone' if has else ''}): "
                          + (f"{', '.join(needing)} will be not covered" if needing else "no case needs it"))
                result = Result(name, "missing", detail)
                results.append(result)
                say(result)
            elif not core_ok:
                result = Result(name, "not checked", "the core does not work")
                results.append(result)
                say(result)
        if core_ok:
            with _lab() as lab:
                for name in claimed:
                    if name.startswith("broken_"):
                        checker.step(name, lambda n=name: checker.broken(n, lab))
                    else:
                        checker.step(name, getattr(checker, name))
    finally:
        checker.step("close", checker.close)
    return results


def facets_markdown() -> str:
    """The facets table of docs/writing-a-driver.md, from the registry and the catalogue (a test keeps the
    document equal to it): facet, its methods, what it lets the suite observe, the cases that need it."""
    rows = ["| facet | methods | what the suite observes through it | cases that need it |",
            "|---|---|---|---|"]
    for name, facet in FACETS.items():
        methods = ", ".join(f"`{m}`" for m in facet.methods)
        rows.append(f"| `{name}` | {methods} | {facet.description} | {', '.join(cases_needing(name)) or '-'} |")
    return "\n".join(rows)
