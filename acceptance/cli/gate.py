"""``pairproof gate``: exit 0 only if a run's results prove the whole catalogue (and the mutants, if given).

It judges the evidence again (``reports/gate.py``), trusting no status a report gives itself.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from acceptance.cli.common import Subcommands, image


def add_parser(sub: Subcommands) -> None:
    g = sub.add_parser("gate", help="exit 0 only if the results prove the whole catalogue (and the mutants, if given); "
                                    "it judges the evidence again, trusting no status a report gives itself")
    g.add_argument("--results", default="reports",
                   help="folder with verdict.json and the run's allure-results/ (default: reports)")
    g.add_argument("--target", required=True,
                   help="the target the results must be of (reference, docker, hermes, ...): the verdict's runtime, "
                        "suite, catalogue, driver, profile and image hashes must be this source's and this target's")
    g.add_argument("--profile", default=None, metavar="NAME|PATH",
                   help="the agent profile the results must be of (default: the target's own, as for qualify)")
    g.add_argument("--image", default="", metavar="IMAGE",
                   help="the image the results must be of (--target docker; default: the reference agent image of "
                        "this source, which must be in the local engine)")
    g.add_argument("--mutants", help="also require this mutant report (reports/mutants.json): a whole run on this "
                                     "source, every catalogued mutant killed by one of its named cases")
    g.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from acceptance.cli import inputs
    from reports import gate as release_gate
    from reports import reportset

    results = inputs.existing_folder(args.results, "--results", "a qualification wrote (verdict.json, "
                                     "allure-results/), e.g. reports")
    if args.mutants is not None:
        inputs.json_file(args.mutants, "--mutants", "the mutant report `pairproof mutants` wrote (reports/mutants.json)")
    # The published set's own folder, read whole and kept published while it is read: a run publishing
    # meanwhile can neither mix two sets under the gate nor sweep the one it reads.
    judged = expected_identity(args)
    with reportset.reading(results) as published:
        result = release_gate.judge(published or results, Path(args.mutants) if args.mutants else None,
                                    judged=judged)
    for line in result.lines:
        print(line)
    for reason in result.reasons:
        print(f"gate: {reason}")
    print(f"gate: {'PASSED' if result.passed else 'FAILED'}")
    return 0 if result.passed else 1


def expected_identity(args: argparse.Namespace) -> dict:
    """What a verdict of ``--target`` (``--profile``, ``--image``) made from this source hashes to: the gate's
    ``judged`` (``reports/identity.py``). A bad target, profile or image is a SetupError naming it."""
    from reports import identity

    image(args)  # --image: only with --target docker; it reaches the driver's image_id() as for qualify
    return identity.recompute(args.target, args.profile)
