"""Bad input gets one line naming the problem and the fix, exit code 2, no traceback, no change."""

from __future__ import annotations

import pytest

from acceptance import cli
from runtime.errors import PreflightError
from runtime.isolation import preflight


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pairproof: "), err
    assert "Traceback" not in err
    return lines[0]


def test_unknown_target(capsys, tmp_path):
    assert cli.main(["qualify", "--target", "nosuch", "--reports-dir", str(tmp_path / "r")]) == 2
    line = _one_line(capsys)
    assert "unknown target 'nosuch'" in line and "reference" in line
    assert not (tmp_path / "r").exists()


def test_target_module_that_does_not_import(capsys, tmp_path):
    assert cli.main(["qualify", "--target", "no.such.module:create", "--reports-dir", str(tmp_path / "r")]) == 2
    assert "cannot import 'no.such.module'" in _one_line(capsys)


def test_not_root(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(preflight.os, "geteuid", lambda: 1000)
    assert cli.main(["qualify", "--reports-dir", str(tmp_path / "r")]) == 2
    assert "not running as root" in _one_line(capsys)
    assert not (tmp_path / "r").exists()


def test_missing_kernel_feature(capsys, tmp_path, monkeypatch):
    def no_cgroups():
        raise PreflightError("no cgroup hierarchy offers both the memory and pids controllers")
    monkeypatch.setattr(preflight.cgroups, "detect", no_cgroups)
    assert cli.main(["qualify", "--reports-dir", str(tmp_path / "r")]) == 2
    assert "memory and pids controllers" in _one_line(capsys)


def test_missing_tool(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(preflight.shutil, "which", lambda tool: None if tool == "bwrap" else "/usr/bin/" + tool)
    assert cli.main(["qualify", "--reports-dir", str(tmp_path / "r")]) == 2
    assert "`bwrap` is not installed: apt-get install -y bubblewrap" in _one_line(capsys)


def test_unwritable_reports_folder(capsys):
    assert cli.main(["qualify", "--reports-dir", "/proc/pairproof-reports"]) == 2
    assert "--reports-dir /proc/pairproof-reports" in _one_line(capsys)


def test_clean_needs_root(capsys, monkeypatch):
    monkeypatch.setattr(cli.clean.os, "geteuid", lambda: 1000)
    assert cli.main(["clean"]) == 2
    assert "must run as root" in _one_line(capsys)


@pytest.mark.parametrize("argv", [["--help"], ["qualify", "--help"]])
def test_help_starts_no_runtime(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 0
