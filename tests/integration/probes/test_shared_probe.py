"""FS-2's probe (``acceptance/cases/inside/shared_probe.py``) run for real in a mount namespace of its own: the look
finds a marker below a mount point, in a folder the looking side has only read-only (its writer wrote there
through a mount of its own, where the folder was open to it); a walk with more folders than its limit says
where it stopped, and the judge refuses it."""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import sys

import pytest

from acceptance.cases.judges.sharing import PROBE, walk_problems


def _look_through_readonly_bind(tmp_path, marker: str, plant: bool, probe: bytes | None = None,
                                folders: int = 0) -> dict:
    src, view = tmp_path / "src", tmp_path / "view"
    (src / "deeper" / "sub").mkdir(parents=True)
    for n in range(folders):
        (src / "many" / f"f{n}").mkdir(parents=True)
    view.mkdir()
    if plant:
        (src / "deeper" / "sub" / f".pairproof-shared-{marker}").write_text("here\n")
    script = (f"mount --bind {src} {view} && mount -o remount,bind,ro {view} && "
              f"exec {sys.executable} -I -S - look {marker}")
    out = subprocess.run([shutil.which("unshare") or "unshare", "-rm", "sh", "-c", script],
                         input=probe or PROBE.read_bytes(), capture_output=True, timeout=60)
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


def _with_limit(limit: int) -> bytes:
    text = PROBE.read_text()
    line = next(s for s in text.splitlines() if s.startswith("WALK_DIRS = "))
    return text.replace(line, f"WALK_DIRS = {limit}", 1).encode()


@pytest.mark.parametrize("limit, cut", [(5, True), (100000, False)])
def test_a_walk_past_its_limit_says_where_it_stopped_and_is_refused(tmp_path, limit, cut):
    """Twenty folders under the read-only mount and a walk limit of five (the probe's text with a small limit):
    the look's completeness record names the mount whose walk was cut, and the judge refuses it; with the
    probe's own limit the same walk is complete and judged so (the refusal can be told from the pass)."""
    report = _look_through_readonly_bind(tmp_path, secrets.token_hex(8), plant=False, probe=_with_limit(limit),
                                         folders=20)
    view = str(tmp_path / "view")
    assert (view in report["walk"]["cut"]) == cut, report["walk"]
    problems = walk_problems(report, "A", "look")
    assert bool([p for p in problems if "stopped its walk" in p and view in p]) == cut, problems
