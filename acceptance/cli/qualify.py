"""``pairproof qualify``: run the suite on a target and publish its report set.

Every input is checked first (``inputs.py``), then the suite runs under pytest into a staged report set that
``reports/reportset.py`` publishes in one rename only when the run ends with a verdict; with ``--expected``
the verdict is then judged as ``pairproof expect`` judges it.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from acceptance.cli import common
from acceptance.cli.common import EXIT_FAILED, EXIT_INTERRUPTED, Subcommands, image, terminate_like_interrupt
from acceptance.errors import SetupError


def add_parser(sub: Subcommands) -> None:
    q = sub.add_parser("qualify", help="run the suite on a target and write reports/")
    q.add_argument("--target", default="reference", help="target driver (default: reference)")
    q.add_argument("--profile", default=None, metavar="NAME|PATH",
                   help="agent profile the target runs: a name in acceptance/targets/profiles or a .toml file (default: the "
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
    q.add_argument("--budget", type=float, default=DEFAULT_BUDGET, metavar="SECONDS",
                   help=f"the most the run may take (default {DEFAULT_BUDGET:.0f}): past it the run is stopped as Ctrl-C "
                        "stops it (its instances torn down) and qualify exits 1 with no verdict, never hangs (0: none)")
    q.add_argument("pytest_args", nargs="*", help="extra pytest arguments, after --")
    q.set_defaults(func=run)


# A release gate must get an answer: a target that holds a run open (an agent answering a byte at a time, a probe
# that never ends) stops the run at its budget. Past it, the teardown is interrupted again every BUDGET_GRACE
# seconds until it ends.
DEFAULT_BUDGET = 7200.0
BUDGET_GRACE = 120.0


class _Budget:
    """The run's budget as a timer (SIGALRM): when it fires, an interrupt like Ctrl-C's, recorded as the budget's."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.spent = seconds, False

    def __enter__(self) -> _Budget:
        self.previous = signal.signal(signal.SIGALRM, self._fired)
        if self.seconds > 0:
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def _fired(self, signum: int, frame: object) -> None:
        if not self.spent:
            print(f"pairproof: qualify passed its budget of {self.seconds:g}s: stopping the run", file=sys.stderr)
        self.spent = True
        signal.setitimer(signal.ITIMER_REAL, BUDGET_GRACE)  # a teardown that does not end is interrupted again
        common.interrupt_recorded(signum, frame)

    def __exit__(self, *exc: object) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self.previous)


def _run_end():
    """A plugin that learns what pytest.main's exit code does not tell apart: a Ctrl-C/SIGTERM, or a stop by
    ``pytest.exit`` or by a worker that could not build the target (and why). (Built here: pytest is imported
    only when a run starts.)"""
    import pytest

    class RunEnd:
        interrupted = False
        stopped = ""
        received = len(common.RECEIVED)  # the interrupts before the run
        session = None

        def pytest_sessionstart(self, session) -> None:
            self.session = session

        def pytest_runtest_logreport(self, report) -> None:
            # An interrupt a test swallowed (hypothesis turns it into a failure of its own): the run stops at the
            # next test, as pytest stops on Ctrl-C, instead of judging the rest of the suite.
            if len(common.RECEIVED) > self.received and self.session is not None:
                self.session.shouldstop = "interrupted (SIGINT or SIGTERM)"

        def pytest_keyboard_interrupt(self, excinfo) -> None:
            if isinstance(excinfo.value, KeyboardInterrupt):
                self.interrupted = True
            else:
                self.stopped = str(getattr(excinfo.value, "msg", excinfo.value))

        @pytest.hookimpl(optionalhook=True)
        def pytest_testnodedown(self, node, error) -> None:
            self.stopped = getattr(node, "workeroutput", {}).get("pairproof_unbuildable", "") or self.stopped

    return RunEnd()


def run(args: argparse.Namespace) -> int:
    from acceptance import targets
    from acceptance.cli import inputs
    from acceptance.cli.expect import compare, load_expectation

    inputs.positive(args.n, "-n", zero=True)
    if not args.budget >= 0:  # (NaN too)
        raise SetupError(f"--budget {args.budget:g}: must be a number of seconds, 0 or more (0: no budget)")
    inputs.case_ids(args.case)
    image(args)
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
    expected = load_expectation(args.expected) if args.expected else None
    if expected is not None and expected.target != args.target:
        raise SetupError(f"--expected {args.expected} describes target {expected.target!r}, not --target "
                         f"{args.target}: give the expectation of the target qualified")
    import pytest

    from acceptance import cases
    from acceptance.cli.report import build_pages
    from reports import reportset

    suite = [
        str(Path(cases.__file__).parent),
        # conftest files only from the suite's own package, whose every file the verdict's hash names (a
        # conftest.py above it, in a checkout or a CI workspace, would run unnamed)
        "--confcutdir", str(Path(cases.__file__).parents[1]),
        "--target", args.target,
        "--profile", str(profile.path),
        "--pairproof-state-dir", args.state_dir,
        "-p", "no:cacheprovider", "-p", "no:benchmark",  # (pytest-benchmark makes .benchmarks/ where it runs)
        # the CLI imported the suite's packages before pytest could register them for rewriting
        "-W", "ignore::pytest.PytestAssertRewriteWarning",
        # a failed assertion whole, not pytest's first 8 lines: the verdict keeps it (``assertion``) for `expect`
        "-o", "truncation_limit_lines=0", "-o", "truncation_limit_chars=0",
        *(f"--case={c}" for c in args.case),
    ]
    inputs.pytest_args(suite, args.pytest_args)  # pytest's own usage check and a dry collection, nothing written
    targets.pin_image(args.target)  # docker: the image by its id for the whole run (and its verdict)
    existed = inputs.nearest_existing(reports)
    try:
        claim = reportset.hold(reports)  # one run per reports folder: a second one is refused here, not published
    except reportset.Busy as exc:
        inputs.unmake(reports, existed)
        raise SetupError(str(exc)) from None
    staged = reportset.stage(reports)
    pytest_args = [*suite, "--pairproof-verdict", str(staged / "verdict.json"),
                   "--alluredir", str(staged / "allure-results"), "-v", "-rfE"]
    if args.n:
        # one worker per module, so a case's refusal and controls judge one platform run (DESIGN §5 rule 1)
        pytest_args += ["-n", str(args.n), "--dist", "loadfile"]
    end = _run_end()
    published = False
    previous = signal.signal(signal.SIGTERM, terminate_like_interrupt)
    previous_int = signal.signal(signal.SIGINT, common.interrupt_recorded)
    received = end.received
    budget = _Budget(args.budget)
    try:
        with budget:
            code = pytest.main(pytest_args + args.pytest_args, plugins=[end])
        if budget.spent:
            print(f"pairproof: qualify ended without a verdict: the run passed its budget of {args.budget:g}s and was "
                  f"stopped (its instances torn down); the reports in {reports} are left as they were", file=sys.stderr)
            return EXIT_FAILED
        # (an interrupt pytest did not see as one, swallowed on the way: still an interrupt, and nothing published)
        if end.interrupted or len(common.RECEIVED) > received:
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
        build_pages(staged, reports)
        if len(common.RECEIVED) > received:  # one that came while the pages were built: nothing published
            print(f"pairproof: qualify interrupted: the reports in {reports} are left as they were", file=sys.stderr)
            return EXIT_INTERRUPTED
        if not reportset.still_held(reports, claim):
            print(f"pairproof: {reports} was removed or replaced while the run went on (another run may hold the "
                  "folder there now): nothing published; qualify again into a folder nobody else touches",
                  file=sys.stderr)
            return EXIT_FAILED
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
        signal.signal(signal.SIGINT, previous_int)
        if not published:
            reportset.discard(staged)
            inputs.unmake(reports, existed)
            os.close(claim)
    try:
        print(f"pairproof: verdict written to {reports / 'verdict.json'}, Allure results in "
              f"{reports / 'allure-results'}, summary page {reports / 'summary.html'}")
        if expected is not None:  # (still holding the folder: the verdict compared is the one just published)
            return compare(reports, expected, args.profile, args.image)
        return int(code)
    finally:
        os.close(claim)


def _out_of_space(exc: BaseException) -> OSError | None:
    """The disk-full (or over-quota) error in ``exc`` or in the group it is, else None."""
    import errno

    if isinstance(exc, OSError):
        return exc if exc.errno in (errno.ENOSPC, errno.EDQUOT) else None
    if isinstance(exc, BaseExceptionGroup):
        return next((found for inner in exc.exceptions if (found := _out_of_space(inner)) is not None), None)
    return None
