"""The example driver in examples/local-driver (nsbox, written by following docs/writing-a-driver.md) keeps
passing ``pairproof check-driver`` exactly as the doc tells a reader to run it: its core, the sandbox rules
and the five broken arrangements it claims work, every other facet is reported missing (never claimed), and
nothing it started is left behind; without its profile it refuses up front (exit 2, naming the fix). About
5-10 s on two busy cores, so not marked slow."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from acceptance.contract import FACETS
from acceptance.contract.sandbox import RULES

CHECKOUT = Path(__file__).resolve().parents[3]
EXAMPLE = CHECKOUT / "examples" / "local-driver"
CLAIMED = {"broken_shared_volume", "broken_shared_tmp", "broken_shared_pid_ns", "broken_same_uid",
           "broken_host_account_uid"}


def check_driver(*extra: str, state_dir: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(CHECKOUT), str(EXAMPLE)])}
    return subprocess.run([sys.executable, "-m", "acceptance.cli", "check-driver", "nsbox_driver:create",
                           "--state-dir", str(state_dir), *extra], cwd=CHECKOUT, env=env, capture_output=True,
                          text=True, timeout=180)


@pytest.fixture
def state_dir():
    """nsbox's sandboxes bind their volume as their own uid: the state folder must be traversable by it
    (pytest's tmp_path, under a 0700 folder, is not)."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="nsbox-example-", dir="/var/tmp"))
    path.chmod(0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_the_example_driver_passes_check_driver(state_dir):
    result = check_driver("--profile", str(EXAMPLE / "nsbox-agent.toml"), state_dir=state_dir)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [line.split(None, 2) for line in result.stdout.splitlines() if line.startswith("  ")]
    found = {parts[0]: parts[1] for parts in lines}
    expected = {name: ("works" if name in CLAIMED else "missing") for name in FACETS}
    assert found == {"core": "works", **dict.fromkeys(RULES, "works"), **expected, "close": "works"}, result.stdout
    assert "check-driver: PASSED" in result.stdout
    assert list(state_dir.iterdir()) == [], "the driver left its state folder behind"
    assert "nsbox-" not in Path("/proc/self/mountinfo").read_text()
    for hierarchy in ("", "memory", "pids"):
        folder = Path("/sys/fs/cgroup") / hierarchy
        if folder.is_dir():
            assert not [p.name for p in folder.glob("nsbox-nsbox-check*")], f"cgroups left in {folder}"


def test_the_example_driver_refuses_a_profile_it_cannot_run(state_dir):
    result = check_driver(state_dir=state_dir)  # the reference profile: runs-style turns, a broker's key
    assert result.returncode == 2, result.stdout + result.stderr
    assert "nsbox delivers only sync turns" in result.stderr and "nsbox-agent.toml" in result.stderr
