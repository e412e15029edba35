"""``pairproof check-driver``: a driver's conformance run (seconds, not the suite).

The core and each facet the driver claims get one small real round trip (``acceptance/contract/
conformance.py``); the command prints facet by facet what works, what is missing and what fails.
"""

from __future__ import annotations

import argparse
import signal
from pathlib import Path

from acceptance.cli.common import Subcommands, image, terminate_like_interrupt
from acceptance.errors import SetupError


def add_parser(sub: Subcommands) -> None:
    d = sub.add_parser("check-driver", help="conformance run of a driver (seconds, not the suite): the core and each "
                                            "facet it claims, one real round trip each; says what works, is missing, fails")
    d.add_argument("target", help="a registered target name (e.g. reference) or module:factory")
    d.add_argument("--profile", default=None, metavar="NAME|PATH",
                   help="agent profile the driver runs, as `qualify --profile` gives it (default: the target's own)")
    d.add_argument("--state-dir", default="/var/lib/pairproof", help="state folder handed to the driver (options.state_dir)")
    d.add_argument("--image", default="", metavar="IMAGE", help="the image to qualify (--target docker)")
    d.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Build the driver, check the core and every facet it claims with one small real round trip each; print
    facet by facet what works, what is missing and what fails. 0 when the core and every claimed facet work."""
    import secrets as token_source
    import time

    from acceptance import targets
    from acceptance.contract import conformance
    from acceptance.harness.fixtures import PLATFORM_SECRETS
    from acceptance.targets.profiles import load as load_profile

    image(args)
    factory = targets.load(args.target)  # unknown name, or a module that does not import: SetupError (exit 2)
    if not callable(factory):
        raise SetupError(f"target {args.target!r} names {type(factory).__name__}, not a factory: give module:factory "
                         "where factory(options: TargetOptions) returns the driver")
    problems = targets.preflight(args.target)
    if problems:
        raise SetupError(f"target {args.target!r} cannot run here: " + "; ".join(problems))
    profile = load_profile(args.profile or targets.default_profile(args.target))  # bad: SetupError naming the field
    from acceptance.cli import inputs

    inputs.state_dir(args.state_dir)
    inputs.environment()
    run_id = f"check{token_source.token_hex(3)}"
    options = targets.TargetOptions(run=run_id, state_dir=Path(args.state_dir), profile=profile,
                                    secrets={env: f"pp-check-{code}-{token_source.token_hex(8)}"
                                             for env, code in PLATFORM_SECRETS.items()})
    start = time.monotonic()
    print(f"pairproof check-driver {args.target} (run {run_id})")
    try:
        driver = factory(options)
    except SetupError:  # the driver refuses this machine or profile: one line naming the fix, exit 2
        raise
    except Exception as exc:
        print(f"  {'core':32} FAILS    building the driver: {type(exc).__name__}: {exc}")
        print("check-driver: FAILED (the driver could not be built)")
        return 1

    def say(result: conformance.Result) -> None:
        print(f"  {result.name:32} {result.state.upper() if result.state == 'fails' else result.state:8} "
              f"{result.detail}" + (f" ({result.seconds:.2f} s)" if result.seconds else ""))
    previous = signal.signal(signal.SIGTERM, terminate_like_interrupt)  # teardown runs as on Ctrl-C
    try:
        results = conformance.run(driver, say, start_command=profile.process)
    finally:
        signal.signal(signal.SIGTERM, previous)
    bad = [r.name for r in results if r.state == "fails" or (r.name == "core" and r.state != "works")]
    unchecked = [r.name for r in results if r.state == "not checked"]
    claimed = [r for r in results if r.state in ("works", "fails") and r.name in conformance.FACETS]
    missing = [r.name for r in results if r.state == "missing" and r.name != "core"]
    verdict = "PASSED" if not bad and not unchecked else "FAILED"
    core = "works" if "core" not in bad else "does not work"
    print(f"check-driver: {verdict} in {time.monotonic() - start:.1f} s: core {core}, "
          + (f"{len(unchecked)} claimed facets not checked" if unchecked else
             f"{sum(r.state == 'works' for r in claimed)} of {len(claimed)} claimed facets work")
          + (f"; fails: {', '.join(bad)}" if bad else "")
          + (f"; missing (cases needing them will be not covered): {', '.join(missing)}" if missing else ""))
    return 0 if verdict == "PASSED" else 1
