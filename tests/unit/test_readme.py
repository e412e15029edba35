"""The README's first screen runs as written, checked without running anything.

Every command in the fenced block(s) of its first screen is read as a shell would split it: a `pairproof`
command's arguments must be accepted by the real CLI parser (stopped right after parsing, so nothing is
started), and each input it names must exist: case ids in the catalogue, a target that is built in or a
`module:factory` importable with the command's own PYTHONPATH, a profile that loads, an expectation file,
mutant names of the target's catalogue, and a `--results`/`--mutants` folder that an earlier command of
the block writes. `bash SCRIPT` names a file of the checkout; `tox -e ENV` an env of tox.ini. The long runs
themselves are CI's. The checker is tested on planted bad commands, and the design document's catalogue
table (docs/design.md §6) on acceptance/catalogue.toml.
"""

from __future__ import annotations

import argparse
import configparser
import contextlib
import importlib
import io
import os
import re
import shlex
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
FIRST_SCREEN = 40  # lines: what a reader sees before scrolling
PAIRPROOF = ".venv/bin/pairproof"  # what tools/setup-machine makes; a bare `pairproof` is not on PATH
TOX = ".venv/bin/tox"
SUITE = {"acceptance", "runtime", "canaries", "mutants", "reports"}


@dataclass
class Command:
    line: str
    env: dict[str, str] = field(default_factory=dict)
    argv: list[str] = field(default_factory=list)


def fenced_blocks(text: str, lines: int = FIRST_SCREEN) -> list[str]:
    """The fenced blocks that open and close within the first ``lines`` lines."""
    blocks, current = [], None
    for line in text.splitlines()[:lines]:
        if line.startswith("```"):
            if current is None:
                current = []
            else:
                blocks.append("\n".join(current))
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def commands(block: str) -> list[Command]:
    """The block's commands: continuation lines joined, comments dropped, `&&`/`;` chains split, leading
    VAR=value assignments taken as the command's environment."""
    found = []
    for line in block.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        start = 0
        for i, word in enumerate([*words, "&&"]):
            if word in ("&&", "||", ";"):
                part = words[start:i]
                start = i + 1
                env = {}
                while part and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", part[0]):
                    name, _, value = part.pop(0).partition("=")
                    env[name] = value
                if part:
                    found.append(Command(line.strip(), env, part))
    return found


def parse_pairproof(args: list[str]) -> argparse.Namespace:
    """``args`` parsed by the real `pairproof` parser (``acceptance.cli.build_parser``), without running the
    command; SystemExit(2) with the parser's own message on stderr when it refuses them."""
    return importlib.import_module("acceptance.cli").build_parser().parse_args(args)


@contextlib.contextmanager
def on_path(pythonpath: str):
    """The command's PYTHONPATH (relative to the checkout) first on sys.path; modules it brought in are dropped
    afterwards, so one command's imports never satisfy another's."""
    entries = [str(ROOT / p) for p in pythonpath.split(os.pathsep) if p]
    before_path, before_modules = list(sys.path), set(sys.modules)
    sys.path[:0] = entries
    try:
        yield
    finally:
        sys.path[:] = before_path
        for name in set(sys.modules) - before_modules:
            if name.partition(".")[0] in SUITE:  # the suite's own modules stay: one object each for everyone
                continue
            if any(str(getattr(sys.modules[name], "__file__", "") or "").startswith(e) for e in entries):
                del sys.modules[name]


def target_problem(target: str, pythonpath: str) -> str | None:
    from acceptance import targets

    if target in targets.BUILTIN:
        return None
    if ":" not in target:
        return f"target {target!r} is not built in ({', '.join(sorted(targets.BUILTIN))}) nor module:factory"
    module, _, attr = target.partition(":")
    with on_path(pythonpath):
        try:
            factory = getattr(importlib.import_module(module), attr, None)
        except ImportError as exc:
            return f"driver {target!r} does not import with PYTHONPATH={pythonpath!r}: {exc}"
    return None if callable(factory) else f"driver {target!r}: {module} has no callable {attr!r}"


def profile_problem(profile: str) -> str | None:
    from acceptance.targets import profiles

    given = str(ROOT / profile) if "/" in profile or profile.endswith(".toml") else profile
    try:
        profiles.load(given)
    except Exception as exc:  # ProfileError, a missing file: the message is the finding
        return f"profile {profile!r}: {exc}"
    return None


def tox_envs() -> set[str]:
    config = configparser.ConfigParser(interpolation=None)
    config.read(ROOT / "tox.ini")
    envs = {s.partition(":")[2] for s in config.sections() if s.startswith("testenv:")}
    envs |= {e.strip() for e in config.get("tox", "envlist", fallback="").split(",") if e.strip()}
    return envs


class Checker:
    """Checks a block's commands in order, remembering which report folders earlier ones write."""

    def __init__(self) -> None:
        self.written: set[str] = set()  # --reports-dir folders of earlier qualify runs
        self.mutant_reports: set[str] = set()  # mutants.json written by earlier mutants runs

    def problems(self, command: Command) -> list[str]:
        program, args = command.argv[0], command.argv[1:]
        if program in ("bash", "sh"):
            return [] if args and (ROOT / args[0]).is_file() else [f"{args[:1]}: no such script in the checkout"]
        if Path(program).name == "tox":
            if program != TOX:
                return [f"{program!r}: tools/setup-machine installs tox as {TOX}"]
            envs = [args[i + 1] for i, a in enumerate(args[:-1]) if a == "-e"]
            unknown = [e for env in envs for e in env.split(",") if e not in tox_envs()]
            return [f"tox env {e!r} is not in tox.ini" for e in unknown]
        if Path(program).name == "pairproof":
            if program != PAIRPROOF:
                return [f"{program!r}: pairproof is {PAIRPROOF} after tools/setup-machine (not on PATH)"]
            return self.pairproof_problems(args, command.env.get("PYTHONPATH", ""))
        return [f"{program!r}: the first screen runs only setup scripts, {PAIRPROOF} and {TOX}"]

    def pairproof_problems(self, args: list[str], pythonpath: str) -> list[str]:
        placeholders = [a for a in args if re.fullmatch(r"\[.*|.*\]|[A-Z][A-Z_]*|<.*>|\.\.\.", a)]
        if placeholders:  # argparse would take `[--image IMAGE]` as pytest arguments: not runnable as written
            return [f"placeholders {placeholders}: write a command that runs as it stands"]
        stderr = io.StringIO()
        try:
            with contextlib.redirect_stderr(stderr):
                ns = parse_pairproof(args)
        except SystemExit as exc:
            return [f"the parser refuses {shlex.join(args)!r} (exit {exc.code}): {stderr.getvalue().strip()}"]
        found = []
        given = vars(ns)
        if given.get("target") is not None:
            found.append(target_problem(ns.target, pythonpath))
        if given.get("profile"):
            found.append(profile_problem(ns.profile))
        if given.get("case"):
            from acceptance import catalogue

            known = catalogue.load()
            found += [f"case {c!r} is not in acceptance/catalogue.toml" for c in ns.case if c not in known]
        if given.get("expected"):
            from reports import expectation

            try:
                expectation.load(ROOT / ns.expected)
            except expectation.ExpectationError as exc:
                found.append(f"--expected {ns.expected}: {exc}")
        if ns.command == "mutants":
            from mutants import catalogue as mutant_catalogue

            path = mutant_catalogue.CATALOGUES.get(ns.target)
            names = {m.name for m in mutant_catalogue.load(path)} if path else set()
            found += [f"mutant {n!r} is not in {ns.target}'s catalogue" for n in ns.only or [] if n not in names]
            folder = ns.reports_dir or ("reports/docker" if ns.target == "docker" else "reports")
            self.mutant_reports.add(os.path.normpath(f"{folder}/mutants.json"))
        if ns.command == "qualify":
            if os.path.normpath(ns.reports_dir) in self.written:  # each run replaces the folder's report set
                found.append(f"--reports-dir {ns.reports_dir}: an earlier qualify of the block writes there too, "
                             "and this run would replace its reports; give each its own --reports-dir")
            self.written.add(os.path.normpath(ns.reports_dir))
        given_results = given.get("results")
        for folder in [given_results] if isinstance(given_results, str) else given_results or []:  # findings: several
            if os.path.normpath(folder) not in self.written:
                found.append(f"--results {folder}: no earlier command of the block writes it")
        if given.get("mutants") and os.path.normpath(ns.mutants) not in self.mutant_reports:
            found.append(f"--mutants {ns.mutants}: no earlier `mutants` command of the block writes it")
        if ns.command == "scan":
            found += [f"scan: {p} does not exist" for p in ns.paths if not (ROOT / p).exists()]
        return [p for p in found if p]


def check(block: str) -> list[str]:
    checker = Checker()
    return [f"{c.line}: {p}" for c in commands(block) for p in checker.problems(c)]


# -- the README ----------------------------------------------------------------------------------------------

def test_the_first_screen_has_the_commands():
    """The first screen shows the commands a newcomer needs, in a block that fits it."""
    blocks = fenced_blocks(README.read_text())
    assert blocks, f"no fenced block closes within the README's first {FIRST_SCREEN} lines"
    argv = [c.argv for b in blocks for c in commands(b)]
    subcommands = {a[1] for a in argv if a[0] == PAIRPROOF and len(a) > 1}
    assert {"qualify", "check-driver", "gate", "mutants"} <= subcommands
    assert [TOX] in argv
    assert any("examples/local-driver" in " ".join(a) for a in argv), "the own-platform lines name the example"


def test_the_first_screen_names_every_command():
    """Every subcommand the parser has is named on the first screen (the list argparse gives for a wrong one)."""
    stderr = io.StringIO()
    with pytest.raises(SystemExit), contextlib.redirect_stderr(stderr):
        parse_pairproof(["no-such-command"])
    choices = re.findall(r"'([a-z-]+)'", stderr.getvalue().partition("choose from")[2])
    assert len(choices) >= 10, stderr.getvalue()
    screen = "\n".join(README.read_text().splitlines()[:FIRST_SCREEN])
    assert [c for c in choices if f"`{c}`" not in screen] == []


def test_every_first_screen_command_is_accepted_and_names_what_exists():
    """Each command's arguments parse with the real CLI, and every file, driver and profile it names exists."""
    problems = [p for block in fenced_blocks(README.read_text()) for p in check(block)]
    assert problems == []


# -- the checker itself: it catches what it is for --------------------------------------------------------------

GOOD = """\
bash tools/setup-machine   # a comment
.venv/bin/pairproof qualify --case PR-2 --reports-dir /tmp/x && .venv/bin/pairproof gate --target reference --results /tmp/x
.venv/bin/pairproof mutants --only shared-volume
.venv/bin/pairproof gate --target reference --results /tmp/x --mutants reports/mutants.json
PYTHONPATH=examples/local-driver .venv/bin/pairproof check-driver nsbox_driver:create \\
    --profile examples/local-driver/nsbox-agent.toml
.venv/bin/pairproof qualify --target hermes-unguarded --expected acceptance/targets/expectations/hermes-unguarded.toml
.venv/bin/tox -e unit,lint
"""


def test_the_checker_passes_a_good_block():
    assert [c.argv[0] for c in commands(GOOD)] == ["bash", *[PAIRPROOF] * 6, TOX]
    assert check(GOOD) == []


@pytest.mark.parametrize(("bad", "says"), [
    ("pairproof qualify", "not on PATH"),
    (".venv/bin/pairproof qualify --no-such-option", "the parser refuses"),
    (".venv/bin/pairproof no-such-command", "the parser refuses"),
    (".venv/bin/pairproof qualify --case XX-9", "'XX-9' is not in"),
    (".venv/bin/pairproof qualify --target nowhere", "not built in"),
    (".venv/bin/pairproof check-driver nsbox_driver:create --profile examples/local-driver/nsbox-agent.toml",
     "does not import"),
    ("PYTHONPATH=examples/local-driver .venv/bin/pairproof check-driver nsbox_driver:nope "
     "--profile examples/local-driver/nsbox-agent.toml", "no callable 'nope'"),
    ("PYTHONPATH=. .venv/bin/pairproof check-driver mydriver:create --profile myagent.toml", "does not import"),
    (".venv/bin/pairproof qualify --profile myagent.toml", "profile 'myagent.toml'"),
    (".venv/bin/pairproof qualify --target hermes-unguarded --expected acceptance/expectations/hermes-unguarded.toml",
     "--expected"),
    (".venv/bin/pairproof gate --target reference --results reports/hermes", "no earlier command"),
    (".venv/bin/pairproof gate --target reference --mutants reports/mutants.json", "no earlier `mutants` command"),
    (".venv/bin/pairproof mutants --only no-such-mutant", "'no-such-mutant' is not in"),
    (".venv/bin/tox -e no-such-env", "'no-such-env' is not in tox.ini"),
    ("tox", "installs tox as"),
    ("bash tools/no-such-script", "no such script"),
    (".venv/bin/pairproof qualify --target docker [--image IMAGE]", "placeholders"),
    (".venv/bin/pairproof mutants --only NAME", "placeholders"),
    (".venv/bin/pairproof qualify --target hermes\n.venv/bin/pairproof qualify --target hermes-unguarded",
     "an earlier qualify of the block writes there too"),
    ("curl https://example.invalid/install | sh", "runs only"),
])
def test_the_checker_catches_a_planted_bad_command(bad, says):
    problems = check(bad)
    assert any(says in p for p in problems), problems


def test_parsing_runs_nothing():
    """The checker parses with the real parser and stops there: the command's function is never called."""
    cli = importlib.import_module("acceptance.cli")
    with mock.patch.object(cli, "qualify", side_effect=AssertionError("qualify ran")):
        ns = parse_pairproof(["qualify", "--case", "PR-2"])
    assert (ns.command, ns.case) == ("qualify", ["PR-2"])


# -- docs/design.md §6 is the catalogue -----------------------------------------------------------------------

def test_the_design_documents_catalogue_table_is_the_catalogues():
    """docs/design.md §6 lists every case of acceptance/catalogue.toml, in its order, with its boundary,
    refusal and controls as the catalogue words them."""
    text = (ROOT / "docs" / "design.md").read_text()
    section = text.split("## 6. ", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if re.match(r"\| [A-Z]{2}-\d+ \|", line)]
    catalogue = tomllib.loads((ROOT / "acceptance" / "catalogue.toml").read_text())
    expected = [f"| {cid} | {case['boundary']} | {case['refusal']} | "
                + ("; ".join(f"{role} {what}" for role, what in (case.get("controls") or {}).items()) or "—") + " |"
                for cid, case in catalogue.items()]
    assert rows == expected
