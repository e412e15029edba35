"""The fast tier: tests that need no root, start no process and take well under a second each.

The tier is kept fast by a rule, not by a clock: while any test here runs (its setup, call and teardown, so
fixtures of every scope count), starting a process fails, naming the test and where it belongs
(``tests/integration``). A process is what makes a test slow or root-bound here: a sandbox, ``unshare``,
``setpriv``, the static probe, the CLI as a subprocess, a pytester run. Times are reported, not asserted: the
session's summary lists any test of this tier over ``SLOW`` seconds (a busy machine must not fail a test).
"""

from __future__ import annotations

import _posixsubprocess
import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SLOW = 1.0  # seconds a unit test may take (setup, call and teardown together): reported above it
MOVE = "move it to tests/integration"

# Every way the standard library starts a process ends in one of these: subprocess.Popen (run, check_output,
# asyncio's and os.popen's processes) execs through Popen._execute_child; os.spawn*, pty.fork and
# multiprocessing's fork start through os.fork / os.forkpty; multiprocessing's spawn and forkserver through
# _posixsubprocess.fork_exec; os.system and os.exec* directly.
_OS_CALLS = ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system",
             "execv", "execve", "execl", "execle", "execlp", "execlpe", "execvp", "execvpe")


def _in_tier(path: Path) -> bool:
    return HERE in path.resolve().parents


class ProcessInUnitTest(RuntimeError):
    """A unit test started a process: the tier's rule (this module's docstring) says it belongs elsewhere."""


@contextlib.contextmanager
def no_processes(test: str) -> Iterator[None]:
    """Within: starting a process raises ProcessInUnitTest naming ``test``; everything is restored after."""
    def refuse(what: str):
        def refused(*args, **kwargs):
            raise ProcessInUnitTest(f"{test} starts a process ({what}): tests/unit starts none (no root, no subprocess, "
                                    f"under {SLOW:g} s each): {MOVE}")
        return refused

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(subprocess.Popen, "_execute_child", refuse("subprocess.Popen"))
        patch.setattr(_posixsubprocess, "fork_exec", refuse("_posixsubprocess.fork_exec"))
        for name in _OS_CALLS:
            if hasattr(os, name):
                patch.setattr(os, name, refuse(f"os.{name}"))
        yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    if item.get_closest_marker("slow"):
        pytest.fail(f"{item.nodeid} is marked slow: tests/unit holds fast tests only: {MOVE}", pytrace=False)
    with no_processes(item.nodeid):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    with no_processes(item.nodeid):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    with no_processes(item.nodeid):
        return (yield)


@pytest.fixture
def pytester(request: pytest.FixtureRequest):
    """Refused here: a pytester run is a whole pytest session (often a subprocess), seconds, not milliseconds."""
    pytest.fail(f"{request.node.nodeid} uses pytester: tests/unit runs no pytest session of its own: {MOVE}", pytrace=False)


@pytest.fixture
def testdir(request: pytest.FixtureRequest):
    """pytester's older name, refused alike."""
    pytest.fail(f"{request.node.nodeid} uses testdir: tests/unit runs no pytest session of its own: {MOVE}", pytrace=False)


_durations: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.nodeid.startswith("tests/unit/") or _in_tier(Path(report.fspath)):
        _durations[report.nodeid] = _durations.get(report.nodeid, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    slow = sorted(((d, n) for n, d in _durations.items() if d > SLOW), reverse=True)
    if slow:
        terminalreporter.write_sep("=", f"tests/unit over {SLOW:g} s each (the tier's limit; reported, not failed)")
        for duration, nodeid in slow:
            terminalreporter.write_line(f"{duration:6.2f}s {nodeid}")
