"""The mutant catalogue (``catalogue.toml``) and how one entry is applied to a copy of the suite.

A mutant is applied at source level to a throwaway copy of ``runtime/`` (next to copies of the suite's
packages, so that ``import runtime`` inside the run finds the broken copy first): the shipped runtime
carries no switch for breaking itself.
"""

from __future__ import annotations

import shutil
import tomllib
from dataclasses import dataclass
from pathlib import Path

from .errors import PatchDoesNotApply

PATH = Path(__file__).with_name("catalogue.toml")
# Each target's catalogue: the reference runtime's mistakes (bubblewrap sandbox, platform), and the Docker
# engine's run-configuration mistakes (``runtime/isolation/containers.py``). ``pairproof mutants --target T`` runs T's.
CATALOGUES = {"reference": PATH, "docker": Path(__file__).with_name("docker.toml")}
PACKAGES = ("runtime", "acceptance", "canaries", "reports")


@dataclass(frozen=True)
class Edit:
    file: str
    old: str
    new: str


@dataclass(frozen=True)
class Mutant:
    name: str
    breaks: str
    kills: tuple[str, ...]
    edits: tuple[Edit, ...]
    catalogue: str = "mutants/catalogue.toml"  # the file it comes from, for messages
    # Runs after every other mutant, with no other run beside it: it changes what the engine shared by the runs
    # holds (a network in the engine's namespace), which the other runs' engine check would refuse.
    alone: bool = False


def catalogue_path(target: str) -> Path:
    """The catalogue of ``target``'s mutants; KeyError for a target that has none."""
    return CATALOGUES[target]


def display(path: Path) -> str:
    """``mutants/<file>`` for a catalogue of this package, the path as given otherwise."""
    return f"mutants/{path.name}" if path.parent == PATH.parent else str(path)


def load(path: Path = PATH) -> list[Mutant]:
    mutants = []
    for entry in tomllib.loads(path.read_text())["mutant"]:
        edits = [Edit(entry["file"], e["old"], e["new"]) for e in entry["edits"]]
        edits += [Edit(e["file"], e["old"], e["new"]) for e in entry.get("also", [])]
        mutants.append(Mutant(entry["name"], entry["breaks"], tuple(entry["kills"]), tuple(edits), display(path),
                              bool(entry.get("alone", False))))
    return mutants


def copy_suite(dest: Path) -> Path:
    """Copy the packages a suite run imports into ``dest``; return ``dest`` (put it first on PYTHONPATH)."""
    import importlib

    for name in PACKAGES:
        source = Path(importlib.import_module(name).__file__).parent
        # A run's reports are not source: the default reports folder is the reports package's own, where the
        # member names are links into .pairproof-sets/ (one may dangle: a page not built).
        shutil.copytree(source, dest / name, ignore=shutil.ignore_patterns(
            "__pycache__", "allure-results", "verdict.json", ".pairproof-sets", "junit.xml", "summary.html",
            "allure-report.html", "mutants.json", "mutants.txt", "*.tmp"))
    return dest


def apply(mutant: Mutant, tree: Path) -> None:
    """Apply every edit to ``tree/runtime``; all or nothing is checked before any file is written."""
    texts: dict[Path, str] = {}
    for edit in mutant.edits:
        path = tree / "runtime" / edit.file
        text = texts.get(path, path.read_text())
        count = text.count(edit.old)
        if count != 1:
            raise PatchDoesNotApply(f"mutant {mutant.name!r} no longer applies: {edit.old!r} occurs {count} times in "
                                    f"runtime/{edit.file} (expected once); update {mutant.catalogue}")
        texts[path] = text.replace(edit.old, edit.new)
    for path, text in texts.items():
        path.write_text(text)
