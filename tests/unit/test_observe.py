"""Host-side observers (acceptance/harness/observers.py): read from a /proc laid out by hand, and from real processes."""

from __future__ import annotations

import ast
import os
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


def test_processes_read_pid_parent_uid_name_and_namespaces(proc):
    agent = next(p for p in observe.processes(proc) if p.pid == 103)
    assert (agent.ppid, agent.uid, agent.comm, dict(agent.namespaces)) == (102, 1500, "python3 (agent)", BOX)


def test_members_are_every_process_in_the_namespaces_whoever_started_them(proc):
    assert sorted(p.pid for p in observe.members(BOX, observe.processes(proc))) == [102, 103, 200]


def test_descendants_follow_parent_links(proc):
    assert sorted(p.pid for p in observe.descendants(100, observe.processes(proc))) == [101, 102, 103]


def test_sandboxes_are_the_descendants_in_namespaces_of_their_own(proc):
    groups = observe.sandboxes(100, proc)
    assert {key: sorted(p.pid for p in ps) for key, ps in groups.items()} == {frozenset({"user:[10]", "pid:[20]"}): [102, 103]}
    assert observe.sandbox_of(BOX, groups) == frozenset({"user:[10]", "pid:[20]"})
    assert observe.sandbox_of(HOST, groups) is None


def test_sandboxes_include_the_watched_runs_cgroup_whoever_started_them(proc, monkeypatch):
    """A container engine's sandbox is no descendant of ours: the run's cgroup folder brings it in, and only
    that run's (another run's container, or a process of the box's namespaces elsewhere, stays out)."""
    engine = {"user": "user:[1]", "pid": "pid:[40]", "mnt": "mnt:[41]"}  # a container: host user namespace
    fake_process(proc, 300, 1, 1700, "python3", engine)
    fake_process(proc, 301, 1, 1800, "python3", {**engine, "pid": "pid:[50]"})
    (proc / "300" / "cgroup").write_text("7:memory:/pairproof/run1/c300\n6:pids:/pairproof/run1/c300\n")
    (proc / "301" / "cgroup").write_text("7:memory:/pairproof/run2/c301\n6:pids:/pairproof/run2/c301\n")
    assert frozenset({"pid:[40]"}) not in observe.sandboxes(100, proc)
    monkeypatch.setattr(observe, "_RUN_CGROUPS", [])
    observe.watch_run_cgroup("run1")
    groups = observe.sandboxes(100, proc)
    assert {key: sorted(p.pid for p in ps) for key, ps in groups.items()} == {
        frozenset({"user:[10]", "pid:[20]"}): [102, 103], frozenset({"pid:[40]"}): [300]}


def test_listening_ports_are_the_namespaces_listen_sockets(tmp_path):
    net = tmp_path / "7" / "net"
    net.mkdir(parents=True)
    header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    (net / "tcp").write_text(header +
                             "   0: 0100007F:223D 00000000:0000 0A 00000000:00000000 00:00000000 00000000  0 0 1\n"
                             "   1: 0100007F:223D 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  0 0 2\n")
    assert observe.listening_ports(7, tmp_path) == {("127.0.0.1", 8765)}


def test_cgroups_name_each_hierarchy(tmp_path):
    (tmp_path / "9").mkdir()
    (tmp_path / "9" / "cgroup").write_text("7:memory:/pairproof/r/i-g1\n6:pids:/pairproof/r/i-g1\n0::/\n")
    assert observe.cgroups(9, tmp_path) == {"memory": "/pairproof/r/i-g1", "pids": "/pairproof/r/i-g1", "": "/"}


def test_observe_imports_nothing_of_the_runtime():
    """The harness observes the host, never the runtime's internals."""
    tree = ast.parse(Path(observe.__file__).read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert {m for m in imported if m.split(".")[0] == "runtime"} == set()


@pytest.mark.parametrize(("state", "expected"), [("FROZEN", True), ("FREEZING", False), ("THAWED", False)])
def test_frozen_is_the_v1_freezer_done_freezing(tmp_path, state, expected):
    """FREEZING means some task of the cgroup may still run: not frozen yet."""
    proc, mount = tmp_path / "proc", tmp_path / "freezer"
    (proc / "7").mkdir(parents=True)
    (proc / "self").mkdir()
    (proc / "7" / "cgroup").write_text("4:freezer:/pp/a\n")
    (proc / "self" / "mountinfo").write_text(f"31 25 0:27 / {mount} rw - cgroup cgroup rw,freezer\n")
    (mount / "pp" / "a").mkdir(parents=True)
    (mount / "pp" / "a" / "freezer.state").write_text(state + "\n")
    assert observe.frozen(7, proc) is expected
