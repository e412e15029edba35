"""The report swap is atomic (issue 18): a qualification killed at any point leaves either the previous
complete report set or the new complete one under the names a user and the gate read, never a mix and
never nothing. Runs ``pairproof qualify --case CP-1`` (a few seconds each) several times, killing it at
points found by watching the run's own folder: slow, still run in CI (tox -e unit)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from mutants.catalogue import copy_suite
from reports import html, reportset
from reports import verdict as verdict_report

pytestmark = pytest.mark.slow
CHECKOUT = Path(__file__).resolve().parents[3]
DEADLINE = 240.0


# Allure's report, built as the real one is (``allure generate --config CFG RESULTS``) but taking a steady
# 1.5 s and naming the results it was built from: a window to kill in, and a page tied to its set.
FAKE_ALLURE = f"""#!{sys.executable}
import json, pathlib, sys, time
args = sys.argv[1:]
out = pathlib.Path(json.loads(pathlib.Path(args[args.index("--config") + 1]).read_text())["output"])
out.mkdir(parents=True, exist_ok=True)
time.sleep(1.5)
(out / "index.html").write_text("report of " + str(pathlib.Path(args[-1]).resolve()))
"""


def _qualify(reports: Path, *pytest_args: str, path: str = "", tree: Path = CHECKOUT) -> subprocess.Popen:
    allure = reports.parent / "allure"
    if not allure.exists():
        allure.write_text(FAKE_ALLURE)
        allure.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tree), path])),
           "PAIRPROOF_ALLURE": str(allure)}
    return subprocess.Popen([sys.executable, "-m", "acceptance.cli", "qualify", "--case", "CP-1",
                             "--reports-dir", str(reports), *(["--", *pytest_args] if pytest_args else [])],
                            cwd=reports.parent, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _whole_set(reports: Path) -> str:
    """The run whose reports the names show, after checking they all come from that one run."""
    members = ["verdict.json", "junit.xml", "summary.html", "allure-results", "allure-report.html"]
    for name in members:
        assert (reports / name).exists(), f"{name} missing: the names show no whole set"
    assert len({(reports / name).resolve().parent for name in members}) == 1, "the names show two sets"
    verdict = json.loads((reports / "verdict.json").read_text())
    assert (reports / "junit.xml").read_text() == verdict_report.junit(verdict)
    assert (reports / "summary.html").read_text() == html.render(verdict, None)
    judged = {t["test"] for c in verdict["cases"] for t in c["refusals"]}
    judged |= {t["test"] for c in verdict["cases"] for ctl in c["controls"].values() for t in ctl["tests"]}
    runs = []
    for path in (reports / "allure-results").glob("*-result.json"):
        result = json.loads(path.read_text())
        runs += [label["value"] for label in result["labels"] if label["name"] == "pairproof_run"]
    assert runs and set(runs) == {verdict["run"]} and len(runs) == len(judged), (runs, verdict["run"])
    # the set's Allure page was built from the set's own results (the fake names them; they moved with the set)
    built_from = Path((reports / "allure-report.html").read_text().removeprefix("report of "))
    assert built_from.name == "allure-results" and built_from.parent.name == (reports / "verdict.json").resolve().parent.name
    return verdict["run"]


def _staged(reports: Path, pid: int) -> Path | None:
    """The folder the running qualification (process ``pid``) writes its set into."""
    found = list((reports / reportset.SETS).glob(f"set-{pid}-*"))
    return found[0] if found else None


def _when(*parts: str) -> Callable[[Path, int], bool]:
    def ready(reports: Path, pid: int) -> bool:
        staged = _staged(reports, pid)
        return staged is not None and all(any(staged.glob(p)) for p in parts)
    return ready


def _wait(proc: subprocess.Popen, reports: Path, condition: Callable[[Path, int], bool]) -> None:
    end = time.monotonic() + DEADLINE
    while not condition(reports, proc.pid):
        if proc.poll() is not None:
            raise RuntimeError(f"qualify ended (exit {proc.returncode}) before the kill point: {proc.stderr.read()[-2000:]}")
        if time.monotonic() > end:
            proc.kill()
            raise TimeoutError("the kill point was not reached in time")
        time.sleep(0.02)


# (signal, when: the kill point, as what the run's own folder shows)
POINTS = [
    (signal.SIGKILL, lambda reports, pid: True),  # at once: while its inputs are being checked
    (signal.SIGTERM, _when("allure-results/*-result.json")),  # mid-run: a test finished
    (signal.SIGKILL, _when("verdict.json")),  # the verdict is in, the pages not yet
    (signal.SIGKILL, _when("summary.html")),  # Allure's report being built (1.5 s)
]


def test_a_run_killed_at_any_point_leaves_the_previous_set_or_the_new_one(tmp_path):
    reports = tmp_path / "reports"
    first = _qualify(reports)
    assert first.wait(timeout=DEADLINE) == 0, first.stderr.read()[-3000:]
    shown = _whole_set(reports)
    for signum, point in POINTS:
        proc = _qualify(reports)
        try:
            _wait(proc, reports, point)
            proc.send_signal(signum)
            code = proc.wait(timeout=DEADLINE)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        now = _whole_set(reports)
        # (now != shown: the kill came just after the new set was published, which is as good)
        if now == shown and signum in (signal.SIGTERM, signal.SIGINT):
            assert code == 130, f"{signal.Signals(signum).name} mid-run: exit {code}, not 130\n{proc.stderr.read()[-3000:]}"
        shown = now
    last = _qualify(reports)
    assert last.wait(timeout=DEADLINE) == 0, last.stderr.read()[-3000:]
    new = _whole_set(reports)
    assert new != shown
    # the folders the killed runs left are swept by the next publish
    assert sorted(p.name for p in (reports / reportset.SETS).iterdir()) == sorted(["current", reportset.current(reports).name])


# A test that swallows the KeyboardInterrupt a SIGTERM raised in it, as hypothesis does when the interrupt lands
# inside a property test (it fails the test with an AssertionError of its own, and the run goes on).
SWALLOWING = """
import os, signal, time
import pytest

_done = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    if not _done:
        _done.append(item.nodeid)
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # (the handler runs at once and raises here)
        except KeyboardInterrupt:
            pass
    yield
"""


def test_an_interrupt_swallowed_inside_a_test_still_ends_the_run_as_interrupted(tmp_path):
    """The run that received SIGTERM exits 130 and publishes nothing, even when the KeyboardInterrupt never
    reached pytest: the run after it judged with the suite cut short."""
    reports = tmp_path / "reports"
    first = _qualify(reports)
    assert first.wait(timeout=DEADLINE) == 0, first.stderr.read()[-3000:]
    shown = _whole_set(reports)
    # In the suite's own package (a conftest beside the cases): a plugin given with -p is refused by qualify, as
    # code its verdict would not name.
    tree = copy_suite(tmp_path / "tree")
    (tree / "acceptance" / "cases" / "conftest.py").write_text(SWALLOWING)
    proc = _qualify(reports, tree=tree)
    code = proc.wait(timeout=DEADLINE)
    assert code == 130, f"exit {code}, not 130: {proc.stderr.read()[-3000:]}"
    assert _whole_set(reports) == shown
