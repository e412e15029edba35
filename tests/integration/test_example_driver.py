"""The example driver in examples/local-driver (nsbox, written by following docs/writing-a-driver.md) keeps
passing ``pairproof check-driver`` exactly as the doc tells a reader to run it: its core and the five
broken arrangements it claims work, every other facet is reported missing (never claimed), and nothing
it started is left behind. About 3 s, so not marked slow."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from acceptance.contract import FACETS

CHECKOUT = Path(__file__).resolve().parent.parent.parent
EXAMPLE = CHECKOUT / "examples" / "local-driver"
CLAIMED = {"broken_shared_volume", "broken_shared_tmp", "broken_shared_pid_ns", "broken_same_uid",
           "broken_host_account_uid"}


def test_the_example_driver_passes_check_driver(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(CHECKOUT), str(EXAMPLE)])}
    result = subprocess.run([sys.executable, "-m", "acceptance.cli", "check-driver", "nsbox_driver:create",
                             "--state-dir", str(tmp_path)], cwd=CHECKOUT, env=env, capture_output=True,
                            text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [line.split(None, 2) for line in result.stdout.splitlines() if line.startswith("  ")]
    found = {parts[0]: parts[1] for parts in lines}
    expected = {name: ("works" if name in CLAIMED else "missing") for name in FACETS}
    assert found == {"core": "works", **expected, "close": "works"}, result.stdout
    assert "check-driver: PASSED" in result.stdout
    assert list(tmp_path.iterdir()) == [], "the driver left its state folder behind"
    assert "nsbox-" not in Path("/proc/self/mountinfo").read_text()
    for hierarchy in ("", "memory", "pids"):
        folder = Path("/sys/fs/cgroup") / hierarchy
        if folder.is_dir():
            assert not [p.name for p in folder.glob("nsbox-nsbox-check*")], f"cgroups left in {folder}"
