"""Bad input changes nothing (issue 18): every command, given a bad input, exits 2 with one line on stderr
naming the input and the fix, and the reports folder (holding a published report set) and the state folder
are byte for byte what they were. Each input runs as a user runs it: ``python -m acceptance.cli`` in a
process of its own.

The part of tests/unit/test_bad_input.py that the unit tier cannot hold: they run the CLI as a process."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from reports import reportset

CHECKOUT = Path(__file__).resolve().parents[3]
SUPPORT = CHECKOUT / "tests" / "support"


def _tree_digest(root: Path) -> dict[str, str]:
    """Every entry under ``root``: a file's bytes and mode, a link's target, a folder's mode."""
    seen = {}
    for folder, dirs, files in os.walk(root):
        for name in sorted(dirs + files):
            path = Path(folder) / name
            rel = str(path.relative_to(root))
            st = path.lstat()
            if path.is_symlink():
                seen[rel] = "link " + os.readlink(path)
            elif path.is_dir():
                seen[rel] = f"dir {st.st_mode:o}"
            else:
                seen[rel] = f"file {st.st_mode:o} " + hashlib.sha256(path.read_bytes()).hexdigest()
    return seen


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


# (command line with {reports} {state} {bad} placeholders, what the line must name, a word of the fix)
CASES = [
    # qualify: the rows first
    ("qualify --case XX-9", "'XX-9'", "catalogue"),
    ("qualify -- --bogus-flag", "--bogus-flag", "drop"),
    ("qualify --state-dir /proc/foo", "/proc/foo", "choose a folder"),
    ("qualify --state-dir {bad}/a-file", "a-file", "give a folder"),
    ("qualify --state-dir {bad}/a-file/below", "a-file", "give a folder"),
    ("qualify --state-dir=", "--state-dir is empty", "give the path"),
    ("qualify --state-dir {root}/state", "no o+x", "choose a folder elsewhere"),
    ("qualify --reports-dir {bad}/a-file", "a-file", "give a folder"),
    ("qualify --reports-dir /proc/pairproof-reports", "/proc/pairproof-reports", "choose a folder"),
    ("qualify -n many", "-n", "--help"),
    ("qualify -n -1", "-n -1", "0 or more"),
    ("qualify --budget -5", "--budget -5", "0 or more"),
    ("qualify --budget nan", "--budget nan", "0 or more"),
    ("qualify --target nosuch", "'nosuch'", "choose one of"),
    ("qualify --target no.such.module:create", "'no.such.module'", "PYTHONPATH"),
    ("qualify --target broken_targets:raising", "'broken_targets:raising'", "check-driver"),
    ("qualify -n 2 --target broken_targets:raising", "'broken_targets:raising'", "check-driver"),  # on a worker
    ("qualify --profile nosuch", "'nosuch'", "choose one of"),
    ("qualify --profile {bad}/broken.toml", "broken.toml", "TOML"),
    ("qualify --profile {bad}/empty.toml", "empty.toml", "required"),
    ("qualify --profile /proc/self/mem", "/mem", "cannot read"),
    ("qualify -- -k no_test_has_this_name", "no_test_has_this_name", "widen"),
    ("qualify --bogus", "--bogus", "--help"),
    # pytest arguments after `--` that would bypass a check or write outside the run's own set (review)
    ("qualify -- --pairproof-verdict {reports}/verdict.json", "--pairproof-verdict", "--reports-dir"),
    ("qualify -- --alluredir {reports}/allure-results", "--alluredir", "--reports-dir"),
    ("qualify -- --pairproof-state-dir /proc/foo", "--pairproof-state-dir", "--state-dir"),
    ("qualify -- --target=broken_targets:raising", "--target", "before `--`"),
    ("qualify -- -n 2 --dist load", "-n", "before `--`"),
    ("qualify -- -p no:allure_pytest", "no:allure_pytest", "drop it"),
    ("qualify -- -pno:pairproof", "no:pairproof", "drop it"),
    ("qualify -- --basetemp={reports}", "--basetemp", "elsewhere"),
    ("qualify -- --basetemp {root}", "--basetemp", "elsewhere"),
    ("qualify -- --junitxml={reports}/junit.xml", "--junitxml", "elsewhere"),
    ("qualify -- --pairproof-run XYZ", "--pairproof-run 'XYZ'", "8 lowercase hex"),
    ("qualify --reports-dir {bad}/dangling", "does not exist", "create that folder"),
    ("qualify --reports-dir {state}/runs/reports", "inside the state folder", "outside it"),
    ("qualify --reports-dir {state}", "inside the state folder", "outside it"),
    ("qualify --target os:sep", "not a factory", "module:factory"),
    ("qualify --target broken_on_import:create", "'broken_on_import'", "PYTHONPATH"),
    ("qualify --target :create", "cannot import", "PYTHONPATH"),
    ("PAIRPROOF_PROBE={bad}/a-file qualify", "PAIRPROOF_PROBE", "unset"),
    ("PAIRPROOF_ALLURE={bad}/no-such-allure qualify", "PAIRPROOF_ALLURE", "unset"),
    # code the verdict's hashes do not name (issue 27 item 1's review): a plugin added, options from the environment
    ("qualify -- -p tests.unit.conftest", "-p tests.unit.conftest", "drop it"),
    ("qualify -- --confcutdir=/", "--confcutdir", "conftest files come from the suite's own package only"),
    ("PYTEST_ADDOPTS=-x qualify", "PYTEST_ADDOPTS", "unset PYTEST_ADDOPTS"),
    ("PYTEST_PLUGINS=tests.unit.conftest qualify", "PYTEST_PLUGINS", "unset PYTEST_PLUGINS"),
    # mutants
    ("mutants --only no-such-mutant", "'no-such-mutant'", "give a name"),
    ("mutants -j 0", "-j 0", "above 0"),
    ("mutants --suite {bad}/no-such-folder", "no-such-folder", "give the folder"),
    ("mutants --reports-dir {bad}/a-file", "a-file", "give a folder"),
    ("mutants --state-dir /proc/foo", "/proc/foo", "choose a folder"),
    ("mutants --reports-dir {state}/reports", "inside the state folder", "outside it"),
    # mutants of a target: a name of the other target's catalogue, an image without docker, no catalogue
    ("mutants --target docker --only no-such-mutant", "no such mutant in mutants/docker.toml", "give a name"),
    ("mutants --target docker --only shared-volume", "'shared-volume'", "--target docker` runs them all"),
    ("mutants --only host-pid", "no such mutant in mutants/catalogue.toml", "give a name"),
    ("mutants --image pairproof/agent:nosuch", "--image", "--target docker"),
    ("mutants --target nosuch", "'nosuch' has no mutant catalogue", "give one of reference, docker"),
    ("mutants --target docker --image pairproof/agent:nosuch", "'pairproof/agent:nosuch'", "docker load"),
    # gate
    ("gate --target reference --results {reports} --mutants /nonexistent.json", "/nonexistent.json", "drop --mutants"),
    ("gate --target reference --results {reports} --mutants {bad}/broken.json", "broken.json", "not JSON"),
    ("gate --target reference --results {reports} --mutants {bad}", "is a folder", "give the path"),
    ("gate --target reference --results {bad}/a-file", "a-file", "give the folder"),
    ("gate --target reference --results {bad}/no-such-folder", "no-such-folder", "give the folder"),
    # expect
    ("expect --results {reports} --expected {bad}/broken.toml", "broken.toml", "for the format"),
    ("expect --results {reports} --expected {bad}/empty.toml", "empty.toml", "for the format"),
    ("expect --results {reports} --expected {bad}/no-such.toml", "no-such.toml", "give an expectation"),
    ("expect --results {reports} --expected {bad}", "is a folder", "give the expectation"),
    ("expect --results {bad}/a-file --expected {bad}/empty.toml", "a-file", "give the folder"),
    # findings
    ("findings --results {bad}/damaged-reports --out {bad}/f.md", "damaged-reports", "rerun"),
    ("findings --results {reports} --out {bad}/f.md", "not a verdict", "rerun"),
    ("findings --results {bad}/no-such-folder --out {bad}/f.md", "no-such-folder", "give the folder"),
    ("findings --results {bad}/damaged-reports --out {bad}/no-such-folder/f.md", "no-such-folder", "make it"),
    # report
    ("report --reports-dir {bad}/no-such-folder", "no-such-folder", "give the folder"),
    ("report --reports-dir {bad}", "no verdict", "pairproof qualify"),
    ("report --reports-dir {bad}/damaged-reports", "verdict.json", "not JSON"),
    # clean
    ("clean --target nosuch", "'nosuch'", "choose one of"),
    ("clean --state-dir {bad}/a-file", "a-file", "not a folder"),
    ("clean --target os:sep", "not a factory", "module:factory"),
    # measure
    ("measure --target nosuch", "'nosuch'", "choose one of"),
    ("measure --turns 0", "--turns 0", "1 or more"),
    ("measure --state-dir {bad}/a-file", "a-file", "give a folder"),
    ("measure --target os:sep", "not a factory", "module:factory"),
    ("PAIRPROOF_PROBE={bad}/a-file mutants", "PAIRPROOF_PROBE", "unset"),
    ("PAIRPROOF_PROBE={bad}/a-file check-driver reference", "PAIRPROOF_PROBE", "unset"),
    # scan
    ("scan --run 0123abcd {bad}/no-such-path", "no-such-path", "exist"),
    ("scan --run 0123abcd", "PATH", "--help"),
    ("scan {bad}", "--run", "--help"),
    ("scan --run ppcanary {bad}", "--run 'ppcanary'", "8 lowercase hex"),
    # check-driver
    ("check-driver nosuch", "'nosuch'", "choose one of"),
    ("check-driver broken_targets:not_a_factory", "not a factory", "module:factory"),
    ("check-driver reference --profile {bad}/broken.toml", "broken.toml", "TOML"),
    ("check-driver reference --state-dir {bad}/a-file", "a-file", "give a folder"),
    # the command itself
    ("", "command", "--help"),
    ("frobnicate", "frobnicate", "--help"),
]
DEFAULTS = {"qualify": ["--case", "CP-1", "--reports-dir", "{reports}", "--state-dir", "{state}"],
            "mutants": ["--reports-dir", "{reports}", "--state-dir", "{state}"],
            "report": ["--reports-dir", "{reports}"], "clean": ["--state-dir", "{state}"],
            "check-driver": ["--state-dir", "{state}"], "measure": ["--state-dir", "{state}"]}


def _environment(line: str, world: dict[str, Path]) -> tuple[dict[str, str], str]:
    """The row's leading ``NAME=value`` words (variables set for the command, as a shell line sets them),
    and the rest of the line."""
    words = line.split(" ") if line else []
    env = {}
    while words and "=" in words[0] and words[0].split("=")[0].isupper():
        name, _, value = words.pop(0).partition("=")
        env[name] = value.format(**{k: str(v) for k, v in world.items()})
    return env, " ".join(words)


def _argv(line: str, world: dict[str, Path]) -> list[str]:
    """The row's command line, with the defaults that keep a run inside tmp_path put before the row's own
    words (argparse keeps an option's last value, so the row's own wins) and before any ``--``."""
    line = _environment(line, world)[1]
    words = line.split(" ") if line else []
    cut = words.index("--") if "--" in words else len(words)
    words = words[:1] + DEFAULTS.get(words[0] if words else "", []) + words[1:cut] + words[cut:]
    return [w.format(**{k: str(v) for k, v in world.items()}) for w in words]


def _commands() -> set[str]:
    """The commands ``pairproof --help`` lists (any added later included)."""
    import re

    done = subprocess.run([sys.executable, "-m", "acceptance.cli", "--help"], capture_output=True, text=True,
                          cwd=CHECKOUT, timeout=60)
    return set(re.search(r"\{([a-z,-]+)\}", done.stdout).group(1).split(","))


def test_the_table_covers_every_command_with_twenty_inputs_or_more():
    commands = {next(w for w in line.split(" ") if "=" not in w) for line, _, _ in CASES if line}
    assert commands >= _commands()
    assert len(CASES) >= 20


@pytest.mark.parametrize("line,names,fix", CASES, ids=[c[0] or "(no command)" for c in CASES])
def test_bad_input_exits_2_with_one_line_and_changes_nothing(world, line, names, fix):
    argv = _argv(line, world)
    before = {"reports": _tree_digest(world["reports"]), "state": _tree_digest(world["state"]),
              "all": _tree_digest(world["root"])}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SUPPORT), str(CHECKOUT)]), **_environment(line, world)[0]}
    done = subprocess.run([sys.executable, "-m", "acceptance.cli", *argv], capture_output=True, text=True,
                          cwd=world["root"], env=env, timeout=300, stdin=subprocess.DEVNULL)
    lines = done.stderr.strip().splitlines()
    assert (done.returncode, len(lines)) == (2, 1), f"{argv}: exit {done.returncode}\n{done.stderr[-2000:]}"
    assert lines[0].startswith("pairproof: ") and "Traceback" not in done.stderr
    assert names in lines[0] and fix in lines[0], lines[0]
    assert _tree_digest(world["reports"]) == before["reports"]
    assert _tree_digest(world["state"]) == before["state"]
    assert _tree_digest(world["root"]) == before["all"]


def test_help_documents_the_exit_codes_of_every_command():
    for command in ("", *sorted(_commands())):
        done = subprocess.run([sys.executable, "-m", "acceptance.cli", *([command] if command else []), "--help"],
                              capture_output=True, text=True, cwd=CHECKOUT, timeout=60)
        assert done.returncode == 0, done.stderr
        for code in ("0 ", "1 ", "2 ", "130"):
            assert f"\n  {code}" in done.stdout, (command, done.stdout)


def _children(pid: int) -> list[str]:
    """The command lines of ``pid``'s child processes."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if entry.name.isdigit() and int(fields[1]) == pid:
                found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except (OSError, IndexError):
            continue
    return found


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_an_interrupt_while_inputs_are_checked_exits_130_and_changes_nothing(world, signum):
    """A signal during the dry collection (before any report set exists) is an interrupt like one mid-run:
    exit 130, not death by the signal, and the folders as they were."""
    import time

    before = _tree_digest(world["root"])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SUPPORT), str(CHECKOUT)])}
    proc = subprocess.Popen([sys.executable, "-m", "acceptance.cli", *_argv("qualify", world)], cwd=world["root"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + 120
        while not any("--collect-only" in c for c in _children(proc.pid)):
            if proc.poll() is not None or time.monotonic() > end:
                raise RuntimeError(f"the dry collection was not seen (exit {proc.poll()}): {proc.stderr.read()[-2000:]}")
            time.sleep(0.02)
        proc.send_signal(signum)
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 130, proc.stderr.read()[-2000:]
    assert _tree_digest(world["root"]) == before


def test_the_listing_the_messages_suggest_exits_0_and_changes_nothing(world):
    """``pairproof qualify -- --collect-only -q`` (what a selection of nothing is told to run) lists the tests
    and exits 0 without the 'ended without a verdict' failure, and writes no reports."""
    before = _tree_digest(world["root"])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SUPPORT), str(CHECKOUT)])}
    done = subprocess.run([sys.executable, "-m", "acceptance.cli", *_argv("qualify -- --collect-only -q", world)],
                          capture_output=True, text=True, cwd=world["root"], env=env, timeout=300,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0 and "test_cp1_" in done.stdout, done.stderr[-2000:]
    assert _tree_digest(world["root"]) == before


def test_the_dry_collection_imports_the_suite_this_process_runs(tmp_path, monkeypatch):
    """Under tox the CLI is the installed package while the current folder is a checkout with its own
    ``acceptance``: the dry collection must import the running package's suite, not the folder's (pytest
    would refuse every test file as an "import file mismatch" and qualify would exit 2 on a good suite)."""
    import shutil

    from acceptance import cases
    from acceptance.cli import inputs

    shutil.copytree(Path(cases.__file__).resolve().parents[1], tmp_path / "acceptance",
                    ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.chdir(tmp_path)
    inputs.pytest_args([str(Path(cases.__file__).parent), "--target", "reference", "-p", "no:cacheprovider"], [])


def test_a_second_qualify_into_a_folder_a_live_run_holds_is_refused_and_changes_nothing(world):
    """Issue 27 item 12: two qualifies into one reports folder both said "verdict written" and exited 0, one set
    published and the other orphaned. A run now holds its folder (``reportset.hold``) from before it stages to the
    end: the second gets exit 2 and one line at once, and the first's folder is as it was."""
    argv = _argv("qualify", world)
    before = _tree_digest(world["root"])
    claim = reportset.hold(world["reports"])  # the first run, live
    try:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SUPPORT), str(CHECKOUT)])}
        done = subprocess.run([sys.executable, "-m", "acceptance.cli", *argv], capture_output=True, text=True,
                              cwd=world["root"], env=env, timeout=300, stdin=subprocess.DEVNULL)
    finally:
        os.close(claim)
    lines = done.stderr.strip().splitlines()
    assert (done.returncode, len(lines)) == (2, 1), done.stderr[-2000:]
    assert "another qualification is writing into it" in lines[0] and str(world["reports"]) in lines[0]
    assert _tree_digest(world["root"]) == before
    again = reportset.hold(world["reports"])  # released with the descriptor: the next run may write
    os.close(again)
