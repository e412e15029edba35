"""``pairproof expect``: compare a verdict with a checked-in expectation of the cases that must fail.

For a target qualified to show its failures (hermes-unguarded): 0 exactly as expected, 1 not.
``qualify --expected`` judges its own verdict with the same ``load_expectation`` and ``compare``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from acceptance.cli.common import EXIT_FAILED, Subcommands
from acceptance.errors import SetupError


def add_parser(sub: Subcommands) -> None:
    e = sub.add_parser("expect", help="compare a verdict with a checked-in expectation of the cases that must fail "
                                      "(a target qualified to show its failures): 0 exactly as expected, 1 not")
    e.add_argument("--expected", required=True, metavar="FILE",
                   help="the expectation, e.g. acceptance/targets/expectations/hermes-unguarded.toml")
    e.add_argument("--results", default="reports", help="folder with verdict.json and allure-results/")
    e.add_argument("--profile", default=None, metavar="NAME|PATH",
                   help="the agent profile the verdict must be of (default: the expectation's target's own)")
    e.set_defaults(func=run)


def load_expectation(value: str | None):
    """The expectation ``--expected`` names, checked (bad input: SetupError, one line)."""
    from reports import expectation

    try:
        return expectation.load(value)
    except expectation.ExpectationError as exc:
        raise SetupError(str(exc)) from None


def compare(results: Path, expected, profile: str | None = None, image: str = "") -> int:
    """Print the verdict in ``results`` against ``expected``, case by case: 0 exactly as expected, else 1. The
    verdict must be of this source, the expectation's target and ``profile`` (``image``), hash for hash, as the
    gate requires (``pairproof gate``'s ``expected_identity``)."""
    from acceptance.cli.gate import expected_identity
    from reports import expectation, reportset

    judged = expected_identity(argparse.Namespace(target=expected.target, profile=profile, image=image))
    with reportset.reading(results) as published:
        try:
            result = expectation.judge(published or results, expected, judged=judged)
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


def run(args: argparse.Namespace) -> int:
    from acceptance.cli import inputs

    results = inputs.existing_folder(args.results, "--results", "a qualification wrote (verdict.json, "
                                     "allure-results/), e.g. reports/hermes-unguarded")
    return compare(results, load_expectation(args.expected), args.profile)
