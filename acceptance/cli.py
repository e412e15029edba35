"""``pairproof``: qualify a target, or clean what an interrupted run left.

    pairproof qualify [--target reference|docker [--image IMAGE]] [--profile reference] [--reports-dir reports]
                      [-n N] [--case ID] [-- pytest args]
    pairproof mutants [--reports-dir reports] [-j N] [--only NAME]
    pairproof gate [--results reports] [--mutants reports/mutants.json]
    pairproof check-driver TARGET [--profile NAME|PATH] [--state-dir DIR] [--image IMAGE]
                                 (TARGET: a registered name or module:factory)
    pairproof clean [--target reference|docker] [--all]
    pairproof scan PATH... [--json] [--skip PATH]                             (exit 0 no hits, 1 hits, 2 bad input)

Bad input (an unknown target, not root, a missing kernel feature, an unwritable reports folder) gets
one line naming the problem and the fix, exit code 2, and nothing is changed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
from pathlib import Path

from .errors import SetupError

EXIT_SETUP = 2
EXIT_INTERRUPTED = 130


def _reports_dir(path: Path) -> Path:
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".pairproof-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise SetupError(f"cannot write reports to {path}: {exc.strerror}; choose another with --reports-dir") from exc
    return path


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
    from . import targets

    _image(args)

    targets.load(args.target)  # unknown target: SetupError before anything is touched
    from .profiles import load as load_profile

    profile = load_profile(args.profile)  # a bad profile: SetupError naming the file and field, before anything runs
    problems = targets.preflight(args.target)
    if problems:
        raise SetupError(f"target {args.target!r} cannot run here: " + "; ".join(problems))
    reports = _reports_dir(Path(args.reports_dir))
    import pytest

    from . import cases

    pytest_args = [
        str(Path(cases.__file__).parent),
        "--target", args.target,
        "--profile", str(profile.path),
        "--pairproof-state-dir", args.state_dir,
        "--pairproof-verdict", str(reports / "verdict.json"),
        "--alluredir", str(reports / "allure-results"), "--clean-alluredir",
        "-p", "no:cacheprovider", "-v", "-rfE",
        # the CLI imported the suite's packages before pytest could register them for rewriting
        "-W", "ignore::pytest.PytestAssertRewriteWarning",
    ]
    if args.n:
        # one worker per module, so a case's refusal and controls judge one platform run (DESIGN §5 rule 1)
        pytest_args += ["-n", str(args.n), "--dist", "loadfile"]
    pytest_args += [f"--case={c}" for c in args.case]
    previous = signal.signal(signal.SIGTERM, _terminate_like_interrupt)
    try:
        code = pytest.main(pytest_args + args.pytest_args)
    finally:
        signal.signal(signal.SIGTERM, previous)
    if code == pytest.ExitCode.INTERRUPTED:
        print("pairproof: qualify interrupted: the run's instances were torn down", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(f"pairproof: verdict written to {reports / 'verdict.json'}, Allure results in {reports / 'allure-results'}")
    if (reports / "verdict.json").exists():
        _report(reports)
    return int(code)


def _report(reports: Path) -> None:
    from reports import allure_html, html

    print(f"pairproof: summary page {html.write(reports)}")
    print("pairproof: " + allure_html.build(reports / "allure-results", reports / "allure-report.html"))


def report(args: argparse.Namespace) -> int:
    reports = Path(args.reports_dir)
    if not (reports / "verdict.json").exists():
        raise SetupError(f"no verdict in {reports}: run `pairproof qualify --reports-dir {reports}` first")
    _report(reports)
    return 0


def clean(args: argparse.Namespace) -> int:
    from . import targets

    if os.geteuid() != 0:
        raise SetupError("pairproof clean must run as root (it removes cgroups and instance volumes): run it with sudo")
    targets.load(args.target)  # unknown target: SetupError before anything is touched
    lines = targets.clean(args.target, Path(args.state_dir), include_live=args.all)
    for line in lines:
        print(line)
    from .lab.lab import stale_workdirs

    labs = stale_workdirs()
    for folder in labs:
        shutil.rmtree(folder, ignore_errors=True)
        print(f"removed lab folder {folder} (its sink no longer runs)")
    if not lines and not labs:
        print("nothing to clean")
    return 0


def mutants(args: argparse.Namespace) -> int:
    from mutants import runner
    from mutants.errors import MutantError

    if os.geteuid() != 0:
        raise SetupError("pairproof mutants must run as root (each run starts sandboxes): run it with sudo")
    reports = _reports_dir(Path(args.reports_dir))
    try:
        return runner.run(reports=reports, jobs=args.jobs, only=args.only or None,
                          suite=Path(args.suite).resolve() if args.suite else None, state_dir=args.state_dir)
    except runner.Interrupted:
        print("pairproof: mutants interrupted: every run was stopped, no report written", file=sys.stderr)
        return 130
    except MutantError as exc:
        raise SetupError(str(exc)) from exc


def gate(args: argparse.Namespace) -> int:
    from reports import gate as release_gate

    result = release_gate.judge(Path(args.results), Path(args.mutants) if args.mutants else None)
    for line in result.lines:
        print(line)
    for reason in result.reasons:
        print(f"gate: {reason}")
    print(f"gate: {'PASSED' if result.passed else 'FAILED'}")
    return 0 if result.passed else 1


def check_driver(args: argparse.Namespace) -> int:
    """Build the driver, check the core and every facet it claims with one small real round trip each; print
    facet by facet what works, what is missing and what fails. 0 when the core and every claimed facet work."""
    import secrets as token_source
    import time

    from . import conformance, targets
    from .fixtures import PLATFORM_SECRETS
    from .profiles import load as load_profile

    _image(args)
    factory = targets.load(args.target)  # unknown name, or a module that does not import: SetupError (exit 2)
    if not callable(factory):
        raise SetupError(f"target {args.target!r} names {type(factory).__name__}, not a factory: give module:factory "
                         "where factory(options: TargetOptions) returns the driver")
    problems = targets.preflight(args.target)
    if problems:
        raise SetupError(f"target {args.target!r} cannot run here: " + "; ".join(problems))
    profile = load_profile(args.profile)  # a bad profile: SetupError naming the file and field
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
        results = conformance.run(driver, say)
    finally:
        signal.signal(signal.SIGTERM, previous)
    bad = [r.name for r in results if r.state == "fails" or (r.name == "core" and r.state != "works")]
    unchecked = [r.name for r in results if r.state == "not checked"]
    claimed = [r for r in results if r.state in ("works", "fails") and r.name not in ("core", "close")]
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
    """Scan host paths for canary-shaped tokens with the suite's engine: the static probe when it exists
    (``PAIRPROOF_PROBE`` or build/probe/ppscan), else detect.py; the summary names which."""
    import json
    import subprocess

    from . import probe
    from .errors import ProofError

    missing = [p for p in args.paths if not os.path.lexists(p)]
    if missing:
        raise SetupError(f"no such path: {', '.join(missing)}")
    try:
        binary = probe.probe_binary()
    except ProofError as exc:
        raise SetupError(str(exc)) from None
    if binary is not None:
        command, engine = [str(binary)], f"static probe {binary}"
    else:
        command = [sys.executable, "-I", str(probe.DETECT)]
        engine = f"detect.py (no static probe: {probe.PROBE_ENV} unset, nothing at {probe.PROBE_BUILT})"
    # No "--" (a scanner need not know it): a path that looks like an option is given as ./path.
    command += [*(a for s in args.skip for a in ("--skip", s)), *(f"./{p}" if p.startswith("-") else p for p in args.paths)]
    done = subprocess.run(command, capture_output=True)
    try:
        lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    except ValueError:
        lines = []
    from canaries import detect

    if done.returncode != 0 or not lines or lines[-1].get("end") != detect.END_MARK:
        raise SetupError(f"the scanner ({engine}) failed (rc {done.returncode}) or did not finish its report: "
                         f"{done.stderr.decode(errors='replace')[-300:]}")
    hits, summary = lines[:-1], lines[-1]
    end = summary.pop("end")
    summary = {**summary, "engine": engine, "end": end}
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
    return 1 if hits else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pairproof", description="Qualify personal-agent isolation with paired canaries.")
    sub = parser.add_subparsers(dest="command", required=True)
    q = sub.add_parser("qualify", help="run the suite on a target and write reports/")
    q.add_argument("--target", default="reference", help="target driver (default: reference)")
    q.add_argument("--profile", default="reference", metavar="NAME|PATH",
                   help="agent profile the target runs: a name in acceptance/profiles or a .toml file (default: reference)")
    q.add_argument("--image", default="", metavar="IMAGE",
                   help="the image to qualify (--target docker; default: the reference agent image, built locally)")
    q.add_argument("--reports-dir", default="reports", help="where to write allure-results/ and verdict.json")
    q.add_argument("--state-dir", default="/var/lib/pairproof", help="runtime state folder (reference target)")
    q.add_argument("-n", type=int, default=0, help="run the suite on N processes (pytest-xdist)")
    q.add_argument("--case", action="append", default=[], metavar="ID",
                   help="run only this catalogue case, with its controls (repeatable)")
    q.add_argument("pytest_args", nargs="*", help="extra pytest arguments, after --")
    q.set_defaults(func=qualify)
    m = sub.add_parser("mutants", help="run the suite against every mutant of the runtime; write the kill matrix")
    m.add_argument("--reports-dir", default="reports", help="where to write mutants.json and mutants.txt")
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
    d = sub.add_parser("check-driver", help="conformance run of a driver (seconds, not the suite): the core and each "
                                            "facet it claims, one real round trip each; says what works, is missing, fails")
    d.add_argument("target", help="a registered target name (e.g. reference) or module:factory")
    d.add_argument("--profile", default="reference", metavar="NAME|PATH",
                   help="agent profile the driver runs, as `qualify --profile` gives it (default: reference)")
    d.add_argument("--state-dir", default="/var/lib/pairproof", help="state folder handed to the driver (options.state_dir)")
    d.add_argument("--image", default="", metavar="IMAGE", help="the image to qualify (--target docker)")
    d.set_defaults(func=check_driver)
    c = sub.add_parser("clean", help="remove what killed runs left: processes, cgroups, volumes, uid claims")
    c.add_argument("--target", default="reference", help="whose leftovers (its driver's clean hook; default: reference)")
    c.add_argument("--state-dir", default="/var/lib/pairproof")
    c.add_argument("--all", action="store_true", help="also remove runs whose owner process is still alive")
    c.set_defaults(func=clean)
    s = sub.add_parser("scan", help="scan host paths for canary-shaped tokens with the suite's engine "
                                     "(exit 0 no hits, 1 hits, 2 bad input)")
    s.add_argument("paths", nargs="+", metavar="PATH", help="a file or directory to scan")
    s.add_argument("--json", action="store_true", help="one JSON object per hit, then the completeness record")
    s.add_argument("--skip", action="append", default=[], metavar="PATH", help="do not enter PATH (repeatable)")
    s.set_defaults(func=scan)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except SetupError as exc:
        print(f"pairproof: {exc}", file=sys.stderr)
        return EXIT_SETUP
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
