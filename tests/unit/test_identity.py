"""What a verdict names (``reports/identity.py``): every part moves with what it covers, and nothing else moves
it (a tree copied elsewhere hashes alike). The review of issue 27 item 1 found each of these holes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from acceptance.harness.session import PairproofSession
from acceptance.targets.profiles import load as load_profile
from reports import identity


@pytest.fixture(scope="module")
def two_copies(tmp_path_factory) -> tuple[Path, Path]:
    """The acceptance package copied to two places (a checkout and a tox env's site-packages, say)."""
    trees = []
    for name in ("one", "two"):
        tree = tmp_path_factory.mktemp(name) / "deeper" / "acceptance"
        shutil.copytree(identity.package_dir("acceptance"), tree, ignore=shutil.ignore_patterns("__pycache__"))
        trees.append(tree)
    return trees[0], trees[1]


def _profile(tree: Path, name: str = "hermes", binds: dict | None = None):
    profile = load_profile(str(tree / "targets" / "profiles" / f"{name}.toml"))
    if binds is not None:
        object.__setattr__(profile, "binds", binds)
    return profile


def test_the_same_files_in_two_places_hash_alike(two_copies):
    """Names in a digest are relative: the profile's hash of a byte-identical copy elsewhere is the same (it was
    not, by absolute paths: every gate in another tox env refused every verdict)."""
    one, two = two_copies
    assert identity.tree_digest(one) == identity.tree_digest(two)
    assert identity.profile_digest(_profile(one, binds={})) == identity.profile_digest(_profile(two, binds={}))


def test_a_conftest_in_a_folder_named_like_a_run_s_output_moves_the_suite_hash(two_copies, tmp_path):
    """A conftest.py under acceptance/cases/allure-results/ is loaded by pytest: it is in the digest."""
    tree = tmp_path / "acceptance"
    shutil.copytree(two_copies[0], tree)
    before = identity.tree_digest(tree)
    (tree / "cases" / "allure-results").mkdir()
    (tree / "cases" / "allure-results" / "conftest.py").write_text("import pytest\n")
    assert identity.tree_digest(tree) != before


def test_every_file_of_a_bound_folder_moves_the_profile_hash(two_copies, tmp_path):
    """The agent's installed software by every file, not its distributions' RECORDs: a .pth added, a script in
    bin/, a module edited without its RECORD all move it."""
    venv = tmp_path / "venv"
    (venv / "lib" / "python3.11" / "site-packages" / "agent-1.0.dist-info").mkdir(parents=True)
    (venv / "lib" / "python3.11" / "site-packages" / "agent-1.0.dist-info" / "RECORD").write_text("agent.py,,\n")
    (venv / "lib" / "python3.11" / "site-packages" / "agent.py").write_text("x = 1\n")
    (venv / "bin").mkdir()
    profile = _profile(two_copies[0], binds={"/opt/agent": venv})
    seen = {identity.profile_digest(profile)}
    for change in (lambda: (venv / "lib" / "python3.11" / "site-packages" / "agent.py").write_text("x = 2\n"),
                   lambda: (venv / "lib" / "python3.11" / "site-packages" / "zz.pth").write_text("import os\n"),
                   lambda: (venv / "bin" / "agent").write_text("#!/bin/sh\n")):
        change()
        seen.add(identity.profile_digest(profile))
    assert len(seen) == 4


def test_the_probe_is_named_by_its_bytes(tmp_path, monkeypatch):
    """Another static probe (or none: the detect.py fallback) is another verdict."""
    one, two = tmp_path / "one", tmp_path / "two"
    one.write_bytes(b"\x7fELF one")
    two.write_bytes(b"\x7fELF two")
    monkeypatch.setenv("PAIRPROOF_PROBE", str(one))
    first = identity.probe_digest()
    monkeypatch.setenv("PAIRPROOF_PROBE", str(two))
    assert identity.probe_digest() != first
    monkeypatch.setenv("PAIRPROOF_PROBE", str(tmp_path / "none"))
    assert identity.probe_digest() == "none: detect.py"


def _session(start) -> PairproofSession:
    s = PairproofSession.__new__(PairproofSession)
    s.verdict = {"problems": [], "status": "passed"}
    s._judged_at_start = start
    return s


def test_a_source_edited_while_the_run_went_on_fails_the_run():
    """The identity is taken as the run starts and as it ends: a file edited in between (a refusal weakened for
    the run, then put back) fails the run; it used to be named at the end only, by the restored file."""
    start = {p: "a" * 64 for p in identity.PARTS} | {"target": "reference", "image": None}
    same = _session(dict(start))
    same._judged_unchanged(dict(start))
    assert same.verdict == {"problems": [], "status": "passed"}
    edited = _session(dict(start))
    edited._judged_unchanged(start | {"suite": "b" * 64})
    assert edited.verdict["status"] == "failed" and "the suite changed while the run went on" in edited.verdict["problems"][0]
    built = _session(dict(start))  # a default image built by the run's first instance: named at the end only
    built._judged_unchanged(start | {"image": "sha256:" + "c" * 64})
    assert built.verdict["status"] == "passed"
    moved = _session(start | {"image": "sha256:" + "d" * 64})
    moved._judged_unchanged(start | {"image": "sha256:" + "c" * 64})
    assert moved.verdict["status"] == "failed" and "image" in moved.verdict["problems"][0]
