"""Fixtures of the suite: the target, the three principals, their instances with canaries planted,
and probes that run testinfra modules inside a sandbox with proof of execution.

Everything a case needs arrives through these; every instance and broken arrangement is torn down by
the fixture that made it, even when the test fails or the run is interrupted (pytest runs fixture
finalizers on KeyboardInterrupt), and the target's ``close`` sweeps whatever remains of the run.
"""

from __future__ import annotations

import base64
import hashlib
import inspect
import json
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import allure
import pytest

from acceptance import catalogue
from acceptance.contract import (
    FACETS,
    LOCATIONS,
    InstanceRef,
    ModelPath,
    PlatformLog,
    Principal,
    Target,
    TargetView,
    UndeclaredFacetError,
)
from acceptance.errors import ProofError, SetupError, TargetError
from acceptance.harness import observers as observe
from acceptance.harness import probes as probe
from acceptance.harness import restsweep
from acceptance.harness.evidence import attach
from acceptance.harness.keys import EVIDENCE_KEY, LACKS_KEY, PLATFORM_RUN_KEY, PROBE_LOG, PROOF_KEY, SESSION, TARGET_VIEW
from acceptance.targets import TargetOptions, load
from acceptance.targets.profiles import AgentProfile
from acceptance.targets.profiles import load as load_profile
from canaries import Mint, detect

PRINCIPALS = {
    "A": Principal("A", "org1", "alice"),
    "B": Principal("B", "org1", "bob"),
    "C": Principal("C", "org2", "carol"),
}
LOCATION_CODES = {"memory": "mem", "transcript": "tr", "task": "task", "volume": "vol"}
PLATFORM_SECRETS = {"PAIRPROOF_PROVIDER_KEY": "key", "PAIRPROOF_PRODUCT_GRANT": "grant"}
# The whole visible filesystem, less the host's read-only system folders (/usr is 5 GB of the host's own
# files: a canary cannot be there unless the host wrote it) and /sys; /proc is read per process.
VISIBLE_ROOTS = ["/"]
VISIBLE_SKIP = ["/usr", "/sys"]


@dataclass(frozen=True)
class Run:
    id: str
    nonce: str
    worker: str
    mint: Mint


@dataclass(frozen=True)
class Planted:
    """The canaries planted for the run: ``tokens[principal][location]``, and the platform's secrets."""

    tokens: Mapping[str, Mapping[str, str]]
    platform: Mapping[str, str]

    def of(self, principal: str) -> set[str]:
        return set(self.tokens[principal].values())


@pytest.fixture(scope="session")
def pairproof_run(request: pytest.FixtureRequest) -> Run:
    session = request.config.stash[SESSION]
    worker = getattr(request.config, "workerinput", {}).get("workerid", "main")
    # Canaries are unique per run *and* worker: two xdist workers are two runs of the platform.
    worker_run = session.run if worker == "main" else hashlib.sha256(f"{session.run}/{worker}".encode()).hexdigest()[:8]
    # The canaries' own run id (the first group of every token: canaries.token), from the session's secret: never
    # the run id, which an instance can read (its volume's host path names it). Every scan of this process looks
    # for it.
    canaries = canary_run(session.canaries_key, worker)
    detect.use_run(canaries)
    session.canary_runs.add(canaries)
    if worker != "main":
        request.config.workeroutput["pairproof_canary_run"] = canaries
    return Run(id=worker_run, nonce=secrets.token_hex(8), worker=worker, mint=Mint(canaries))


def canary_run(key: str, worker: str) -> str:
    """The run id of a worker's canaries: 8 hex digits of a keyed hash, unrelated to anything an instance sees."""
    return hashlib.sha256(f"{key}/{worker}/canaries".encode()).hexdigest()[:8]


@pytest.fixture(scope="session")
def platform_secrets(pairproof_run: Run) -> dict[str, str]:
    return {env: pairproof_run.mint.mint("plat", code).token for env, code in PLATFORM_SECRETS.items()}


@pytest.fixture(scope="session")
def agent_profile(request: pytest.FixtureRequest) -> AgentProfile:
    """The agent the target runs (``--profile``, else the target's own): cases name tools through it
    (``agent_profile.tool(...)``)."""
    from acceptance.targets import default_profile

    given = request.config.getoption("pairproof_profile")
    return load_profile(given or default_profile(request.config.getoption("pairproof_target") or "reference"))


@pytest.fixture(scope="session")
def host_baseline(request: pytest.FixtureRequest) -> restsweep.Baseline:
    """Every file under the host's writable roots, stamped before the platform starts (``restsweep.take``)."""
    return restsweep.take(request.config.getoption("pairproof_state_dir"),
                          request.config.getoption("pairproof_target") or "reference")


@pytest.fixture
def host_sweep(request: pytest.FixtureRequest, host_baseline: restsweep.Baseline, pairproof_target: Target,
               probe_log: probe.ProbeLog, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], restsweep.Swept]:
    """``host_sweep(what)``: everything created or changed at rest on the host since the session started,
    scanned (``restsweep.sweep``), the instances' volumes and the harness's own folders excluded with why."""
    def run(what: str) -> restsweep.Swept:
        art = pairproof_target.artifacts()
        excluded = {str(path): f"instance {key}'s own volume: its private state, judged by the FS cases"
                    for key, path in art.volumes.items()}
        state_root = Path(request.config.getoption("pairproof_state_dir")).resolve()
        if art.state_dir.parent.parent == state_root:  # <state root>/runs/<run>: a run's siblings are other platforms
            for sibling in art.state_dir.parent.iterdir():
                if sibling != art.state_dir:
                    excluded[str(sibling)] = "another platform run's state (another worker or session): its own sweep's"
        basetemp = tmp_path_factory.getbasetemp().parent  # pytest-of-<user>: every session's
        excluded[str(basetemp)] = "pytest's temporary folders: the harness's own files (and other pytest sessions')"
        for option in ("allure_report_dir", "pairproof_verdict"):
            given = request.config.getoption(option, None)
            if given:
                folder = Path(given).resolve().parent if option == "pairproof_verdict" else Path(given).resolve()
                excluded[str(folder)] = "the run's reports: the harness writes the evidence, canaries included, there"
        stores = {str(path): why for path, why in getattr(art, "stores", {}).items()}
        return restsweep.sweep(host_baseline, state_dir=art.state_dir, excluded=excluded, stores=stores, what=what,
                               log=probe_log)

    return run


@pytest.fixture(scope="session")
def pairproof_target(request: pytest.FixtureRequest, pairproof_run: Run, platform_secrets: dict[str, str],
                     agent_profile: AgentProfile, host_baseline: restsweep.Baseline) -> Iterator[Target]:
    """The driver itself, whole: for the harness (provisioning, planting, the host cross-check), which uses
    the core alone. A case's tests get ``target``, which shows them only what their case declared."""
    name = request.config.getoption("pairproof_target") or "reference"
    factory = load(name)
    options = TargetOptions(run=f"{pairproof_run.id}-{pairproof_run.worker}",
                            state_dir=Path(request.config.getoption("pairproof_state_dir")),
                            secrets=platform_secrets, profile=agent_profile)
    observe.watch_run_cgroup(options.run)  # sandboxes under a container engine's daemon are no descendants of ours
    try:
        t = factory(options)
    except Exception as exc:
        # No case can be judged on a target that cannot be built: the run stops as a usage error would, rather
        # than report every test broken for one cause (`pairproof qualify`: exit 2, the last reports intact).
        why = (f"target {name!r} could not be built ({type(exc).__name__}: {exc}"[:400]
               + f"); `pairproof check-driver {name}` shows what it lacks")
        workeroutput = getattr(request.config, "workeroutput", None)
        if workeroutput is None:
            pytest.exit(why, returncode=pytest.ExitCode.USAGE_ERROR)
        # On an xdist worker pytest.exit is the controller's INTERNALERROR: instead this worker's tests error at
        # once on this fixture's cached failure, and the controller ends the run as a usage error (session.py).
        workeroutput["pairproof_unbuildable"] = why
        raise SetupError(why) from exc
    try:
        yield t
    finally:
        t.close()


@pytest.fixture
def target(request: pytest.FixtureRequest, pairproof_target: Target, probe_log: probe.ProbeLog) -> Target:
    """The target as this test's case may use it: the core and the facets its catalogue entry declares
    (``contract.TargetView``); reaching any other facet leaves the test broken, naming the facet."""
    mark = request.node.get_closest_marker("case")
    case = catalogue.load().get(mark.args[0]) if mark is not None and mark.args else None
    if case is None:
        return pairproof_target  # not a case of the suite (the plugin refuses those at collection)
    view = TargetView(pairproof_target, case.id, case.facets, wrap=probe.proving_calls(probe_log))
    request.node.stash[TARGET_VIEW] = view
    return view  # type: ignore[return-value]


@pytest.fixture(scope="session")
def principals() -> Mapping[str, Principal]:
    return PRINCIPALS


@pytest.fixture(scope="session")
def instances(pairproof_target: Target) -> dict[str, InstanceRef]:
    """A, B and C's instances, awake; torn down with the target. Where the target has a model path, each of
    the three is given a spend cap the whole session cannot reach (``SESSION_SPEND_USD``): they run every
    case's turns, so under the platform's default cap a control late in the session could meet
    ``spend_exhausted`` (SN-3's did, on hermes) and a refusal could be explained by a spent allowance. The
    caps themselves are judged on users of their own (MD-3)."""
    made = {name: pairproof_target.provision(p) for name, p in PRINCIPALS.items()}
    if isinstance(pairproof_target, ModelPath):
        for principal in PRINCIPALS.values():
            pairproof_target.set_spend_cap(principal, SESSION_SPEND_USD)
    return made


SESSION_SPEND_USD = 100.0


@pytest.fixture(scope="session")
def planted(pairproof_target: Target, instances: dict[str, InstanceRef], pairproof_run: Run,
            platform_secrets: dict[str, str]) -> Planted:
    """A canary per principal and location, planted through the product's paths (agent turns). The principals'
    plants go side by side, one thread per instance (each instance's own turns in order): the instances share
    nothing, and an agent's turn is mostly waiting (hermes-agent takes seconds a turn)."""
    from concurrent.futures import ThreadPoolExecutor

    tokens = {name: {location: pairproof_run.mint.mint(name.lower(), LOCATION_CODES[location]).token
                     for location in LOCATIONS} for name in instances}

    def plant(name: str) -> None:
        for location in LOCATIONS:
            pairproof_target.plant(instances[name], location, tokens[name][location])

    with ThreadPoolExecutor(len(instances)) as pool:
        for done in [pool.submit(plant, name) for name in instances]:
            done.result()  # the first failure, as the plant that failed raised it
    return Planted(tokens=tokens, platform=platform_secrets)


@pytest.fixture
def dedicated(target: Target) -> Iterator[Callable[..., InstanceRef]]:
    """Provision instances for principals of their own (org3, unless ``org`` says) that this test alone uses,
    destroyed after it whatever happens: ``dedicated("T", "tess")``."""
    made: list[InstanceRef] = []

    def make(name: str, user: str, org: str = "org3", **options: object) -> InstanceRef:
        ref = target.provision(Principal(name, org, user), **options)
        made.append(ref)
        return ref

    yield make
    for ref in reversed(made):
        target.destroy(ref)


@pytest.fixture
def probe_log(pairproof_run: Run, request: pytest.FixtureRequest) -> probe.ProbeLog:
    log = probe.ProbeLog(nonce=pairproof_run.nonce)
    if {"target", "pairproof_target", "instances"} & set(request.fixturenames):
        log.platform_record = _platform_record(request.getfixturevalue("pairproof_target"))
    return log


def _platform_record(target: Target) -> Callable[[], str] | None:
    """What the platform itself recorded, read from the target: its log and the provider's record of every
    call (a target without them leaves ``confirm`` to the record the test hands in). The whole driver, not a
    case's view: the harness checks a proof against every record the platform keeps."""
    platform_log = target.platform_log if isinstance(target, PlatformLog) else None
    provider_records = target.provider_records if isinstance(target, ModelPath) else None
    if platform_log is None and provider_records is None:
        return None

    def read() -> str:
        parts = [platform_log()] if platform_log else []
        if provider_records:
            parts += [json.dumps(r, sort_keys=True) for r in provider_records()]
        return "\n".join(parts)
    return read


@pytest.fixture
def sandbox_host(target: Target, probe_log: probe.ProbeLog) -> Callable[[InstanceRef], object]:
    """``sandbox_host(ref)``: a testinfra Host whose commands run inside ``ref``'s sandbox."""
    return lambda ref: probe.host(target, ref, probe_log)


def _own_canaries(request: pytest.FixtureRequest, ref: InstanceRef) -> set[str]:
    """The canaries planted in ``ref`` itself (empty for an instance nothing is planted in): the prober's
    own, which a scan from ``ref`` must find in the same call (DESIGN §5 rule 5). Whether the test asked
    for ``planted`` does not matter: a session instance (A, B, C) is planted before it is scanned, so a scan
    of it always has canaries of its own to find."""
    name = ref.principal.name
    if PRINCIPALS.get(name) != ref.principal:
        return set()  # a dedicated or broken instance: nothing was planted in it
    instances = request.getfixturevalue("instances")
    if name not in instances or instances[name].key != ref.key:
        return set()
    return request.getfixturevalue("planted").of(name)


def visible_skip(profile: AgentProfile) -> list[str]:
    """What a whole-visible-filesystem scan leaves out: the system's read-only folders, and the agent's installed
    software its profile binds read-only under /opt (the same host folder in every sandbox, which no instance
    can write: like /usr, it cannot hold an instance's canary, and its large binaries would cut a scan short)."""
    return [*VISIBLE_SKIP, *profile.binds]


@pytest.fixture
def scan_visible(request: pytest.FixtureRequest, target: Target, agent_profile: AgentProfile
                 ) -> Callable[[object], set[str]]:
    """``scan_visible(host)``: every canary token visible anywhere in that sandbox's filesystem. The scan
    is judged complete first (``probe.scan``): a scan that did not find the prober's own canaries, cut a
    file short or failed on a path for any reason but a denial raises ProofError (the test is broken).

    A walk cannot find a file in a folder the sandbox may enter but not list (a platform folder of mode 0711
    bound in, whose files are 0644): the host, which may list it, names those files and the scan opens each
    by name (``observe.unlistable_files``)."""
    skip = visible_skip(agent_profile)

    def run(host) -> set[str]:
        ref = host.backend.ref
        own = _own_canaries(request, ref)
        ident = target.identity(ref)
        try:
            hidden = observe.unlistable_files(ident.host_pid, ident.uid, skip=[*skip, "/proc", "/dev"])
        except ValueError as exc:
            raise ProofError(f"the scan of {ref.key} could not be given every file hidden from listing: {exc}") from exc
        # The run's canaries of everyone else (A's, when B scans): one of them seen is a finding even if the scan
        # did not prove it looked everywhere (``probe.scan``).
        planted = request.getfixturevalue("planted")
        theirs = {t for name in planted.tokens for t in planted.of(name)} - own
        return probe.scan(host, VISIBLE_ROOTS + hidden, own=own, skip=skip, theirs=theirs).tokens
    return run


@pytest.fixture(autouse=True)
def _pairproof_case(request: pytest.FixtureRequest) -> Iterator[None]:
    """Label each case for Allure and record its probes as proof of execution."""
    mark = request.node.get_closest_marker("case")
    if mark is None:
        yield
        return
    case = catalogue.load().get(mark.args[0])
    role = mark.args[1] if len(mark.args) > 1 else ""
    pair = mark.kwargs.get("pair", "")
    run = request.config.stash[SESSION].run
    _allure_labels(case, role, pair, request.node.nodeid, run)
    log: probe.ProbeLog | None = None
    if "probe_log" in request.fixturenames:
        log = request.getfixturevalue("probe_log")
        request.node.stash[PROBE_LOG] = log
    # The whole driver is the harness's: a case's test, or a fixture not of the harness, that asks for it
    # would reach every facet past the case's view (broken, naming it, never a pass on a partial target).
    if case is not None:
        _no_whole_driver(request, case.id)
    # A case whose facet the target lacks is not covered: its tests do not run (never skipped-as-pass, never
    # broken: the verdict says "not covered: target lacks <facet>", and the gate fails it).
    if case is not None and case.facets:
        driver = request.getfixturevalue("pairproof_target")
        lacks = [f for f in case.facets if not isinstance(driver, FACETS[f].protocol)]
        if lacks:
            request.node.user_properties.append((LACKS_KEY, lacks))
            pytest.skip(f"not covered: target lacks {', '.join(lacks)}")
    # Which platform run this test judged: a refusal and its controls must have judged the same one.
    if {"target", "pairproof_target"} & set(request.fixturenames):
        request.node.user_properties.append((PLATFORM_RUN_KEY, request.getfixturevalue("pairproof_run").id))
    yield
    if log is not None:
        # Platform calls prove controls only: a refusal proves by its probes and the platform probes it confirms
        # (rule 2), never by an instance it provisioned or a turn it sent on the way.
        if role == "refusal":
            log.calls.clear()
        else:
            log.settle_calls()
        request.node.user_properties.append((PROOF_KEY, log.proofs()))
        probes = [{"kind": "probe", "instance": r.instance, "command": r.command[:160], "rc": r.rc}
                  for r in log.records if r.proof]
        request.node.user_properties.append((EVIDENCE_KEY, [*log.evidence, *probes]))



HARNESS_PACKAGE = __name__.rsplit(".", 1)[0] + "."  # acceptance.harness.  # the harness's own fixtures may hold the whole driver
CASES_PACKAGE = __name__.split(".", 1)[0] + ".cases."  # a case's fixtures may not


def _no_whole_driver(request: pytest.FixtureRequest, case: str) -> None:
    if "pairproof_target" in inspect.signature(request.function).parameters:
        raise UndeclaredFacetError(f"{case}: the test asks for pairproof_target, the whole driver; a case uses "
                                   "``target`` (its view: the core and its declared facets)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Mark the test's own body on its probe log: a platform call made there may prove it, one a fixture made
    for it may not (``probes.proving_calls``)."""
    log = item.stash.get(PROBE_LOG, None)
    if log is not None:
        log.in_call = True
    try:
        yield
    finally:
        if log is not None:
            log.in_call = False


@pytest.hookimpl(tryfirst=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef, request: pytest.FixtureRequest) -> None:
    """A fixture that is not the harness's own (a case module's, a conftest's) asking for the whole driver
    would hand a case every facet past its view: its tests are broken, naming it."""
    module = getattr(fixturedef.func, "__module__", "") or ""
    if "pairproof_target" in fixturedef.argnames and (not module.startswith(HARNESS_PACKAGE)
                                                      or module.startswith(CASES_PACKAGE)):
        raise UndeclaredFacetError(f"fixture {fixturedef.argname} ({module}) asks for pairproof_target, the whole "
                                   "driver; a case's fixtures use ``target`` (its view: the core and its declared facets)")


def _allure_labels(case: catalogue.Case | None, role: str, pair: str, nodeid: str, run: str) -> None:
    if case is None:
        return
    allure.dynamic.epic(case.boundary)
    allure.dynamic.feature(case.channel)
    allure.dynamic.story(case.id)
    allure.dynamic.severity(case.severity)
    allure.dynamic.label("pairproof_role", role)
    allure.dynamic.label("pairproof_nodeid", nodeid)
    allure.dynamic.label("pairproof_run", run)
    if pair:
        allure.dynamic.tag(pair)
    if role == "refusal":
        for control_role, what in case.controls.items():
            allure.dynamic.label("pairproof_control", f"{case.id}:{control_role} {what}")
        allure.dynamic.description(case.refusal)
    else:
        allure.dynamic.label("pairproof_supports", f"{case.id}:refusal")
        allure.dynamic.description(case.controls.get(role, ""))


INSIDE = Path(__file__).resolve().parents[1] / "cases" / "inside"


@pytest.fixture
def broker_call(target: Target, sandbox_host) -> Callable[..., dict]:
    """``broker_call(ref, method, path, body=None)``: one HTTP exchange with the instance's broker, made from
    inside the instance; ``broker_call(ref, raw=bytes)`` sends bytes as they are. Returns
    ``{"status", "body"}`` or ``{"error"}``."""
    client = (INSIDE / "broker_client.py").read_bytes()

    def call(ref: InstanceRef, method: str = "POST", path: str = "/mcp", body: object = None, *,
             raw: bytes | None = None) -> dict:
        host = sandbox_host(ref)
        base = target.broker_endpoint(ref)
        if raw is not None:
            hostname, port = base.split("//", 1)[1].split(":")
            args = ["raw", hostname, port, base64.b64encode(raw).decode()]
        else:
            args = [method, base + path] + ([body if isinstance(body, str) else json.dumps(body)] if body is not None else [])
        quoted = " ".join(host.backend.quote("%s", a) for a in args)
        out = host.backend.run_with_stdin(f"/usr/bin/python3 -I -S - {quoted}", stdin=client)
        answer = json.loads(out.stdout.strip().splitlines()[-1])
        if "error" in answer and "status" not in answer:
            # Nothing answered: a refusal that asserts "not 200" would pass on silence. The instance's own
            # broker not answering is the harness unable to ask, not the broker refusing.
            raise TargetError(f"the broker of {ref.key} did not answer at {base}: {answer['error']}")
        return answer
    return call


@pytest.fixture
def visible_bytes(sandbox_host, request: pytest.FixtureRequest, agent_profile: AgentProfile
                  ) -> Callable[..., bytes]:
    """``visible_bytes(ref, looking_for=())``: every file the sandbox can see (less /usr, /sys), with /proc
    environ and cmdline, carried out for a host-side search for known secrets; judged complete like a scan,
    except that one of ``looking_for`` carried out is a finding that stands whatever the dump missed."""
    def collect(ref: InstanceRef, looking_for: Iterable[str] = ()) -> bytes:
        return probe.dump(sandbox_host(ref), VISIBLE_ROOTS, own=_own_canaries(request, ref),
                          skip=visible_skip(agent_profile), theirs=looking_for)
    return collect


@pytest.fixture(scope="session")
def lab(request: pytest.FixtureRequest, pairproof_run: Run) -> Iterator[object]:
    """The run's lab network (sinks for the world), torn down with the session."""
    from acceptance.harness.lab import Lab

    workdir = Path(tempfile.mkdtemp(prefix=f"pairproof-lab-{pairproof_run.id}-"))
    the_lab = Lab(workdir)
    try:
        yield the_lab
    finally:
        the_lab.close()
        attach("lab sinks (whole run).pcap", the_lab.pcap_path)
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def refused_by_proxy(target, probe_log):
    """``refused_by_proxy(ref, capability, body)``: present a capability to the proxy and return
    (status, reason); the call carries a fresh request id, and the platform's log line of the proxy's
    decision on that very request is the probe's proof (none, and the probe is broken)."""
    def call(ref, capability: str, body: dict) -> tuple[int, str]:
        nonce = probe_log.platform_probe(ref, "model call with a replayed capability")
        status, answer = target.model_call(capability, body, request_id=nonce)
        reason = (answer.get("error") or {}).get("reason", "") if isinstance(answer, dict) else ""
        probe_log.confirm(nonce, target.platform_log())
        return status, reason
    return call
