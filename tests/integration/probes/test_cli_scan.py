"""``pairproof scan``: the suite's engine on host paths; exit 0 nothing found and all read, 1 found or
something not read, 2 bad input; names its engine."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

from support.tokens import TEST_RUN, token

from acceptance import cli
from acceptance.harness import probes as probe
from canaries import Mint, detect


def _corpus(tmp_path: Path) -> tuple[Path, str]:
    token = Mint(TEST_RUN).mint("a", "scan").token
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "raw.txt").write_text(f"before {token} after\n")
    (folder / "b64.txt").write_text(base64.b64encode(f"x{token}y".encode()).decode() + "\n")
    (folder / "near.txt").write_text(token[:-1] + "g\n")  # a near miss: a last group of 11 hex digits
    return folder, token


def test_hits_exit_1_and_name_every_encoding(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("PAIRPROOF_PROBE", raising=False)
    folder, token = _corpus(tmp_path)
    assert cli.main(["scan", "--run", TEST_RUN, str(folder), "--json"]) == 1
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {(h["token"], h["encoding"], Path(h["where"]).name) for h in lines[:-1]} == {
        (token, "raw", "raw.txt"), (token, "base64", "b64.txt")}
    assert lines[-1]["end"] == detect.END_MARK and lines[-1]["scanned_files"] == 3
    # the engine is the static probe when one is built (setup-machine builds it), else detect.py, and says so
    built = probe.probe_binary()
    assert lines[-1]["engine"].startswith(f"static probe {built}" if built else "detect.py (no static probe")


def test_no_hits_exit_0_and_bad_input_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("PAIRPROOF_PROBE", raising=False)
    (tmp_path / "clean.txt").write_text("nothing canary-shaped here\n")
    assert cli.main(["scan", "--run", TEST_RUN, str(tmp_path / "clean.txt")]) == 0
    assert "0 hits; 1 files" in capsys.readouterr().out
    assert cli.main(["scan", "--run", TEST_RUN, str(tmp_path / "absent")]) == 2
    monkeypatch.setenv("PAIRPROOF_PROBE", str(tmp_path / "no-probe"))
    assert cli.main(["scan", "--run", TEST_RUN, str(tmp_path / "clean.txt")]) == 2
    assert "PAIRPROOF_PROBE" in capsys.readouterr().err
    monkeypatch.delenv("PAIRPROOF_PROBE")
    # The run is what a scan looks for (a run's tokens start with its id): a bad one is refused by name.
    assert cli.main(["scan", "--run", "ABC", str(tmp_path / "clean.txt")]) == 2
    assert "--run 'ABC' is not a run id" in capsys.readouterr().err


def test_the_probe_named_by_the_environment_is_the_engine(tmp_path, capsys, monkeypatch):
    folder, token = _corpus(tmp_path)
    stand_in = tmp_path / "ppscan"  # the same CLI as the static probe's: detect.py as an executable
    stand_in.write_text("#!/usr/bin/python3 -I\n" + Path(detect.__file__).read_text())
    os.chmod(stand_in, 0o755)
    monkeypatch.setenv("PAIRPROOF_PROBE", str(stand_in))
    assert cli.main(["scan", "--run", TEST_RUN, str(folder)]) == 1
    out = capsys.readouterr().out
    assert f"engine: static probe {stand_in}" in out and token in out
    broken = tmp_path / "broken"  # a scanner that reports nothing is bad input, never "no hits"
    broken.write_text("#!/bin/sh\nexit 0\n")
    os.chmod(broken, 0o755)
    monkeypatch.setenv("PAIRPROOF_PROBE", str(broken))
    assert cli.main(["scan", "--run", TEST_RUN, str(folder)]) == 2


def test_no_hits_with_a_path_it_could_not_read_is_not_clean(tmp_path, capsys, monkeypatch):
    """"Nothing found" is a claim about everything named: an unreadable file makes it exit 1, never 0."""
    monkeypatch.delenv("PAIRPROOF_PROBE", raising=False)
    (tmp_path / "clean.txt").write_text("nothing canary-shaped here\n")
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "inside.txt").write_text(token("inside") + "\n")
    locked.chmod(0)
    try:
        # root without the capabilities that bypass file modes: the 000 folder is then unreadable to it
        done = subprocess.run(["setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--",
                               sys.executable, "-m", "acceptance.cli", "scan", "--run", TEST_RUN, str(tmp_path)],
                              capture_output=True, text=True, cwd=Path(cli.__file__).resolve().parents[1])
    finally:
        locked.chmod(0o755)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "0 hits" in done.stdout and "not clean" in done.stderr
