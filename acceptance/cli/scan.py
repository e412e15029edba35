"""``pairproof scan``: scan host paths for canary-shaped tokens with the suite's engine.

Exit 0 when nothing was found and everything named was read whole, 1 on a hit or a scan that missed part of
what it was given, 2 on bad input.
"""

from __future__ import annotations

import argparse
import os
import sys

from acceptance.cli.common import Subcommands
from acceptance.errors import SetupError


def add_parser(sub: Subcommands) -> None:
    s = sub.add_parser("scan", help="scan host paths for one run's canaries with the suite's engine "
                                     "(exit 0 no hits and all read, 1 hits or not all read, 2 bad input)")
    s.add_argument("paths", nargs="+", metavar="PATH", help="a file or directory to scan")
    s.add_argument("--run", required=True, help="the run whose canaries are looked for: 8 lowercase hex, one of "
                   "a qualification's verdict.json \"canaries\" (one a worker); its tokens are UUIDs whose first "
                   "group it is")
    s.add_argument("--json", action="store_true", help="one JSON object per hit, then the completeness record")
    s.add_argument("--skip", action="append", default=[], metavar="PATH", help="do not enter PATH (repeatable)")
    s.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Scan host paths for canary-shaped tokens with the suite's engine (``hostscan``, as the host-side scans of
    the cases): the static probe when it exists (``PAIRPROOF_PROBE`` or build/probe/ppscan), else detect.py;
    the summary names which."""
    import json

    from acceptance.errors import ProofError
    from acceptance.harness import hostscan
    from canaries import detect

    if not detect.RUN_ID.fullmatch(args.run):
        raise SetupError(f"--run {args.run!r} is not a run id: give 8 lowercase hex characters (one of verdict.json's "
                         "\"canaries\", e.g. a3f09c1e)")
    missing = [p for p in args.paths if not os.path.lexists(p)]
    if missing:
        raise SetupError(f"no such path: {', '.join(map(repr, missing))}; give files or folders that exist")
    detect.use_run(args.run)
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
