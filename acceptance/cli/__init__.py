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

One module per command (``qualify.py`` ... ``scan.py``), each with ``add_parser(sub)`` (its arguments) and
``run(args) -> int``; what several share is in ``common.py`` (and ``qualify`` builds its pages with
``report.build_pages`` and judges ``--expected`` with ``expect.compare``). This module only assembles the
parser and runs the command: a ``SetupError`` becomes one line and exit 2, SIGINT and SIGTERM exit 130. Each command imports
what it needs inside ``run``, so ``pairproof --help`` starts no runtime.
"""

from __future__ import annotations

import argparse
import signal
import sys

from acceptance.cli import check_driver, clean, expect, findings, gate, measure, mutants, qualify, report, scan
from acceptance.cli.common import EXIT_CODES, EXIT_INTERRUPTED, EXIT_SETUP, terminate_like_interrupt
from acceptance.errors import SetupError

COMMANDS = (qualify, mutants, report, gate, expect, findings, check_driver, clean, measure, scan)  # --help's order


class _Parser(argparse.ArgumentParser):
    """argparse's own usage errors, as one line and exit 2 like every other bad input."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"pairproof: {message} (see `{self.prog} --help`)\n")
        sys.exit(EXIT_SETUP)


def build_parser() -> argparse.ArgumentParser:
    """The whole command line, every command's arguments: parsing with it runs nothing (the README's test
    checks each command it shows against it)."""
    parser = _Parser(prog="pairproof", description="Qualify personal-agent isolation with paired canaries.",
                     epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    for command in sub.choices.values():  # every command, those added later included, documents the same codes
        command.epilog, command.formatter_class = EXIT_CODES, argparse.RawDescriptionHelpFormatter
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # SIGTERM while inputs are checked (or a gate or report runs) is an interrupt too: 130, not death by signal.
    import threading

    main_thread = threading.current_thread() is threading.main_thread()  # (only there can a handler be set)
    previous = signal.signal(signal.SIGTERM, terminate_like_interrupt) if main_thread else None
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


def entry() -> None:
    """The ``pairproof`` command (and ``python -m acceptance.cli``): ``main``, then the process ends with its
    code. After an interrupt the run is torn down and has said so: no later signal (one arrived while the
    interpreter shut down, and the process ended by SIGINT, not 130) changes how it ended."""
    code = main()
    if code == EXIT_INTERRUPTED:
        # Ignored, not handled: the interpreter's shutdown resets a handler to the default (death by the
        # signal) but leaves an ignored signal ignored.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.exit(code)
