"""``pairproof``: qualify a target, or clean what an interrupted run left.

    pairproof qualify [--target reference|docker [--image IMAGE]] [--profile reference] [--reports-dir reports]
                      [-n N] [--case ID] [-- pytest args]
    pairproof mutants [--target reference|docker [--image IMAGE]] [--reports-dir reports[/docker]] [-j N] [--only NAME]
    pairproof gate [--results reports] [--mutants reports/mutants.json]      (the report of the results' target)
    pairproof expect --expected FILE [--results reports]                     (exactly the expected cases failed)
    pairproof findings --results DIR [--results DIR] --out FILE              (the findings document, from verdicts)
    pairproof report [--reports-dir reports]                                   (rebuild the two HTML pages)
    pairproof check-driver TARGET [--profile NAME|PATH] [--state-dir DIR] [--image IMAGE]
                                 (TARGET: a registered name or module:factory)
    pairproof clean [--target reference|docker] [--all]
    pairproof measure [--target reference] [--turns N] [--json]               (an instance's footprint beside the budget)
    pairproof scan PATH... [--json] [--skip PATH]                             (exit 0 clean, 1 hits or not all read, 2 bad input)

Every command checks everything it was given before it writes or starts anything (``inputs.py``): bad
input (an unknown case, target or profile, pytest arguments pytest refuses or that would override what
``qualify`` checked or write into its folders, a state or reports folder that cannot serve, an environment
variable naming no executable, not root, a missing kernel feature, a missing or malformed file) gets one line on stderr
naming the input and the fix, exit code 2, and nothing is changed. ``qualify`` writes into a new report set
and publishes it in one rename only when the run ends with a verdict (``reports/reportset.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
from pathlib import Path

from acceptance.errors import SetupError

EXIT_FAILED = 1
EXIT_SETUP = 2
EXIT_INTERRUPTED = 130
EXIT_CODES = """exit codes (every command):
  0    passed (gate: the evidence proves the catalogue; scan: no hits; clean, report: done)
  1    a case failed or is broken, or the run ended without a verdict (gate: refused; scan: hits;
       check-driver: the core or a claimed facet fails; mutants: a mutant survived)
  2    bad input or a machine that cannot run it: one line on stderr names the input and the fix,
       and nothing was changed (the last good reports are intact)
  130  interrupted (SIGINT or SIGTERM): instances torn down, the previous reports left as they were"""


class _Parser(argparse.ArgumentParser):
    """argparse's own usage errors, as one line and exit 2 like every other bad input."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"pairproof: {message} (see `{self.prog} --help`)\n")
        sys.exit(EXIT_SETUP)


def _run_end():
    """A plugin that learns what pytest.main's exit code does not tell apart: a Ctrl-C/SIGTERM, or a stop by
    ``pytest.exit`` or by a worker that could not build the target (and why). (Built here: pytest is imported
    only when a run starts.)"""
    import pytest

    class RunEnd:
        interrupted = False
        stopped = ""

        def pytest_keyboard_interrupt(self, excinfo) -> None:
            if isinstance(excinfo.value, KeyboardInterrupt):
                self.interrupted = True
            else:
                self.stopped = str(getattr(excinfo.value, "msg", excinfo.value))

        @pytest.hookimpl(optionalhook=True)
        def pytest_testnodedown(self, node, error) -> None:
            self.stopped = getattr(node, "workeroutput", {}).get("pairproof_unbuildable", "") or self.stopped

    return RunEnd()


def _terminate_like_interrupt(signum: int, frame: object) -> None:
    """SIGTERM (how CI systems and `timeout` cancel a job) tears the run down as Ctrl-C does: pytest
    runs every fixture's finalizer on KeyboardInterrupt. A second SIGTERM must not cut that teardown
    short, so it is ignored from here on (SIGKILL stays the last resort, and `pairproof clean` after it)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def _image(args: argparse.Namespace) -> None:
    """``--image`` reaches the docker driver as ``PAIRPROOF_IMAGE`` (in this process and every pytest worker)."""
    if args.image:
        if args.target != "docker":
            raise SetupError(f"--image names an image to qualify under Docker: use it with --target docker, not "
                             f"--target {args.target}")
        os.environ["PAIRPROOF_IMAGE"] = args.image


def qualify(args: argparse.Namespace) -> int:
    from acceptance import targets
    from acceptance.cli import inputs

    inputs.positive(args.n, "-n", zero=True)
    inputs.case_ids(args.case)
    _image(args)
    targets.load(args.target)  # unknown target: SetupError before anything is touched
    from acceptance.targets.profiles import load as load_profile

    # a bad profile: SetupError naming the file and field, before anything runs; none given: the target's own
    profile = load_profile(args.profile or targets.default_profile(args.target))
    problems = targets.preflight(args.target)
    if problems:
        raise SetupError(f"target {args.target!r} cannot run here: " + "; ".join(problems))
    inputs.state_dir(args.state_dir)
    reports = inputs.reports_dir(args.reports_dir)
    inputs.outside_state(reports, args.state_dir)
    inputs.environment()
    inputs.owned_pytest_args(args.pytest_args, [reports, Path(args.state_dir)])
    expected = _expectation(args.expected) if args.expected else None
    if expected is not None and expected.target != args.target:
        raise SetupError(f"--expected {args.expected} describes target {expected.target!r}, not --target "
                         f"{args.target}: give the expectation of the target qualified")
    import pytest

    from acceptance import cases
    from reports import reportset

    suite = [
        str(Path(cases.__file__).parent),
        "--target", args.target,
        "--profile", str(profile.path),
        "--pairproof-state-dir", args.state_dir,
        "-p", "no:cacheprovider", "-p", "no:benchmark",  # (pytest-benchmark makes .benchmarks/ where it runs)
        # the CLI imported the suite's packages before pytest could register them for rewriting
        "-W", "ignore::pytest.PytestAssertRewriteWarning",
        *(f"--case={c}" for c in args.case),
    ]
    inputs.pytest_args(suite, args.pytest_args)  # pytest's own usage check and a dry collection, nothing written
    existed = inputs.nearest_existing(reports)
    staged = reportset.stage(reports)
    pytest_args = [*suite, "--pairproof-verdict", str(staged / "verdict.json"),
                   "--alluredir", str(staged / "allure-results"), "-v", "-rfE"]
    if args.n:
        # one worker per module, so a case's refusal and controls judge one platform run (DESIGN §5 rule 1)
        pytest_args += ["-n", str(args.n), "--dist", "loadfile"]
    end = _run_end()
    published = False
    previous = signal.signal(signal.SIGTERM, _terminate_like_interrupt)
    try:
        code = pytest.main(pytest_args + args.pytest_args, plugins=[end])
        if end.interrupted:
            print(f"pairproof: qualify interrupted: the run's instances were torn down; the reports in {reports} "
                  "are left as they were", file=sys.stderr)
            return EXIT_INTERRUPTED
        if code == pytest.ExitCode.USAGE_ERROR:
            raise SetupError(end.stopped or "pytest refused the run (its message is above); fix the arguments, the "
                             "target or the machine, then run again")
        if code == pytest.ExitCode.OK and {"--collect-only", "--co"} & set(args.pytest_args):
            return int(code)  # a listing (what the message for a selection of nothing suggests): no verdict, no reports
        if code not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED) or not (staged / "verdict.json").exists():
            print(f"pairproof: qualify ended without a verdict (pytest exit {int(code)}"
                  f"{': ' + end.stopped if end.stopped else ''}); the reports in {reports} are left as they were",
                  file=sys.stderr)
            return EXIT_FAILED
        _build(staged, reports)
        reportset.publish(reports, staged)
        published = True
    except (OSError, ExceptionGroup) as exc:  # (pytest.main lets a session-end hook's error out as a group)
        full = _out_of_space(exc)
        if full is None:
            raise
        raise SetupError(f"qualify could not write its reports in {reports} ({full.strerror}): free space there or "
                         f"choose another --reports-dir; the reports in {reports} are left as they were") from None
    finally:
        signal.signal(signal.SIGTERM, previous)
        if not published:
            reportset.discard(staged)
            inputs.unmake(reports, existed)
    print(f"pairproof: verdict written to {reports / 'verdict.json'}, Allure results in {reports / 'allure-results'}, "
          f"summary page {reports / 'summary.html'}")
    if expected is not None:
        return _compare(reports, expected)
    return int(code)


def _out_of_space(exc: BaseException) -> OSError | None:
    """The disk-full (or over-quota) error in ``exc`` or in the group it is, else None."""
    import errno

    if isinstance(exc, OSError):
        return exc if exc.errno in (errno.ENOSPC, errno.EDQUOT) else None
    if isinstance(exc, BaseExceptionGroup):
        return next((found for inner in exc.exceptions if (found := _out_of_space(inner)) is not None), None)
    return None


def _build(staged: Path, reports: Path) -> None:
    """The summary page and Allure's HTML report, into the set being built (published with it)."""
    from reports import allure_html, html

    mutants = reports / "mutants.json"
    try:
        html.write(staged, mutants=mutants)
    except ValueError:  # a damaged mutant report must not cost the run its reports: the page without it
        print(f"pairproof: {mutants} is not JSON: the summary page leaves the kill matrix out")
        html.write(staged, mutants=None)
    built = allure_html.build(staged / "allure-results", staged / "allure-report.html")
    print("pairproof: " + built.replace(str(staged), str(reports)))


def report(args: argparse.Namespace) -> int:
    from acceptance.cli import inputs
    from reports import reportset

    reports = inputs.existing_folder(args.reports_dir, "--reports-dir", "a qualification wrote its reports to")
    if not (reports / "verdict.json").exists():
        raise SetupError(f"no verdict in {reports}: run `pairproof qualify --reports-dir {reports}` first")
    inputs.json_file(reports / "verdict.json", "--reports-dir", "a verdict written by `pairproof qualify` (rerun it)")
    if (reports / "mutants.json").exists():
        inputs.json_file(reports / "mutants.json", "--reports-dir", "a mutant report (rerun `pairproof mutants`)")
    inputs.reports_dir(reports)
    with reportset.reading(reports) as source:  # (kept published while it is copied)
        staged = reportset.stage_copy(reports, source)
    published = False
    try:
        _build(staged, reports)
        reportset.publish(reports, staged, over=source)
        published = True
    except reportset.Superseded:
        print(f"pairproof: a qualification published new reports in {reports} while the pages were rebuilt: "
              "left them as they are; run `pairproof report` again to rebuild theirs", file=sys.stderr)
        return EXIT_FAILED
    finally:
        if not published:
            reportset.discard(staged)
    print(f"pairproof: summary page {reports / 'summary.html'}")
    return 0


def clean(args: argparse.Namespace) -> int:
    from acceptance import targets

    if os.geteuid() != 0:
        raise SetupError("pairproof clean must run as root (it removes cgroups and instance volumes): run it with sudo")
    targets.load(args.target)  # unknown target: SetupError before anything is touched
    state = Path(args.state_dir)
    if str(state).strip() == "" or (os.path.lexists(state) and not state.is_dir()):
        raise SetupError(f"--state-dir {str(state)!r}: not a folder; give the state folder the runs used "
                         "(qualify --state-dir; default /var/lib/pairproof)")
    lines = targets.clean(args.target, Path(args.state_dir), include_live=args.all)
    for line in lines:
        print(line)
    from acceptance.harness.lab.lab import stale_workdirs

    labs = stale_workdirs()
    for folder in labs:
        shutil.rmtree(folder, ignore_errors=True)
        print(f"removed lab folder {folder} (its sink no longer runs)")
    if not lines and not labs:
        print("nothing to clean")
    return 0


def measure(args: argparse.Namespace) -> int:
    from acceptance import targets

    if os.geteuid() != 0:
        raise SetupError("pairproof measure must run as root (it starts an instance in its own cgroup): run it with sudo")
    if args.turns < 1:
        raise SetupError(f"--turns {args.turns}: give 1 or more (the active figure is the peak over the turns)")
    from acceptance.cli import inputs

    targets.load(args.target)  # unknown target: SetupError before anything is touched
    inputs.state_dir(args.state_dir)
    problems = targets.preflight(args.target)
    if problems:
        raise SetupError(f"target {args.target!r} cannot run here: " + "; ".join(problems))
    result = targets.measure(args.target, Path(args.state_dir), turns=args.turns)
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
        return 0
    measured, budget, generated = result["footprint_mb"], result["budget_in_force"], result["measured_budget"]
    print(f"one instance of {args.target}, measured over {args.turns} turns (MB, rounded up):")
    print(f"  {'':22} {'measured':>9} {'budget':>9} {'generated':>10}")
    for name in ("idle_instance_mb", "active_instance_mb", "broker_mb"):
        print(f"  {name:22} {measured[name]:>9} {budget[name]:>9} {generated[name]:>10}")
    print(f"  {'disk (volume) mb':22} {measured['disk_mb']:>9} {budget['volume_mb']:>9} {generated['volume_mb']:>10}"
          "   (used by a fresh instance; the budget's figure is its quota)")
    return 0


def mutants(args: argparse.Namespace) -> int:
    from acceptance.cli import inputs
    from mutants import catalogue as mutant_catalogue
    from mutants import runner
    from mutants.errors import MutantError

    if os.geteuid() != 0:
        raise SetupError("pairproof mutants must run as root (each run starts sandboxes): run it with sudo")
    inputs.positive(args.jobs, "-j")
    if args.target not in mutant_catalogue.CATALOGUES:
        raise SetupError(f"--target {args.target!r} has no mutant catalogue: give one of "
                         f"{', '.join(mutant_catalogue.CATALOGUES)}")
    _image(args)
    path = mutant_catalogue.catalogue_path(args.target)
    shown = mutant_catalogue.display(path)
    try:
        names = {m.name for m in mutant_catalogue.load(path)}
    except (OSError, ValueError, KeyError) as exc:
        raise SetupError(f"{shown} cannot be read ({type(exc).__name__}: {exc}); fix the file") from None
    unknown = [n for n in args.only or () if n not in names]
    if unknown:
        command = "pairproof mutants" + ("" if args.target == "reference" else f" --target {args.target}")
        raise SetupError(f"--only {', '.join(map(repr, unknown))}: no such mutant in {shown} (target "
                         f"{args.target}); give a name from it (`{command}` runs them all)")
    if args.target != "reference":
        from acceptance import targets

        problems = targets.preflight(args.target)
        if problems:
            raise SetupError(f"target {args.target!r} cannot run here: " + "; ".join(problems))
    if args.reports_dir is None:
        args.reports_dir = "reports" if args.target == "reference" else f"reports/{args.target}"
    if args.suite is not None:
        inputs.existing_folder(args.suite, "--suite", "of test cases to judge the mutants with")
    inputs.state_dir(args.state_dir)
    reports = inputs.reports_dir(args.reports_dir)
    inputs.outside_state(reports, args.state_dir)
    inputs.environment()
    reports.mkdir(parents=True, exist_ok=True)
    try:
        return runner.run(reports=reports, jobs=args.jobs, only=args.only or None,
                          suite=Path(args.suite).resolve() if args.suite else None, state_dir=args.state_dir,
                          target=args.target, image=args.image)
    except runner.Interrupted:
        print("pairproof: mutants interrupted: every run was stopped, no report written", file=sys.stderr)
        return 130
    except MutantError as exc:
        raise SetupError(str(exc)) from exc


def gate(args: argparse.Namespace) -> int:
    from acceptance.cli import inputs
    from reports import gate as release_gate
    from reports import reportset

    results = inputs.existing_folder(args.results, "--results", "a qualification wrote (verdict.json, "
                                     "allure-results/), e.g. reports")
    if args.mutants is not None:
        inputs.json_file(args.mutants, "--mutants", "the mutant report `pairproof mutants` wrote (reports/mutants.json)")
    # The published set's own folder, read whole and kept published while it is read: a run publishing
    # meanwhile can neither mix two sets under the gate nor sweep the one it reads.
    with reportset.reading(results) as published:
        result = release_gate.judge(published or results, Path(args.mutants) if args.mutants else None)
    for line in result.lines:
        print(line)
    for reason in result.reasons:
        print(f"gate: {reason}")
    print(f"gate: {'PASSED' if result.passed else 'FAILED'}")
    return 0 if result.passed else 1


def _expectation(value: str | None):
    """The expectation ``--expected`` names, checked (bad input: SetupError, one line)."""
    from reports import expectation

    try:
        return expectation.load(value)
    except expectation.ExpectationError as exc:
        raise SetupError(str(exc)) from None


def _compare(results: Path, expected) -> int:
    """Print the verdict in ``results`` against ``expected``, case by case: 0 exactly as expected, else 1."""
    from reports import expectation, reportset

    with reportset.reading(results) as published:
        try:
            result = expectation.judge(published or results, expected)
        except expectation.ExpectationError as exc:
            raise SetupError(str(exc)) from None
    for line in result.lines:
        print(line)
    if result.as_expected:
        print(f"expect: AS EXPECTED ({len(expected.fails)} expected failures, every other case passed; "
              f"{expected.path})")
        return 0
    print(f"expect: NOT AS EXPECTED ({len(result.mismatches)}): " + "; ".join(result.mismatches)[:2000])
    return EXIT_FAILED


def expect(args: argparse.Namespace) -> int:
    from acceptance.cli import inputs

    results = inputs.existing_folder(args.results, "--results", "a qualification wrote (verdict.json, "
                                     "allure-results/), e.g. reports/hermes-unguarded")
    return _compare(results, _expectation(args.expected))


def findings(args: argparse.Namespace) -> int:
    """The findings document from the runs' results (``reports/findings.py``), written to ``--out``."""
    from acceptance.cli import inputs
    from reports import findings as findings_doc
    from reports import reportset

    folders = [inputs.existing_folder(r, "--results", "a qualification of hermes or hermes-unguarded wrote")
               for r in args.results]
    out = Path(args.out)
    if not out.parent.is_dir():
        raise SetupError(f"--out {out}: its folder {out.parent} does not exist; make it, or write elsewhere")
    if out.is_dir():
        raise SetupError(f"--out {out}: is a folder; give the document's file name")
    command = "pairproof findings " + " ".join(f"--results {f}" for f in args.results) + f" --out {args.out}"
    from contextlib import ExitStack

    with ExitStack() as stack:
        published = [stack.enter_context(reportset.reading(f)) or f for f in folders]
        try:
            document = findings_doc.generate(published, command, args.results)
        except findings_doc.FindingsError as exc:
            raise SetupError(str(exc)) from None
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(document.text)
    os.replace(tmp, out)
    print(f"findings: {out} written from {len(folders)} runs; reproduced on hermes-unguarded: "
          + ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in document.reproduced.items()))
    return 0


def check_driver(args: argparse.Namespace) -> int:
    """Build the driver, check the core and every facet it claims with one small real round trip each; print
    facet by facet what works, what is missing and what fails. 0 when the core and every claimed facet work."""
    import secrets as token_source
    import time

    from acceptance import targets
    from acceptance.contract import conformance
    from acceptance.harness.fixtures import PLATFORM_SECRETS
    from acceptance.targets.profiles import load as load_profile

    _image(args)
    factory = targets.load(args.target)  # unknown name, or a module that does not import: SetupError (exit 2)
    if not callable(factory):
        raise SetupError(f"target {args.target!r} names {type(factory).__name__}, not a factory: give module:factory "
                         "where factory(options: TargetOptions) returns the driver")
    problems = targets.preflight(args.target)
    if problems:
        raise SetupError(f"target {args.target!r} cannot run here: " + "; ".join(problems))
    profile = load_profile(args.profile or targets.default_profile(args.target))  # bad: SetupError naming the field
    from acceptance.cli import inputs

    inputs.state_dir(args.state_dir)
    inputs.environment()
    run = f"check{token_source.token_hex(3)}"
    options = targets.TargetOptions(run=run, state_dir=Path(args.state_dir), profile=profile,
                                    secrets={env: f"pp-check-{code}-{token_source.token_hex(8)}"
                                             for env, code in PLATFORM_SECRETS.items()})
    start = time.monotonic()
    print(f"pairproof check-driver {args.target} (run {run})")
    try:
        driver = factory(options)
    except SetupError:  # the driver refuses this machine or profile: one line naming the fix, exit 2
        raise
    except Exception as exc:
        print(f"  {'core':32} FAILS    building the driver: {type(exc).__name__}: {exc}")
        print("check-driver: FAILED (the driver could not be built)")
        return 1

    def say(result: conformance.Result) -> None:
        print(f"  {result.name:32} {result.state.upper() if result.state == 'fails' else result.state:8} "
              f"{result.detail}" + (f" ({result.seconds:.2f} s)" if result.seconds else ""))
    previous = signal.signal(signal.SIGTERM, _terminate_like_interrupt)  # teardown runs as on Ctrl-C
    try:
        results = conformance.run(driver, say, start_command=profile.process)
    finally:
        signal.signal(signal.SIGTERM, previous)
    bad = [r.name for r in results if r.state == "fails" or (r.name == "core" and r.state != "works")]
    unchecked = [r.name for r in results if r.state == "not checked"]
    claimed = [r for r in results if r.state in ("works", "fails") and r.name in conformance.FACETS]
    missing = [r.name for r in results if r.state == "missing" and r.name != "core"]
    verdict = "PASSED" if not bad and not unchecked else "FAILED"
    core = "works" if "core" not in bad else "does not work"
    print(f"check-driver: {verdict} in {time.monotonic() - start:.1f} s: core {core}, "
          + (f"{len(unchecked)} claimed facets not checked" if unchecked else
             f"{sum(r.state == 'works' for r in claimed)} of {len(claimed)} claimed facets work")
          + (f"; fails: {', '.join(bad)}" if bad else "")
          + (f"; missing (cases needing them will be not covered): {', '.join(missing)}" if missing else ""))
    return 0 if verdict == "PASSED" else 1


def scan(args: argparse.Namespace) -> int:
    """Scan host paths for canary-shaped tokens with the suite's engine (``hostscan``, as the host-side scans of
    the cases): the static probe when it exists (``PAIRPROOF_PROBE`` or build/probe/ppscan), else detect.py;
    the summary names which."""
    import json

    from acceptance.errors import ProofError
    from acceptance.harness import hostscan

    missing = [p for p in args.paths if not os.path.lexists(p)]
    if missing:
        raise SetupError(f"no such path: {', '.join(map(repr, missing))}; give files or folders that exist")
    try:
        report = hostscan.scan_paths(args.paths, skip=args.skip)
    except ProofError as exc:  # a bad PAIRPROOF_PROBE, or a scanner that failed or did not finish its report
        raise SetupError(str(exc)) from None
    hits, summary, engine = report.hits, report.summary(), report.engine
    if args.json:
        for record in (*hits, summary):
            print(json.dumps(record))
    else:
        for hit in hits:
            print(f"{hit['token']}  {hit['encoding']}  {hit['where']}@{hit['offset']}")
        print(f"{len(hits)} hits; {summary['scanned_files']} files, {summary['bytes']} bytes read, "
              f"{summary['truncated']} cut short, {summary['errors']} could not be read; engine: {engine}")
        for problem in summary["problems"]:
            print(f"  could not read: {problem}")
    if hits:
        return 1
    if summary["errors"] or summary["truncated"] or summary["problems"]:
        # "nothing found" is a claim about everything named: a scan that missed part of it cannot make it
        print(f"pairproof scan: no hits, but not clean: {summary['errors']} could not be read and "
              f"{summary['truncated']} were cut short (listed above); fix access or raise the limit and scan again",
              file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="pairproof", description="Qualify personal-agent isolation with paired canaries.",
                     epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    q = sub.add_parser("qualify", help="run the suite on a target and write reports/")
    q.add_argument("--target", default="reference", help="target driver (default: reference)")
    q.add_argument("--profile", default=None, metavar="NAME|PATH",
                   help="agent profile the target runs: a name in acceptance/profiles or a .toml file (default: the "
                        "target's own agent; reference for the reference target)")
    q.add_argument("--image", default="", metavar="IMAGE",
                   help="the image to qualify (--target docker; default: the reference agent image, built locally)")
    q.add_argument("--reports-dir", default="reports", help="where to write allure-results/ and verdict.json")
    q.add_argument("--state-dir", default="/var/lib/pairproof", help="runtime state folder (reference target)")
    q.add_argument("-n", type=int, default=0, help="run the suite on N processes (pytest-xdist)")
    q.add_argument("--case", action="append", default=[], metavar="ID",
                   help="run only this catalogue case, with its controls (repeatable)")
    q.add_argument("--expected", default=None, metavar="FILE",
                   help="judge the verdict against this expectation (as `pairproof expect`) instead of requiring "
                        "every case to pass: exit 0 only if exactly the expected cases failed")
    q.add_argument("pytest_args", nargs="*", help="extra pytest arguments, after --")
    q.set_defaults(func=qualify)
    m = sub.add_parser("mutants", help="run the suite against every mutant of the runtime; write the kill matrix")
    m.add_argument("--target", default="reference",
                   help="whose mutants: reference (mutants/catalogue.toml) or docker (mutants/docker.toml, the "
                        "suite on --target docker); default: reference")
    m.add_argument("--image", default="", metavar="IMAGE",
                   help="the image the docker mutants run (--target docker; default: the reference agent image)")
    m.add_argument("--reports-dir", default=None,
                   help="where to write mutants.json and mutants.txt (default: reports, reports/docker for docker)")
    m.add_argument("--state-dir", default="/var/lib/pairproof")
    m.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1, help="mutants run in parallel (default: cores)")
    m.add_argument("--only", action="append", metavar="NAME",
                   help="run only this mutant (repeatable); the report is partial, and `pairproof gate` refuses it")
    m.add_argument("--suite", help="a different cases folder to judge (the runner's own tests use a useless one); "
                                   "the report is partial, and `pairproof gate` refuses it")
    m.set_defaults(func=mutants)
    r = sub.add_parser("report", help="rebuild reports/summary.html and reports/allure-report.html")
    r.add_argument("--reports-dir", default="reports")
    r.set_defaults(func=report)
    g = sub.add_parser("gate", help="exit 0 only if the results prove the whole catalogue (and the mutants, if given); "
                                    "it judges the evidence again, trusting no status a report gives itself")
    g.add_argument("--results", default="reports",
                   help="folder with verdict.json and the run's allure-results/ (default: reports)")
    g.add_argument("--mutants", help="also require this mutant report (reports/mutants.json): a whole run on this "
                                     "source, every catalogued mutant killed by one of its named cases")
    g.set_defaults(func=gate)
    e = sub.add_parser("expect", help="compare a verdict with a checked-in expectation of the cases that must fail "
                                      "(a target qualified to show its failures): 0 exactly as expected, 1 not")
    e.add_argument("--expected", required=True, metavar="FILE",
                   help="the expectation, e.g. acceptance/expectations/hermes-unguarded.toml")
    e.add_argument("--results", default="reports", help="folder with verdict.json and allure-results/")
    e.set_defaults(func=expect)
    fi = sub.add_parser("findings", help="write the design note's findings about hermes-agent from a hermes and a "
                                         "hermes-unguarded run (their verdicts and evidence), never by hand")
    fi.add_argument("--results", action="append", required=True, metavar="DIR",
                    help="a results folder of a hermes or hermes-unguarded run (repeatable: one per target)")
    fi.add_argument("--out", required=True, metavar="FILE", help="the document, e.g. docs/findings/hermes-agent-0.19.0.md")
    fi.set_defaults(func=findings)
    d = sub.add_parser("check-driver", help="conformance run of a driver (seconds, not the suite): the core and each "
                                            "facet it claims, one real round trip each; says what works, is missing, fails")
    d.add_argument("target", help="a registered target name (e.g. reference) or module:factory")
    d.add_argument("--profile", default=None, metavar="NAME|PATH",
                   help="agent profile the driver runs, as `qualify --profile` gives it (default: the target's own)")
    d.add_argument("--state-dir", default="/var/lib/pairproof", help="state folder handed to the driver (options.state_dir)")
    d.add_argument("--image", default="", metavar="IMAGE", help="the image to qualify (--target docker)")
    d.set_defaults(func=check_driver)
    c = sub.add_parser("clean", help="remove what killed runs left: processes, cgroups, volumes, uid claims")
    c.add_argument("--target", default="reference", help="whose leftovers (its driver's clean hook; default: reference)")
    c.add_argument("--state-dir", default="/var/lib/pairproof")
    c.add_argument("--all", action="store_true", help="also remove runs whose owner process is still alive")
    c.set_defaults(func=clean)
    me = sub.add_parser("measure", help="one instance's memory (idle, active, from its cgroup), its broker's and its "
                                         "disk, beside the capacity budget and a budget generated from them")
    me.add_argument("--target", default="reference", help="whose instances (its driver's measure hook; default: reference)")
    me.add_argument("--state-dir", default="/var/lib/pairproof")
    me.add_argument("--turns", type=int, default=3, help="turns the active figure is the peak over (default 3)")
    me.add_argument("--json", action="store_true", help="footprint_mb, budget_in_force, measured_budget as JSON")
    me.set_defaults(func=measure)
    s = sub.add_parser("scan", help="scan host paths for canary-shaped tokens with the suite's engine "
                                     "(exit 0 no hits and all read, 1 hits or not all read, 2 bad input)")
    s.add_argument("paths", nargs="+", metavar="PATH", help="a file or directory to scan")
    s.add_argument("--json", action="store_true", help="one JSON object per hit, then the completeness record")
    s.add_argument("--skip", action="append", default=[], metavar="PATH", help="do not enter PATH (repeatable)")
    s.set_defaults(func=scan)
    for command in sub.choices.values():  # every command, those added later included, documents the same codes
        command.epilog, command.formatter_class = EXIT_CODES, argparse.RawDescriptionHelpFormatter
    args = parser.parse_args(argv)
    # SIGTERM while inputs are checked (or a gate or report runs) is an interrupt too: 130, not death by signal.
    import threading

    main_thread = threading.current_thread() is threading.main_thread()  # (only there can a handler be set)
    previous = signal.signal(signal.SIGTERM, _terminate_like_interrupt) if main_thread else None
    try:
        return args.func(args)
    except SetupError as exc:
        print(f"pairproof: {exc}", file=sys.stderr)
        return EXIT_SETUP
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)

