"""``pairproof report``: rebuild a published report set's two HTML pages (the summary and Allure's report).

The pages are built into a copy of the set, published over it in one rename (``reports/reportset.py``);
``qualify`` builds its pages with the same ``build_pages``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from acceptance.cli.common import EXIT_FAILED, Subcommands
from acceptance.errors import SetupError


def add_parser(sub: Subcommands) -> None:
    r = sub.add_parser("report", help="rebuild reports/summary.html and reports/allure-report.html")
    r.add_argument("--reports-dir", default="reports")
    r.set_defaults(func=run)


def build_pages(staged: Path, reports: Path) -> None:
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


def run(args: argparse.Namespace) -> int:
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
        build_pages(staged, reports)
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
