"""``pairproof findings``: the design note's findings about hermes-agent, written from the verdicts and
evidence of a hermes and a hermes-unguarded run (``reports/findings.py``), never by hand."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from acceptance.cli.common import Subcommands
from acceptance.errors import SetupError


def add_parser(sub: Subcommands) -> None:
    fi = sub.add_parser("findings", help="write the design note's findings about hermes-agent from a hermes and a "
                                         "hermes-unguarded run (their verdicts and evidence), never by hand")
    fi.add_argument("--results", action="append", required=True, metavar="DIR",
                    help="a results folder of a hermes or hermes-unguarded run (repeatable: one per target)")
    fi.add_argument("--out", required=True, metavar="FILE", help="the document, e.g. docs/findings/hermes-agent-0.19.0.md")
    fi.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
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
