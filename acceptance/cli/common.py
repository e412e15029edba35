"""What several ``pairproof`` commands share: the exit codes, SIGTERM as an interrupt, ``--image``, and the
shape of the ``sub`` every command module's ``add_parser`` adds itself to.

Light at import time (the standard library, ``acceptance.errors`` and ``acceptance.harness.interrupts``):
``pairproof --help`` imports every command module.
"""

from __future__ import annotations

import argparse
import os
import signal
from typing import Any, Protocol

from acceptance.errors import SetupError
from acceptance.harness import interrupts

EXIT_FAILED = 1
EXIT_SETUP = 2
EXIT_INTERRUPTED = 130
EXIT_CODES = """exit codes (every command):
  0    passed (gate: the evidence proves the catalogue; scan: no hits; clean, report: done)
  1    a case failed or is broken, or the run ended without a verdict (gate: refused; scan: hits;
       check-driver: the core or a claimed facet fails; mutants: a mutant survived)
  2    bad input or a machine that cannot run it: one line on stderr names the input and the fix,
       and nothing was changed (the last good reports are intact)
  130  interrupted (SIGINT or SIGTERM): instances torn down, the previous reports left as they were"""


class Subcommands(Protocol):
    """What ``ArgumentParser.add_subparsers()`` returns, as a command module uses it (argparse's class for it
    is private)."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser: ...


# The interrupts (SIGINT, SIGTERM) this process received, in order: a KeyboardInterrupt can be swallowed on its
# way up (hypothesis, interrupted inside a property test, turns it into its own AssertionError and the run goes
# on), so a command asks this list, not only pytest, whether it was interrupted. The harness's list (the plugin
# asks it too, and judges nothing after an interrupt).
RECEIVED = interrupts.RECEIVED


def terminate_like_interrupt(signum: int, frame: object) -> None:
    """SIGTERM (how CI systems and `timeout` cancel a job) tears the run down as Ctrl-C does: pytest
    runs every fixture's finalizer on KeyboardInterrupt. A second SIGTERM must not cut that teardown
    short, so it is ignored from here on (SIGKILL stays the last resort, and `pairproof clean` after it)."""
    RECEIVED.append(signum)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def interrupt_recorded(signum: int, frame: object) -> None:
    """SIGINT as Python's own handler takes it (a KeyboardInterrupt), recorded in ``RECEIVED`` first."""
    RECEIVED.append(signum)
    raise KeyboardInterrupt


def image(args: argparse.Namespace) -> None:
    """``--image`` reaches the docker driver as ``PAIRPROOF_IMAGE`` (in this process and every pytest worker)."""
    if args.image:
        if args.target != "docker":
            raise SetupError(f"--image names an image to qualify under Docker: use it with --target docker, not "
                             f"--target {args.target}")
        os.environ["PAIRPROOF_IMAGE"] = args.image
