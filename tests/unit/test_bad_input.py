"""Bad input changes nothing (issue 18): every command, given a bad input, exits 2 with one line on stderr
naming the input and the fix, and the reports folder (holding a published report set) and the state folder
are byte for byte what they were. Each input runs as a user runs it: ``python -m acceptance.cli`` in a
process of its own."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from reports import reportset


@pytest.fixture
def state_root() -> Iterator[Path]:
    """A folder every user can enter, for the state folder: instance uids must reach their volumes through
    every folder above it, and pytest's own tmp_path lies below a folder only its owner can enter."""
    root = Path(tempfile.mkdtemp(prefix="pairproof-badinput-", dir="/var/tmp"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def world(tmp_path: Path, state_root: Path) -> dict[str, Path]:
    """A reports folder with a published set, a state folder with a run's leftovers, and bad files."""
    reports = tmp_path / "reports"
    reports.mkdir()
    staged = reportset.stage(reports)
    (staged / "verdict.json").write_text(json.dumps({"run": "0badc0de", "status": "passed"}))
    (staged / "junit.xml").write_text("<testsuite/>")
    (staged / "summary.html").write_text("<html>the last good run</html>")
    (staged / "allure-results").mkdir()
    (staged / "allure-results" / "1-result.json").write_text("{}")
    reportset.publish(reports, staged)
    (reports / "mutants.json").write_text(json.dumps({"schema": "kept as it is"}))
    state = state_root / "state"
    (state / "runs" / "deadbeef").mkdir(parents=True)
    (state / "runs" / "deadbeef" / "owner.json").write_text("{}")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "a-file").write_text("not a folder")
    (bad / "broken.toml").write_text("name = 'x\n[start\n")
    (bad / "empty.toml").write_text("")
    (bad / "broken.json").write_text('{"schema": ')
    (bad / "damaged-reports").mkdir()
    (bad / "damaged-reports" / "verdict.json").write_text("{not json")
    (bad / "dangling").symlink_to(bad / "nowhere")
    return {"root": tmp_path, "reports": reports, "state": state, "bad": bad}


def test_the_published_set_is_what_the_names_show(world):
    """The fixture's set is a real published one: the member names resolve into it (so the digests above
    watch the set itself, not a stray copy)."""
    reports = world["reports"]
    assert json.loads((reports / "verdict.json").read_text())["run"] == "0badc0de"
    assert reportset.current(reports) == (reports / "verdict.json").resolve().parent
