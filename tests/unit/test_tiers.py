"""The test tree's own rules: the unit tier starts no process (tests/unit/conftest.py), and no folder pytest puts
on ``sys.path`` shadows a package the tests import.

pytest's default import mode (prepend) puts on ``sys.path`` the folder of every test file and conftest.py that is
not inside a package, and tests/conftest.py puts ``tests/`` there itself (for ``tests/support``). A folder named
``runtime`` directly in one of those is a namespace package that wins over the editable install's finder (which
comes after the path on ``sys.meta_path``): ``import runtime`` then finds an empty package and the tests fail on an
editable install only, while CI's wheel install passes.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
PROJECT_PACKAGES = {"runtime", "acceptance", "canaries", "mutants", "reports"}
# tox runs this folder in an env of its own (``pytest tests/integration/docker tests/unit/...``): its file names
# may repeat those of other integration folders, never those of tests/unit.
RUN_APART = Path("integration") / "docker"


def on_sys_path(tests: Path) -> set[Path]:
    """The folders a run of ``pytest tests`` puts on ``sys.path``: ``tests/`` and the nearest folder above each test
    file and conftest.py that is not a package (has no ``__init__.py``)."""
    found = {tests}
    for path in [*tests.rglob("test_*.py"), *tests.rglob("conftest.py")]:
        folder = path.parent
        while (folder / "__init__.py").exists():
            folder = folder.parent
        found.add(folder)
    return found


def shadowing(tests: Path, names: set[str]) -> list[str]:
    """Folders and modules directly in a folder on ``sys.path`` whose name is one of ``names``."""
    out = []
    for folder in sorted(on_sys_path(tests)):
        for child in sorted(folder.iterdir()):
            name = child.stem if child.suffix == ".py" else child.name
            if (child.is_dir() or child.suffix == ".py") and name in names:
                out.append(f"{child.relative_to(tests.parent)} shadows the package {name!r}")
    return out


def repeated_names(tests: Path) -> list[str]:
    """Test files sharing a file name in one run (prepend mode imports each by its name alone)."""
    out = []
    files = sorted(tests.rglob("test_*.py"))
    apart = [p for p in files if p.relative_to(tests).is_relative_to(RUN_APART)]
    unit = [p for p in files if p.relative_to(tests).parts[0] == "unit"]
    runs = ([p for p in files if p not in apart], sorted([*apart, *unit]))
    for run in runs:
        seen: dict[str, Path] = {}
        for path in run:
            if path.name in seen:
                out.append(f"{seen[path.name].relative_to(tests)} and {path.relative_to(tests)}")
            seen.setdefault(path.name, path)
    return out


def _imported_names() -> set[str]:
    return PROJECT_PACKAGES | set(packages_distributions()) | set(sys.stdlib_module_names)


def test_no_folder_on_the_path_shadows_a_package_the_tests_import():
    assert shadowing(TESTS, _imported_names()) == []


def test_the_shadowing_check_finds_a_planted_folder(tmp_path):
    """A test file directly in tests/integration puts that folder on the path, and its runtime/ folder shadows."""
    tests = tmp_path / "tests"
    (tests / "integration" / "runtime").mkdir(parents=True)
    (tests / "integration" / "runtime" / "test_controller.py").write_text("")
    (tests / "support").mkdir()
    (tests / "support" / "__init__.py").write_text("")
    (tests / "support" / "test_helper.py").write_text("")  # inside a package: the package's parent goes on the path
    assert shadowing(tests, {"runtime"}) == []
    assert shadowing(tests, {"support"}) == ["tests/support shadows the package 'support'"]
    (tests / "integration" / "test_loose.py").write_text("")
    assert shadowing(tests, {"runtime"}) == ["tests/integration/runtime shadows the package 'runtime'"]


def test_no_two_test_files_of_one_run_share_a_name():
    assert repeated_names(TESTS) == []


def test_the_name_check_finds_a_repeated_name(tmp_path):
    tests = tmp_path / "tests"
    for folder in ("unit", "integration/lab", "integration/docker", "integration/runtime"):
        (tests / folder).mkdir(parents=True)
    (tests / "integration" / "lab" / "test_containment.py").write_text("")
    (tests / "integration" / "docker" / "test_containment.py").write_text("")  # run apart: allowed
    assert repeated_names(tests) == []
    (tests / "integration" / "runtime" / "test_containment.py").write_text("")
    (tests / "unit" / "test_engine.py").write_text("")
    (tests / "integration" / "docker" / "test_engine.py").write_text("")  # tox runs it with tests/unit's files
    assert repeated_names(tests) == ["integration/lab/test_containment.py and integration/runtime/test_containment.py",
                                     "integration/docker/test_engine.py and unit/test_engine.py"]


@pytest.mark.parametrize("start", [
    pytest.param(lambda: subprocess.run(["true"]), id="subprocess.run"),
    pytest.param(lambda: os.fork(), id="os.fork"),
    pytest.param(lambda: os.posix_spawn("/bin/true", ["true"], {}), id="os.posix_spawn"),
    pytest.param(lambda: os.system("true"), id="os.system"),
])
def test_a_unit_test_that_starts_a_process_is_told_where_it_belongs(request, start):
    with pytest.raises(RuntimeError, match=rf"{re.escape(request.node.name)} starts a process .*move it to tests/integration"):
        start()


def test_a_unit_test_that_asks_for_pytester_is_told_where_it_belongs(request):
    with pytest.raises(pytest.fail.Exception, match="uses pytester.*move it to tests/integration"):
        request.getfixturevalue("pytester")
