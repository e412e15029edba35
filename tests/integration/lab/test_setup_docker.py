"""``tools/setup-docker`` starts our dockerd with none of its caller's descriptors: a daemon started under
``flock`` (as CI jobs that share the engine do) that kept the lock's descriptor would hold the lock as long as
it lives, and every job waiting on it would stall. The script is sourced for its launch function
(``launch_dockerd``), run with a stand-in daemon that lists the descriptors it was given; no engine is started
or stopped."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "tools" / "setup-docker"

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("flock") or not shutil.which("unshare"),
                                reason="needs root, flock and unshare (a network namespace of lo alone)")

# The stand-in daemon: where each of its descriptors points, one a line, then it exits. (Each line is appended
# by a redirection of its own, made after the readlink: the list is of the descriptors it was started with,
# besides the folder the listing reads and the pipe of each readlink.)
FAKE = """#!/bin/sh
for fd in /proc/$$/fd/*; do printf '%s %s\\n' "${fd##*/}" "$(readlink "$fd")" >> "$PP_FDS"; done
"""


def _descriptors_of_a_daemon_started_under_flock(tmp_path: Path, launch: str) -> dict[str, str]:
    """Run ``launch`` (shell text, after sourcing the script, with the state folder and the daemon pointed
    into ``tmp_path``) under ``flock`` on a lock file; return the stand-in daemon's descriptors."""
    fake, fds, lock = tmp_path / "dockerd", tmp_path / "fds", tmp_path / "engine.lock"
    fake.write_text(FAKE)
    fake.chmod(0o755)
    script = (f'source {SCRIPT} && ROOT={tmp_path} LOG={tmp_path}/dockerd.log PIDFILE={tmp_path}/dockerd.pid '
              f'DOCKERD={fake} SOCK={tmp_path}/docker.sock && {launch}\nwait')
    env = {**os.environ, "PP_FDS": str(fds)}
    subprocess.run(["flock", str(lock), "bash", "-c", script], env=env, check=True, timeout=60)
    lines = fds.read_text().splitlines()
    return dict(line.split(" ", 1) for line in lines)


def test_the_daemon_holds_no_descriptor_of_its_caller(tmp_path):
    """Started by ``launch_dockerd`` under ``flock``, the daemon has stdin from /dev/null, stdout and stderr to
    its log, and no descriptor above 2 but its own (its script, its listing): not the lock."""
    fds = _descriptors_of_a_daemon_started_under_flock(tmp_path, "launch_dockerd")
    assert {k: v for k, v in fds.items() if k in ("0", "1", "2")} == {
        "0": "/dev/null", "1": f"{tmp_path}/dockerd.log", "2": f"{tmp_path}/dockerd.log"}
    # (the shell running the stand-in keeps its own script open: /bin/sh reads it through a descriptor of its own)
    own = ("/proc/", "pipe:", str(tmp_path / "dockerd"))
    above = {k: v for k, v in fds.items() if int(k) > 2 and not v.startswith(own)}
    assert above == {}


def test_the_check_sees_a_lock_a_plain_launch_keeps(tmp_path):
    """The same check sees the lock held when the daemon is launched as setup-docker did before (setsid in the
    background, only 0, 1 and 2 redirected): the test above can fail."""
    plain = ('setsid unshare --net -- /bin/sh -c \'ip link set lo up && exec "$@"\' sh "$DOCKERD" '
             '</dev/null >"$LOG" 2>&1 &')
    fds = _descriptors_of_a_daemon_started_under_flock(tmp_path, plain)
    assert str(tmp_path / "engine.lock") in fds.values()


def test_stop_leaves_no_mount_under_the_engines_state_folder(tmp_path):
    """What a dockerd leaves (its data root bound onto itself, its network namespace's nsfs file under
    exec/netns): ``setup-docker stop`` unmounts every mount under the state folder, deepest first, whether or
    not a daemon was still running. The state folder is the test's own (``PAIRPROOF_DOCKER_ROOT``)."""
    root = tmp_path / "engine"
    (root / "data").mkdir(parents=True)
    (root / "exec" / "netns").mkdir(parents=True)
    (root / "exec" / "netns" / "default").touch()
    subprocess.run(["mount", "--bind", str(root / "data"), str(root / "data")], check=True)
    subprocess.run(["mount", "--bind", "/proc/self/ns/net", str(root / "exec" / "netns" / "default")], check=True)
    try:
        out = subprocess.run(["bash", str(SCRIPT), "stop"], env={**os.environ, "PAIRPROOF_DOCKER_ROOT": str(root)},
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        left = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()
                if line.split()[1].startswith(str(root) + "/")]
        assert left == [], left
        assert "unmounted" in out.stdout and "no dockerd of ours is running" in out.stdout
    finally:
        for mnt in (root / "exec" / "netns" / "default", root / "data"):
            subprocess.run(["umount", str(mnt)], capture_output=True)
