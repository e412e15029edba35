"""The interrupts (SIGINT, SIGTERM) this process received, in order.

An interrupt's effects are no finding: a process that died of it, or a call it cut short, comes back to the
code under it as an error of its own (a target error, a proof that did not finish), and a KeyboardInterrupt can
be swallowed on its way up (hypothesis, interrupted inside a property test, turns it into its own
AssertionError). So whoever judges a test asks this list, not only pytest, whether the run was interrupted:
the plugin then judges nothing more and writes no verdict, and ``pairproof qualify`` exits 130 publishing
nothing. Standard library only: ``pairproof --help`` imports the CLI's handlers, which record here.
"""

from __future__ import annotations

import signal

RECEIVED: list[int] = []


def recorded(signum: int, frame: object) -> None:
    """SIGINT as Python's own handler takes it (a KeyboardInterrupt), recorded in ``RECEIVED`` first."""
    RECEIVED.append(signum)
    raise KeyboardInterrupt


def record_sigint() -> object | None:
    """Record SIGINT here when nothing else does (a plain ``pytest`` run: Python's default handler is in place),
    and return the handler it replaced, to put back; None when it left the handler alone (``pairproof qualify``
    installs its own, which records too; a thread other than the main one cannot set one)."""
    import threading

    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return None
    return signal.signal(signal.SIGINT, recorded)
