"""The socket sweep's walk (``acceptance/cases/inside/listeners.py``, which NT-1, NT-2 and NT-3 knock from) run for
real in a mount namespace of its own: a host socket bound in as a file, and a folder of sockets mounted under
/usr (which the walk skips for its size), are both found; /dev is walked; a walk past its limit says where it
stopped, and the sweep is refused."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

LISTENERS = Path(__file__).resolve().parents[3] / "acceptance" / "cases" / "inside"
MOUNT = "/usr/src"  # present on any Debian-like system; hidden by a tmpfs of the test's own mount namespace only


@pytest.fixture
def served(tmp_path):
    """A listening unix socket of this process, in a folder of its own."""
    folder = tmp_path / "svc"
    folder.mkdir()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(folder / "s"))
    server.listen(1)
    yield folder
    server.close()


def _swept(script: str) -> list[str]:
    code = (f"import sys, json; sys.path.insert(0, {str(LISTENERS)!r}); import listeners; "
            "print(json.dumps(sorted({e['path'] for e in listeners._socket_files() if e['proto'] == 'unix-file'})))")
    out = subprocess.run(["unshare", "-rm", "sh", "-c", f"{script} && exec {sys.executable} -I -S -c \"{code}\""],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_socket_bound_in_as_a_file_and_sockets_mounted_under_usr_are_found(served):
    found = _swept(f"mount -t tmpfs pp {MOUNT} && touch {MOUNT}/log && mkdir {MOUNT}/run && "
                   f"mount --bind {served}/s {MOUNT}/log && mount --bind {served} {MOUNT}/run")
    assert f"{MOUNT}/log" in found and f"{MOUNT}/run/s" in found, found


def test_nothing_under_usr_without_a_mount_there(served):
    found = _swept(f"mount -t tmpfs pp {MOUNT}")
    assert not [p for p in found if p.startswith(MOUNT + "/")], found


def _walk_record(script: str, limit: int) -> dict:
    """The walk's completeness record (``listeners.walk_record``) after a walk bounded at ``limit`` files."""
    code = (f"import sys, json; sys.path.insert(0, {str(LISTENERS)!r}); import listeners; "
            f"listeners.WALK_LIMIT = listeners.WALK['limit'] = {limit}; listeners._socket_files(); "
            "print(json.dumps(listeners.walk_record()))")
    out = subprocess.run(["unshare", "-rm", "sh", "-c", f"{script} && exec {sys.executable} -I -S -c \"{code}\""],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_walk_past_its_limit_says_where_it_stopped_and_the_sweep_is_refused():
    """The walk bounded at five files (it sees many more) says where it stopped, and the judge refuses the
    sweep (``sweep_problems``: broken, never a pass). (A complete walk's record is judged complete in
    tests/unit/test_sweep_completeness.py; walking the whole host here would take a minute.)"""
    from acceptance.cases.judges.netprobes import sweep_problems

    walk = _walk_record("true", 5)
    assert walk["cut"].startswith("stopped after 5 entries"), walk
    assert [p for p in sweep_problems({"walk": walk}) if "stopped after 5 entries" in p]
