"""cgroup v1 and v2 backends. v1 is exercised for real by the runtime tests on this machine; v2 (which
this machine cannot offer with a memory controller) is checked here against a fake cgroupfs folder for
the files it writes, and behaviourally wherever CI has a v2-only host (the RS-1 case then runs on it)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from runtime.errors import PreflightError
from runtime.isolation import cgroups
from runtime.isolation.cgroups import Limits


def _fake_v2(tmp_path: Path) -> Path:
    mount = tmp_path / "cg2"
    mount.mkdir()
    (mount / "cgroup.controllers").write_text("cpu io memory pids\n")
    (mount / "cgroup.subtree_control").write_text("")
    return mount


def test_v2_enables_controllers_top_down_and_writes_hard_limits(tmp_path, monkeypatch):
    mount = _fake_v2(tmp_path)
    # A real cgroupfs creates the control files on mkdir; emulate that for the leaf and its parents.
    real_mkdir = Path.mkdir

    def mkdir(self, *a, **k):
        real_mkdir(self, *a, **k)
        for name in ("cgroup.subtree_control", "cgroup.procs", "memory.swap.max"):
            (self / name).touch()
    monkeypatch.setattr(Path, "mkdir", mkdir)
    cg = cgroups.V2Hierarchy(mount).create("run1", "inst-g1", Limits(256 << 20, 64))
    assert (mount / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    assert (mount / "pairproof" / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    assert (mount / "pairproof" / "run1" / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    leaf = mount / "pairproof" / "run1" / "inst-g1"
    assert (leaf / "memory.max").read_text() == str(256 << 20)
    assert (leaf / "memory.swap.max").read_text() == "0"
    assert (leaf / "pids.max").read_text() == "64"
    assert (leaf / "cpu.max").read_text() == "100000 100000"  # one CPU's worth by default
    assert cg.procs_files == (leaf / "cgroup.procs",)


def test_v2_counts_oom_kills_from_memory_events(tmp_path):
    leaf = tmp_path / "leaf"
    leaf.mkdir()
    (leaf / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert cgroups.V2Cgroup(leaf, "x").oom_kills() == 1


def _mountinfo(tmp_path: Path, lines: list[str]) -> str:
    path = tmp_path / "mountinfo"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_detect_prefers_v2_with_both_controllers(tmp_path):
    mount = _fake_v2(tmp_path)
    info = _mountinfo(tmp_path, [f"30 1 0:26 / {mount} rw - cgroup2 cgroup2 rw"])
    assert isinstance(cgroups.detect(info), cgroups.V2Hierarchy)


def test_detect_falls_back_to_v1_when_v2_lacks_memory(tmp_path):
    v2 = tmp_path / "unified"
    v2.mkdir()
    (v2 / "cgroup.controllers").write_text("")
    info = _mountinfo(tmp_path, [
        f"30 1 0:26 / {v2} rw - cgroup2 cgroup2 rw",
        "31 1 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory",
        "32 1 0:28 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids",
    ])
    h = cgroups.detect(info)
    assert isinstance(h, cgroups.V1Hierarchy)
    assert (h.memory_mount, h.pids_mount) == (Path("/sys/fs/cgroup/memory"), Path("/sys/fs/cgroup/pids"))


def test_detect_without_controllers_says_what_to_do(tmp_path):
    info = _mountinfo(tmp_path, ["31 1 0:27 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu"])
    with pytest.raises(PreflightError, match="memory and pids controllers"):
        cgroups.detect(info)


@pytest.mark.parametrize("memory,pids", [(1 << 20, 64), (256 << 20, 2)])
def test_limits_refuse_values_no_agent_survives(memory, pids):
    with pytest.raises(ValueError):
        Limits(memory, pids)


class _Going:
    """A cgroup file whose cgroup its engine is removing: kernfs answers ENODEV to an open of it."""

    def read_text(self):
        raise OSError(errno.ENODEV, "No such device")


class _Broken:
    def read_text(self):
        raise OSError(errno.EACCES, "Permission denied")


def test_a_cgroup_being_removed_reads_as_gone_not_as_an_error():
    """Seen on the docker target: the controller's stop of a container whose pid 1 was just killed read its
    cgroup while Docker removed it, and the recovery failed on ENODEV."""
    assert cgroups._text_if_there(_Going()) is None
    assert cgroups._read_pids((_Going(),)) == set()
    with pytest.raises(OSError, match="Permission denied"):
        cgroups._text_if_there(_Broken())


def test_v1_writes_a_cpu_quota_where_the_cpu_controller_is_mounted(tmp_path):
    mounts = {name: tmp_path / name for name in ("memory", "pids", "cpu")}
    for m in mounts.values():
        m.mkdir()
    cg = cgroups.V1Hierarchy(mounts["memory"], mounts["pids"], None, mounts["cpu"]).create(
        "run1", "inst-g1", Limits(256 << 20, 64, cpu_millis=500))
    leaf = mounts["cpu"] / "pairproof" / "run1" / "inst-g1"
    assert (leaf / "cpu.cfs_period_us").read_text() == "100000"
    assert (leaf / "cpu.cfs_quota_us").read_text() == "50000"
    assert leaf / "cgroup.procs" in cg.procs_files
