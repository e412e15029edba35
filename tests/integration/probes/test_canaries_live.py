"""Unit tests for canaries/: the token shape and Mint, the standalone detector, host-side scanning.

Detection tests each carry a control (the same framing with a real token is found) so that a
"no hits" assertion cannot pass merely because the detector is blind. Property tests run with a
derandomized Hypothesis profile so every run sees the same examples.


The part of tests/unit/test_canaries.py that the unit tier cannot hold: they run the detector as a script or under another uid."""

from __future__ import annotations

import binascii
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from support.tokens import TEST_RUN, token

from canaries import detect
from canaries.detect import scan_tree

REPO = Path(__file__).resolve().parents[3]
DETECT_PY = REPO / "canaries" / "detect.py"

KNOWN = token("known")


# --- detect.scan_tree ---------------------------------------------------------------------------


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _python_for(uid: int) -> str | None:
    """An interpreter that user `uid` may execute (the test's own may sit under /root)."""
    for candidate in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        try:
            subprocess.run([candidate, "-c", ""], user=uid, check=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            continue
        return candidate
    return None


def test_scan_tree_reports_permission_denied_instead_of_raising(tmp_path: Path) -> None:
    """Unreadable files and unlistable directories are reported as "path: permission denied";
    the readable file beside them is still scanned (the control)."""
    nobody = 65534
    # Root reads everything, so as root the probe is run as nobody, from a copy of detect.py
    # in a world-readable directory: the way it runs in a sandbox.
    top = Path(tempfile.mkdtemp(prefix="pairproof-perm-", dir="/tmp"))
    try:
        top.chmod(0o755)
        probe = Path(shutil.copy(DETECT_PY, top / "detect.py"))
        tree = top / "tree"
        tree.mkdir(mode=0o755)
        _write(tree / "readable.txt", KNOWN.encode()).chmod(0o644)
        locked = _write(tree / "locked.txt", token("locked").encode())
        locked.chmod(0o000)
        locked_dir = tree / "locked-dir"
        _write(locked_dir / "inner.txt", b"x")
        locked_dir.chmod(0o000)
        if os.geteuid() == 0:
            python = _python_for(nobody)
            if python is None:
                pytest.skip("no Python interpreter here is executable by uid 65534")
            done = subprocess.run(
                [python, "-I", str(probe), "--run", TEST_RUN, str(tree)],
                user=nobody,
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            )
            *lines, summary = done.stdout.splitlines()
            hits = [json.loads(line)["token"] for line in lines]
            problems = done.stderr.splitlines()
            record = json.loads(summary)
            assert (record["scanned_files"], record["errors"], record["end"]) == (1, 2, detect.END_MARK)
            assert sorted(record["problems"]) == sorted(problems)
        else:
            found, problems = scan_tree([str(tree)])
            hits = [hit.token for hit in found]
        assert hits == [KNOWN]
        assert sorted(problems) == [
            f"{locked_dir}: permission denied [EACCES]",
            f"{locked}: permission denied [EACCES]",
        ]
    finally:
        for path in (top / "tree" / "locked-dir", top / "tree" / "locked.txt"):
            if path.exists():
                path.chmod(0o700)
        shutil.rmtree(top)


def test_scan_tree_reads_only_environ_and_cmdline_of_proc() -> None:
    """Given /proc, a process's environment and arguments are scanned, and nothing else of it
    (not task/*/environ, not maps, not mem)."""
    in_env = token("env")
    in_argv = token("argv")
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", in_argv],
        env={**os.environ, "PAIRPROOF_TEST_CANARY": in_env},
    )
    try:
        hits, _ = scan_tree(["/proc"])
    finally:
        child.kill()
        child.wait()
    ours = {(hit.token, hit.where) for hit in hits if hit.token in (in_env, in_argv)}
    assert ours == {
        (in_env, f"/proc/{child.pid}/environ"),
        (in_argv, f"/proc/{child.pid}/cmdline"),
    }
    assert [hit.where for hit in hits if not re.fullmatch(r"/proc/\d+/(environ|cmdline)", hit.where)] == []


# --- detect.py as a standalone probe ------------------------------------------------------------


@pytest.mark.parametrize("how", ["path", "stdin"])
def test_detect_runs_as_an_isolated_script_printing_json_lines(tmp_path: Path, how: str) -> None:
    """`python3 -I canaries/detect.py DIR`, or the source fed on stdin (`python3 -I -S - DIR`, as
    the suite runs it in sandboxes), prints one JSON object per hit and a summary line."""
    raw = _write(tmp_path / "raw.txt", KNOWN.encode() + b"\n")
    hexed = _write(tmp_path / "sub" / "hex.txt", binascii.hexlify(KNOWN.encode() + b"\n"))
    if how == "path":
        command, source = [sys.executable, "-I", "canaries/detect.py", "--run", TEST_RUN, str(tmp_path)], None
    else:
        command, source = [sys.executable, "-I", "-S", "-", "--run", TEST_RUN, str(tmp_path)], DETECT_PY.read_text()
    done = subprocess.run(command, cwd=REPO, input=source, capture_output=True, text=True, timeout=60, check=True)
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert lines == [
        {"token": KNOWN, "encoding": "raw", "offset": 0, "where": str(raw)},
        {"token": KNOWN, "encoding": "hex", "offset": 0, "where": str(hexed)},
        {"scanned_files": 2, "errors": 0, "bytes": raw.stat().st_size + hexed.stat().st_size, "truncated": 0,
         "problems": [], "end": "pairproof-scan-end"},
    ]
    assert done.stderr == ""
