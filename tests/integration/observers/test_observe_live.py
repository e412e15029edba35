"""Host-side observers (acceptance/harness/observers.py): read from a /proc laid out by hand, and from real processes.

The part of tests/unit/test_observe.py that the unit tier cannot hold: it starts a sandbox with unshare."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from acceptance.harness import observers as observe


def fake_process(proc: Path, pid: int, ppid: int, uid: int, comm: str, ns: dict[str, str]) -> None:
    base = proc / str(pid)
    (base / "ns").mkdir(parents=True)
    (base / "stat").write_text(f"{pid} ({comm}) S {ppid} 1 1 0 -1\n")
    (base / "status").write_text(f"Name:\t{comm}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    for kind, value in ns.items():
        os.symlink(value, base / "ns" / kind)


HOST = {"user": "user:[1]", "pid": "pid:[2]", "mnt": "mnt:[3]"}
BOX = {"user": "user:[10]", "pid": "pid:[20]", "mnt": "mnt:[30]"}


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    fake_process(tmp_path, 100, 1, 0, "pytest", HOST)
    fake_process(tmp_path, 101, 100, 0, "bwrap", HOST)  # the launcher: host namespaces
    fake_process(tmp_path, 102, 101, 1500, "bwrap", BOX)
    fake_process(tmp_path, 103, 102, 1500, "python3 (agent)", BOX)
    fake_process(tmp_path, 200, 1, 1600, "python3", BOX)  # in the box's namespaces, not below pytest
    return tmp_path


def test_a_real_sandbox_below_this_process_is_seen_and_gone_when_it_ends():
    """A child in a user and pid namespace of its own is one sandbox below this process; after it is
    killed, the observer (settling) sees none."""
    child = subprocess.Popen(["unshare", "--user", "--pid", "--fork", "--kill-child", "sleep", "30"])
    try:
        groups = observe.settle(observe.sandboxes, lambda g: any(p.comm == "sleep" for ps in g.values() for p in ps))
        # unshare entered the user namespace itself and forked sleep into the pid namespace: one sandbox
        assert [sorted(p.comm for p in ps) for ps in groups.values()] == [["sleep", "unshare"]]
    finally:
        child.kill()
        child.wait()
    assert observe.settle(observe.sandboxes, lambda g: not g) == {}
