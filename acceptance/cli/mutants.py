"""``pairproof mutants``: run the suite against every mutant of a target's runtime and write the kill matrix.

The catalogue (``mutants/catalogue.toml``, ``mutants/docker.toml``) and ``--only`` are checked here; the
runs themselves are ``mutants/runner.py``'s.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from acceptance.cli.common import Subcommands, image
from acceptance.errors import SetupError


def add_parser(sub: Subcommands) -> None:
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
    m.add_argument("--control-results", default=None, metavar="DIR",
                   help="take the unmodified control from this qualification of the same target (e.g. reports) "
                        "instead of running the whole suite again: only if it passes `pairproof gate` whole on this "
                        "very source and image")
    m.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
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
    image(args)
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
    control_results = None
    if args.control_results is not None:
        control_results = inputs.existing_folder(args.control_results, "--control-results",
                                                 "a qualification of the same target wrote (verdict.json, allure-results/)")
    inputs.state_dir(args.state_dir)
    reports = inputs.reports_dir(args.reports_dir)
    inputs.outside_state(reports, args.state_dir)
    inputs.environment()
    reports.mkdir(parents=True, exist_ok=True)
    try:
        return runner.run(reports=reports, jobs=args.jobs, only=args.only or None,
                          suite=Path(args.suite).resolve() if args.suite else None, state_dir=args.state_dir,
                          target=args.target, image=args.image,
                          control=(lambda source: control_from(control_results, args.target, source))
                          if control_results is not None else None,
                          control_from=str(control_results or ""))
    except runner.Interrupted:
        print("pairproof: mutants interrupted: every run was stopped, no report written", file=sys.stderr)
        return 130
    except MutantError as exc:
        raise SetupError(str(exc)) from exc


def control_from(results: Path, target: str, source: dict[str, str]):
    """The unmodified control taken from a qualification already made (``--control-results``): its verdict must
    pass the release gate whole (every case, its controls, its Allure results) for ``target`` on this very source
    (``reports/identity.py``: runtime, suite, catalogue, driver, profile, probe and image, hash for hash, the runtime
    and suite also those of the copy the mutants are made from). Then running the whole suite unmodified a second
    time would only repeat it; anything short of that is a MutantError, and the control is run instead by leaving
    the option out."""
    import json

    from mutants.errors import MutantError
    from mutants.runner import SuiteRun
    from reports import gate, identity, reportset

    with reportset.reading(results) as published:
        folder = published or results
        judged = gate.judge(folder, None, judged=identity.recompute(target))
        verdict = json.loads((folder / "verdict.json").read_text()) if (folder / "verdict.json").is_file() else {}
    if not judged.passed:
        raise MutantError(f"--control-results {results}: that qualification cannot stand for the control: "
                          f"{judged.reasons[0]}; qualify again, or leave --control-results out to run the control")
    named = verdict.get("judged") or {}
    differ = [part for part in ("runtime", "suite") if named.get(part) != source.get(part)]
    if differ:
        raise MutantError(f"--control-results {results}: its verdict judged another {' and '.join(differ)} than the "
                          "copy the mutants are made from; qualify again from this source")
    statuses = {c["id"]: c["status"] for c in verdict["cases"]}
    return SuiteRun(0, 0.0, [], statuses, f"taken from the qualification {verdict['run']} in {results}")
