"""``pairproof measure``: one instance's memory (idle, active, from its cgroup), its broker's and its disk,
beside the capacity budget in force and a budget generated from the figures (the target's measure hook)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from acceptance.cli.common import Subcommands
from acceptance.errors import SetupError


def add_parser(sub: Subcommands) -> None:
    me = sub.add_parser("measure", help="one instance's memory (idle, active, from its cgroup), its broker's and its "
                                         "disk, beside the capacity budget and a budget generated from them")
    me.add_argument("--target", default="reference", help="whose instances (its driver's measure hook; default: reference)")
    me.add_argument("--state-dir", default="/var/lib/pairproof")
    me.add_argument("--turns", type=int, default=3, help="turns the active figure is the peak over (default 3)")
    me.add_argument("--json", action="store_true", help="footprint_mb, budget_in_force, measured_budget as JSON")
    me.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
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
