"""FS-2's probe (``acceptance/cases/inside/shared_probe.py``) run for real in a mount namespace of its own: the look
finds a marker below a mount point, in a folder the looking side has only read-only (its writer wrote there
through a mount of its own, where the folder was open to it)."""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import sys

from acceptance.cases.judges.sharing import PROBE


def _look_through_readonly_bind(tmp_path, marker: str, plant: bool) -> dict:
    src, view = tmp_path / "src", tmp_path / "view"
    (src / "deeper" / "sub").mkdir(parents=True)
    view.mkdir()
    if plant:
        (src / "deeper" / "sub" / f".pairproof-shared-{marker}").write_text("here\n")
    script = (f"mount --bind {src} {view} && mount -o remount,bind,ro {view} && "
              f"exec {sys.executable} -I -S - look {marker}")
    out = subprocess.run([shutil.which("unshare") or "unshare", "-rm", "sh", "-c", script], input=PROBE.read_bytes(),
                         capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    return json.loads(out.stdout.decode().strip().splitlines()[-1])


def test_look_finds_a_marker_below_a_read_only_mount_point(tmp_path):
    marker = secrets.token_hex(8)
    report = _look_through_readonly_bind(tmp_path, marker, plant=True)
    assert str(tmp_path / "view" / "deeper" / "sub") in report["seen"], report["seen"]


def test_look_sees_nothing_when_nothing_was_written(tmp_path):
    marker = secrets.token_hex(8)
    report = _look_through_readonly_bind(tmp_path, marker, plant=False)
    assert report["seen"] == []
