"""``pairproof clean``: remove what killed runs left (processes, cgroups, volumes, uid claims, lab folders).

The target's driver does its own part (its clean hook); the lab folders whose sink no longer runs are
removed here.
"""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

from acceptance.cli.common import Subcommands
from acceptance.errors import SetupError


def add_parser(sub: Subcommands) -> None:
    c = sub.add_parser("clean", help="remove what killed runs left: processes, cgroups, volumes, uid claims")
    c.add_argument("--target", default="reference", help="whose leftovers (its driver's clean hook; default: reference)")
    c.add_argument("--state-dir", default="/var/lib/pairproof")
    c.add_argument("--all", action="store_true", help="also remove runs whose owner process is still alive")
    c.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from acceptance import targets

    if os.geteuid() != 0:
        raise SetupError("pairproof clean must run as root (it removes cgroups and instance volumes): run it with sudo")
    targets.load(args.target)  # unknown target: SetupError before anything is touched
    state = Path(args.state_dir)
    if str(state).strip() == "" or (os.path.lexists(state) and not state.is_dir()):
        raise SetupError(f"--state-dir {str(state)!r}: not a folder; give the state folder the runs used "
                         "(qualify --state-dir; default /var/lib/pairproof)")
    lines = targets.clean(args.target, Path(args.state_dir), include_live=args.all)
    for line in lines:
        print(line)
    from acceptance.harness.lab.lab import stale_workdirs

    labs = stale_workdirs()
    for folder in labs:
        shutil.rmtree(folder, ignore_errors=True)
        print(f"removed lab folder {folder} (its sink no longer runs)")
    if not lines and not labs:
        print("nothing to clean")
    return 0
