"""``pairproof mutants``: prove the suite has teeth.

The unmodified control runs first, the whole suite on a throwaway copy of the packages, and must exit 0.
Then each mutant of the catalogue is applied to its own copy and the suite runs against it (every run in a
network namespace of its own, loopback only, so no mutant can reach beyond the machine): its expected
cases first (fast), then, if none of them failed, the whole suite. A mutant is *killed* when one of its
expected cases is reported **failed** (a finding, not merely broken); killed only by cases it did not
name, it is reported as such (the catalogue or the suite is wrong); otherwise it *survived*. Runs go in
parallel across cores. The kill matrix (mutant x case) is written to ``reports/`` as JSON and a table.

The control may instead be a qualification already made (``--control-results reports``, as CI does): taken
only when that run passes the release gate whole for the same target on this very source (every hash of its
verdict's ``judged``), since running the unmodified suite a second time would then only repeat it. The report
says where its control came from (``control.from``).

The report names what it judged, so ``pairproof gate`` can refuse a report for other source: the sha256 of
the runtime, of the suite (acceptance and canaries) and of the mutant catalogue as the control copied them
(``source``), whether it ran only part of the catalogue or another suite (``partial``, ``suite``), and
which mutants the catalogue held.

A target has a catalogue of its own (``catalogue.CATALOGUES``): ``reference`` the reference runtime's
(``mutants/catalogue.toml``), ``docker`` the Docker engine's run-configuration mistakes
(``mutants/docker.toml``, judged by the suite on ``--target docker``, of the image ``--image`` or the
reference agent image). The report names its ``target``, ``catalogue`` and ``image``; the gate judges it
against that target's catalogue and refuses a report that names another.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

# The digests a verdict names too (reports/identity.py): one definition of "this source".
from reports.identity import SUITE_PACKAGES, tree_digest

from .catalogue import PATH as CATALOGUE_PATH
from .catalogue import Mutant, apply, catalogue_path, copy_suite, display, load
from .errors import MutantError

SCHEMA = "pairproof.mutants/3"  # 3: the target, its catalogue and the image named


def source_digest(tree: Path | None = None, catalogue: Path = CATALOGUE_PATH) -> dict[str, str]:
    """The sha256 of the runtime, the suite and the mutant catalogue (``catalogue``, the target's): in
    ``tree`` (a copy made by ``copy_suite``), or where Python imports them from. The runner records it; the
    gate recomputes it."""
    def where(package: str) -> Path:
        return tree / package if tree is not None else Path(importlib.import_module(package).__file__).parent

    return {"runtime": tree_digest(where("runtime")),
            "suite": tree_digest(*(where(p) for p in SUITE_PACKAGES)),
            "mutant_catalogue": hashlib.sha256(catalogue.read_bytes()).hexdigest()}


@dataclass
class SuiteRun:
    exit: int
    seconds: float
    failed: list[str]
    statuses: dict[str, str]
    tail: str
    output: str = field(default="", repr=False)  # the whole of it: kept for a control that did not pass
    timed_out: bool = False  # stopped at SUITE_TIMEOUT: no verdict, judged an error, never a survivor


@dataclass
class Outcome:
    name: str
    expected: list[str]
    status: str = "survived"  # killed | killed_unexpected | survived | error
    phase: str = ""
    killed_by: list[str] = field(default_factory=list)
    seconds: float = 0.0
    detail: str = ""
    runs: list[SuiteRun] = field(default_factory=list)


class Interrupted(MutantError):
    """The runner was interrupted (SIGINT, SIGTERM): its runs were stopped, nothing new starts."""


_live: set[subprocess.Popen] = set()
_live_lock = threading.Lock()
_stopping = threading.Event()
STOP_GRACE = 60.0  # seconds a run has to tear its target down after SIGINT before it is killed
# Seconds one run of the suite may take (a whole-suite run takes 4 to 6 minutes here): a mutant that hangs a case
# is stopped there and reported as an error with the run's output, and the other mutants go on.
SUITE_TIMEOUT = float(os.environ.get("PAIRPROOF_MUTANT_TIMEOUT", "900"))


class TimedOut(Exception):
    """A contained run went past its timeout and was stopped; ``output`` is what it printed."""

    def __init__(self, output: str):
        super().__init__("timed out")
        self.output = output


def _run_contained(argv: list[str], *, cwd: Path, env: dict[str, str], timeout: float) -> tuple[int, str]:
    """Run one contained suite in a process group of its own, so that stopping it reaches every process of
    the run (unshare ignores SIGINT; the pytest inside it tears its target down on it). Past ``timeout`` the
    group is stopped as an interrupt stops it and ``TimedOut`` carries what it printed."""
    with _live_lock:
        if _stopping.is_set():
            raise Interrupted("interrupted: no new run starts")
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
        _live.add(proc)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # Stopped as an interrupt stops it, its output read meanwhile (a teardown that prints more than a pipe
        # holds would block on it, then be killed mid-teardown, leaving its targets behind).
        output = ""
        for sig in (signal.SIGINT, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                output, _ = proc.communicate(timeout=STOP_GRACE)
                break
            except subprocess.TimeoutExpired:
                continue  # (after SIGKILL: a descendant outside the group holds the pipe; what came is lost)
        if proc.returncode is None:
            try:
                proc.wait(STOP_GRACE)
            except subprocess.TimeoutExpired:
                pass
        raise TimedOut(output) from None
    except BaseException:
        _stop(proc)
        raise
    finally:
        with _live_lock:
            _live.discard(proc)
    if _stopping.is_set():
        raise Interrupted("interrupted while a run was going")
    return proc.returncode, output


def _stop(proc: subprocess.Popen) -> None:
    """SIGINT to the run's process group, then SIGKILL if it has not finished within STOP_GRACE."""
    try:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(STOP_GRACE)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def stop_all() -> None:
    """Stop every run in progress and let no new one start (the runner's answer to SIGINT and SIGTERM)."""
    _stopping.set()
    with _live_lock:
        live = list(_live)
    with ThreadPoolExecutor(max_workers=max(1, len(live))) as pool:
        list(pool.map(_stop, live))


@dataclass(frozen=True)
class Target:
    """What the suite runs against: a target name and, for docker, the image (empty: the driver's own)."""

    name: str = "reference"
    image: str = ""


# The host's shared folders a mutant's run gets fresh and private (see ``run_suite``).
PRIVATE_ROOTS = ("/var/tmp", "/dev/shm")


def run_suite(tree: Path, suite: Path | None, cases: list[str], state_dir: str, target: Target = Target()) -> SuiteRun:
    verdict = tree / f"verdict-{len(cases)}-{time.monotonic_ns()}.json"
    suite_dir = suite if suite is not None else tree / "acceptance" / "cases"
    started = time.monotonic()
    pytest = [sys.executable, "-m", "pytest", str(suite_dir), "--target", target.name, "--pairproof-verdict", str(verdict),
              "--pairproof-state-dir", state_dir, *(f"--case={c}" for c in cases), "-p", "no:cacheprovider", "-q"]
    # Each run lives in a network namespace of its own with loopback only: whatever a mutant does to the
    # network (a route out of a sandbox, say), there is nowhere out of this namespace to send it. The
    # platform's services are on loopback and the lab nests inside, so the suite runs unchanged. And in a mount
    # namespace of its own with fresh, private /var/tmp and /dev/shm (PRIVATE_ROOTS): what a mutant leaves in
    # the host's shared temporary folders (a broker's dump of what it refused, once) goes with the namespace,
    # and the run's host sweep still reads them. /tmp stays the host's: the mutant's tree lives there.
    mounts = " && ".join(f"mount -t tmpfs -o mode=1777,nosuid,nodev pairproof-mutant {root}" for root in PRIVATE_ROOTS)
    contained = ["setpriv", "--pdeathsig", "KILL", "--", "unshare", "--net", "--mount", "--propagation", "private",
                 "--kill-child", "--", "sh", "-c", f'ip link set lo up && {mounts} && exec "$@"', "contained", *pytest]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    env.pop("PAIRPROOF_IMAGE", None)  # the image is the target's, never one left in the environment
    if target.image:
        env["PAIRPROOF_IMAGE"] = target.image
    try:
        returncode, output = _run_contained(contained, cwd=tree, env=env, timeout=SUITE_TIMEOUT)
    except TimedOut as exc:
        output = exc.output + f"\n[pairproof mutants: the run was stopped after {SUITE_TIMEOUT:.0f}s]\n"
        return SuiteRun(-1, time.monotonic() - started, [], {}, output[-2000:], output, timed_out=True)
    seconds = time.monotonic() - started
    tail = output[-2000:]
    if not verdict.exists():
        return SuiteRun(returncode, seconds, [], {}, tail, output)
    data = json.loads(verdict.read_text())
    statuses = {c["id"]: c["status"] for c in data["cases"] if c["status"] != "not covered"}
    return SuiteRun(returncode, seconds, sorted(c for c, s in statuses.items() if s == "failed"), statuses, tail, output)


def run_mutant(mutant: Mutant, workdir: Path, suite: Path | None, state_dir: str,
               target: Target = Target()) -> Outcome:
    outcome = Outcome(mutant.name, list(mutant.kills))
    started = time.monotonic()
    tree = workdir / mutant.name
    try:
        copy_suite(tree)
        apply(mutant, tree)
    except MutantError as exc:
        outcome.status, outcome.detail = "error", str(exc)
        return outcome
    for phase, cases in (("expected", list(mutant.kills)), ("full", [])):
        run = run_suite(tree, suite, cases, state_dir, target)
        outcome.runs.append(run)
        if run.timed_out:
            # A hang is no kill and no survival: an error the report shows with where the run was.
            outcome.status, outcome.phase = "error", phase
            outcome.detail = (f"the {phase} run did not finish within {SUITE_TIMEOUT:.0f}s and was stopped; "
                              f"its output ended: {run.tail[-600:]}")
            break
        hits = [c for c in run.failed if c in mutant.kills]
        if hits:
            outcome.status, outcome.phase, outcome.killed_by = "killed", phase, run.failed
            break
        if phase == "full" and run.failed:
            outcome.status, outcome.phase, outcome.killed_by = "killed_unexpected", phase, run.failed
            outcome.detail = f"killed only by {', '.join(run.failed)}, not by its expected {', '.join(mutant.kills)}"
    outcome.seconds = time.monotonic() - started
    shutil.rmtree(tree, ignore_errors=True)
    return outcome


def table(report: dict) -> str:
    control = report["control"]
    lines = [f"target: {report.get('target', 'reference')}"
             + (f" (image {report['image']})" if report.get("image") else "")
             + f", catalogue {report.get('catalogue', 'mutants/catalogue.toml')}",
             f"control: exit {control['exit']} in {control['seconds']:.0f}s ({'passed' if control['exit'] == 0 else 'FAILED'})",
             f"{'mutant':32} {'status':18} {'expected':14} killed by"]
    for m in report["mutants"]:
        lines.append(f"{m['name']:32} {m['status']:18} {','.join(m['expected']):14} "
                     f"{','.join(m['killed_by']) or '-'}{'  ' + m['detail'] if m['detail'] else ''}")
    lines.append(f"verdict: {report['status'].upper()} - {report['summary']}")
    if report.get("partial"):
        lines.append(f"partial: {len(report['mutants'])} of the {len(report['catalogued'])} catalogued mutants"
                     + (f", judged by the suite in {report['suite']}" if report.get("suite") else "")
                     + "; `pairproof gate` refuses a partial report: run `pairproof mutants` without --only for it")
    for m in report["mutants"]:
        lines.append(f"time {m['name']}: {m['seconds']:.0f}s")
    lines.append(f"time in all: {report['seconds']:.0f}s")
    return "\n".join(lines)


PRINT = functools.partial(print, flush=True)  # progress lines as they come, under tox too


def run(*, reports: Path, jobs: int, only: list[str] | None = None, suite: Path | None = None,
        state_dir: str = "/var/lib/pairproof", catalogue: list[Mutant] | None = None,
        target: str = "reference", image: str = "", progress=PRINT,
        control: Callable[[dict[str, str]], SuiteRun] | None = None, control_from: str = "") -> int:
    """Run the catalogue (or ``only``) of ``target``. ``control``: where the unmodified control comes from instead
    of a run of the whole suite here (``pairproof mutants --control-results``: a qualification that passes the gate
    on this source), given the copy's source digest; ``control_from`` names it in the report."""
    try:
        path = catalogue_path(target)
    except KeyError:
        raise MutantError(f"target {target!r} has no mutant catalogue") from None
    catalogued = load(path)
    mutants = catalogue if catalogue is not None else catalogued
    # Anything but the whole catalogue file, judged by the shipped suite, is a partial report: useful
    # while working on one mutant, never enough for the gate.
    partial = bool(only) or catalogue is not None or suite is not None
    if only:
        unknown = set(only) - {m.name for m in mutants}
        if unknown:
            raise MutantError(f"no mutant named {', '.join(sorted(unknown))} in {display(path)}")
        mutants = [m for m in mutants if m.name in only]
    workdir = Path(tempfile.mkdtemp(prefix="pairproof-mutants-"))
    started = time.monotonic()
    _stopping.clear()
    previous = signal.getsignal(signal.SIGTERM) if threading.current_thread() is threading.main_thread() else None
    if previous is not None:
        signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM stops the runs as SIGINT does
    try:
        control_tree = copy_suite(workdir / "control")
        source = source_digest(control_tree, path)
        against = Target(target, image)
        taken = control is not None and suite is None
        if taken:
            control = control(source)
            progress(f"control: {control.tail}, which passes the gate on this source")
        else:
            progress(f"control: the unmodified copy, whole suite{'' if suite is None else f' ({suite})'}...")
            control = run_suite(control_tree, suite, [], state_dir, against)
            progress(f"control: exit {control.exit} in {control.seconds:.0f}s")
        if control.exit:
            # Its tracebacks, where CI's log keeps them, and whole beside the report: a control that did not pass
            # is to be read, not only counted.
            reports.mkdir(parents=True, exist_ok=True)
            (reports / "mutants-control.log").write_text(control.output)
            progress(f"control's output, last part (whole in {reports / 'mutants-control.log'}):\n"
                     + control.output[-8000:])
        outcomes: list[Outcome] = []
        if control.exit == 0:
            # The pooled mutants in parallel, then each that must run alone (``Mutant.alone``) by itself.
            batches = [(max(1, jobs), [m for m in mutants if not m.alone])] + [(1, [m]) for m in mutants if m.alone]
            for workers, batch in batches:
                with ThreadPoolExecutor(max_workers=workers) as pool:
                    futures = [pool.submit(run_mutant, m, workdir, suite, state_dir, against) for m in batch]
                    try:
                        for future in futures:
                            outcome = future.result()
                            outcomes.append(outcome)
                            by = f" by {','.join(outcome.killed_by)}" if outcome.killed_by else ""
                            progress(f"{outcome.name}: {outcome.status}{by} ({outcome.seconds:.0f}s)")
                    except BaseException:
                        for future in futures:
                            future.cancel()
                        stop_all()
                        raise
    except KeyboardInterrupt:
        stop_all()
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        shutil.rmtree(workdir, ignore_errors=True)
    counts = {s: sum(o.status == s for o in outcomes) for s in ("killed", "killed_unexpected", "survived", "error")}
    ok = control.exit == 0 and counts["killed"] == len(mutants)
    report = {
        "schema": SCHEMA, "status": "passed" if ok else "failed", "seconds": round(time.monotonic() - started, 1),
        "target": target, "catalogue": display(path), "image": image or None,
        "source": source, "partial": partial, "suite": str(suite) if suite is not None else None,
        "catalogued": [m.name for m in catalogued],
        "summary": (f"{counts['killed']}/{len(mutants)} killed by an expected case, {counts['killed_unexpected']} killed "
                    f"only by others, {counts['survived']} survived, {counts['error']} errors")
        if control.exit == 0 else "the unmodified control did not pass: no mutant was run",
        "control": {"exit": control.exit, "seconds": round(control.seconds, 1), "statuses": control.statuses,
                    "tail": control.tail if control.exit else "",
                    **({"from": control_from} if taken else {})},
        "mutants": [{k: v for k, v in asdict(o).items() if k != "runs"} | {"seconds": round(o.seconds, 1)}
                    for o in outcomes],
        "matrix": {o.name: (o.runs[-1].statuses if o.runs else {}) for o in outcomes},
    }
    reports.mkdir(parents=True, exist_ok=True)
    # Each file whole (temporary file, then rename); the table first, so the report the gate reads is the last
    # to change.
    for name, text in (("mutants.txt", table(report) + "\n"), ("mutants.json", json.dumps(report, indent=2) + "\n")):
        tmp = reports / f"{name}.tmp"
        tmp.write_text(text)
        tmp.replace(reports / name)
    progress(table(report))
    return 0 if ok else 1
