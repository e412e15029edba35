"""The three sleep depths on real sandboxes and the host's own cgroup files: frozen keeps the processes (the
kernel reports them frozen, their memory still charged), stopped ends them, snapshotted removes the volume
and brings it back on wake; every wake says which depth it came from; a thaw re-checks authority."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from acceptance.harness import observers as observe
from runtime import capacity
from runtime.authority.broker import AGENT_PORT
from runtime.authority.capabilities import AuthorityError
from runtime.controller import SleepPolicy
from runtime.errors import CapacityRefused, ConfigError
from runtime.isolation.cgroups import V1Cgroup, V2Cgroup
from runtime.isolation.netns import socket_in


def _kernel_says_frozen(cg) -> bool:
    """Read straight from the cgroup files, not through the Cgroup object's own ``frozen()``."""
    if isinstance(cg, V1Cgroup):
        return (cg.freezer_dir / "freezer.state").read_text().strip() == "FROZEN"
    assert isinstance(cg, V2Cgroup)
    return "frozen 1" in (cg.directory / "cgroup.events").read_text().splitlines()


def _task_states(pids) -> set[str]:
    states = set()
    for pid in pids:
        try:
            states.add(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0])
        except FileNotFoundError:
            pass
    return states


def _memory(controller, instance_id: str) -> str:
    return controller.exec(instance_id, ["/bin/cat", "/data/memory.md"]).stdout.decode()


def test_frozen_keeps_the_processes_frozen_and_charged_and_a_wake_thaws_them(controller):
    rec = controller.provision("org1", "alice")
    controller.wake(rec.id)
    proc = controller.sandbox(rec.id)
    pids = proc.cgroup.pids()
    controller.sleep(rec.id, "frozen")
    assert controller.get(rec.id).state == "frozen"
    assert _kernel_says_frozen(proc.cgroup)
    # Each process frozen by the freezer cgroup it is *in* (read from its own /proc/<pid>/cgroup): a frozen
    # cgroup the processes were never put in reads FROZEN too, and freezes nothing.
    assert {pid: observe.frozen(pid) for pid in pids} == dict.fromkeys(pids, True)
    assert proc.cgroup.pids() == pids  # the very processes are kept
    assert proc.cgroup.memory_current() > 0  # still charged
    woke = controller.wake(rec.id)
    assert woke.woke_from == "frozen" and woke.state == "running"
    assert not _kernel_says_frozen(proc.cgroup)
    assert {pid: observe.frozen(pid) for pid in pids} == dict.fromkeys(pids, False)
    assert controller.sandbox(rec.id).host_pid == proc.host_pid
    assert "T" not in _task_states(pids) and controller.exec(rec.id, ["true"]).rc == 0


def test_every_wake_says_its_depth_and_snapshotted_keeps_the_volume_only_in_the_store(platform_controller):
    c = platform_controller
    rec = c.provision("org1", "alice")
    assert c.wake(rec.id).woke_from == "provisioned"
    assert c.wake(rec.id).woke_from == "running"
    c.turn(rec.id, "remember: the green gate")
    c.sleep(rec.id, "stopped")
    assert c.wake(rec.id).woke_from == "stopped"
    c.sleep(rec.id, "snapshotted")
    assert c.get(rec.id).state == "snapshotted"
    assert not c.volume_path(rec.id).exists()
    assert len(list(c.snapshots.dir.glob("*.snap"))) == 1
    assert c.wake(rec.id).woke_from == "snapshotted"
    assert "the green gate" in _memory(c, rec.id)
    assert list(c.snapshots.dir.glob("*.snap")) == []  # the parking snapshot goes once the volume is back
    with pytest.raises(ConfigError, match="sleep depth"):
        c.sleep(rec.id, "hibernated")


def _model_call(c, capability: str) -> int:
    request = urllib.request.Request(c.platform.proxy.url + "/v1/chat/completions",
                                     json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode(),
                                     {"Authorization": f"Bearer {capability}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _runctl(broker, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(broker.runctl_url + path, timeout=10) as response:
            return response.status, ""
    except urllib.error.HTTPError as exc:
        return exc.code, (json.loads(exc.read()).get("error") or {}).get("reason", "")


def test_a_frozen_broker_refuses_at_once_and_answers_again_after_the_thaw(platform_controller):
    c = platform_controller
    rec = c.provision("org1", "alice")
    c.wake(rec.id)
    c.sleep(rec.id, "frozen")
    broker = c.broker(rec.id)
    assert _runctl(broker, "/v1/runs/run_none") == (503, "instance_frozen")
    assert broker.refusals[-1] == ("GET /v1/runs/run_none", "instance_frozen")
    # The agent side too (the frozen agent cannot ask, but nothing else in its namespace may either).
    with socket_in(c.sandbox(rec.id).host_pid) as sock:
        sock.settimeout(5)
        sock.connect(("127.0.0.1", AGENT_PORT))
        sock.sendall(b"GET /whoami HTTP/1.0\r\n\r\n")
        assert sock.recv(4096).split(b"\r\n", 1)[0].split()[1] == b"503"
    assert broker.refusals[-1] == ("/whoami", "instance_frozen")
    c.wake(rec.id)
    assert _runctl(broker, "/v1/runs/run_none") == (404, "")  # the agent's own answer: no such run


def test_a_thaw_renews_only_authority_not_revoked_while_frozen(platform_controller):
    c = platform_controller
    a, b = c.provision("org1", "alice"), c.provision("org1", "bob")
    held = {}
    for rec in (a, b):
        c.wake(rec.id)
        held[rec.id] = c.broker(rec.id).hand_out_capabilities("test")["model"]
        c.sleep(rec.id, "frozen")
        assert _model_call(c, held[rec.id]) == 403  # suspended while frozen
    c.revoke(a.id)
    for rec in (a, b):
        assert c.wake(rec.id).woke_from == "frozen"
    now = {rec.id: c.broker(rec.id).hand_out_capabilities("test")["model"] for rec in (a, b)}
    assert _model_call(c, now[b.id]) == 200  # renewed
    assert _model_call(c, held[b.id]) != 200  # the pre-freeze lease ended at the thaw
    assert _model_call(c, now[a.id]) != 200 and _model_call(c, held[a.id]) != 200  # revoked while frozen
    with pytest.raises(AuthorityError, match="revoked"):
        c.platform.current.check(c.platform.models.verify(now[a.id]))


def test_a_rotation_while_frozen_lifts_no_suspension(platform_controller):
    c = platform_controller
    rec = c.provision("org1", "alice")
    c.wake(rec.id)
    c.sleep(rec.id, "frozen")
    c.rotate(rec.id)  # a routine rotation comes due while the instance is frozen
    rotated = c.broker(rec.id).hand_out_capabilities("test")["model"]
    assert _model_call(c, rotated) == 403  # still suspended: only the thaw admits a lease again
    with pytest.raises(AuthorityError, match="frozen"):
        c.platform.current.check(c.platform.models.verify(rotated))
    assert c.wake(rec.id).woke_from == "frozen"
    assert _model_call(c, c.broker(rec.id).hand_out_capabilities("test")["model"]) == 200


def test_a_thaw_is_admitted_as_a_wake_and_one_refused_stays_frozen(controller):
    """A frozen instance is resident but idle; its thaw makes it active, so admission judges it like any wake:
    on a host with room for it idle only, the thaw is refused with the reason and the instance stays frozen."""
    c = controller
    rec = c.provision("org1", "alice")
    c.wake(rec.id)
    proc = c.sandbox(rec.id)
    c.sleep(rec.id, "frozen")
    b, room = c.budget, c.host
    c.host = capacity.Host(memory_mb=b.shared_memory_mb + b.memory_headroom_mb + b.idle_instance_mb + b.broker_mb,
                           disk_mb=room.disk_mb)
    with pytest.raises(CapacityRefused, match="memory"):
        c.wake(rec.id)
    assert c.get(rec.id).state == "frozen" and _kernel_says_frozen(proc.cgroup)
    c.host = room
    assert c.wake(rec.id).woke_from == "frozen" and not _kernel_says_frozen(proc.cgroup)


def test_policy_freezes_recent_stops_older_and_snapshots_the_long_idle():
    policy = SleepPolicy(freeze_below_s=60, stop_below_s=3600, pressure=0.5)
    assert policy.depth(10, 0.1) == "frozen"
    assert policy.depth(10, 0.9) == "stopped"  # under memory pressure a frozen instance's memory is too dear
    assert policy.depth(600, 0.1) == "stopped"
    assert policy.depth(7200, 0.1) == "snapshotted"


def test_sleep_by_policy_goes_to_the_depth_the_policy_names(controller):
    rec = controller.provision("org1", "alice")
    for policy, depth in ((SleepPolicy(freeze_below_s=3600), "frozen"),
                          (SleepPolicy(freeze_below_s=0, stop_below_s=3600), "sleeping"),
                          (SleepPolicy(freeze_below_s=0, stop_below_s=0), "snapshotted"),
                          # under memory pressure (every MB of the host counted as used) a recent one is stopped
                          (SleepPolicy(freeze_below_s=3600, pressure=0.0), "sleeping")):
        controller.wake(rec.id)
        controller.policy = policy
        assert controller.sleep_by_policy(rec.id).state == depth
    assert controller.wake(rec.id).woke_from == "stopped"


def test_a_frozen_instance_stops_crashes_and_is_destroyed_without_waiting(controller):
    """A frozen v1 task takes its SIGKILL only once thawed: stop, crash and destroy must not hang on it."""
    rec = controller.provision("org1", "alice")
    for end in ("stopped", "crash", "destroy"):
        controller.wake(rec.id)
        proc = controller.sandbox(rec.id)
        controller.sleep(rec.id, "frozen")
        started = time.monotonic()
        if end == "stopped":
            controller.sleep(rec.id, "stopped")
        elif end == "crash":
            controller.crash(rec.id)
            assert controller.wake(rec.id).woke_from == "stopped"  # the dead sandbox is cleared, a cold start
            controller.sleep(rec.id, "stopped")
        else:
            controller.destroy(rec.id)
        assert time.monotonic() - started < 3.0
        assert not proc.alive() and proc.cgroup.pids() == set()


def _cgroup2_mount() -> Path | None:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if right.split()[0] == "cgroup2":
            return Path(left.split()[4])
    return None


def test_the_v2_freezer_freezes_and_thaws_a_real_process():
    """cgroup.freeze and cgroup.events on the host's cgroup2 mount (present beside v1 here, with no controllers
    enabled, which the freezer does not need)."""
    mount = _cgroup2_mount()
    if mount is None:
        pytest.skip("no cgroup2 mount on this host: the v2 freezer cannot be exercised here")
    directory = mount / f"pairproof-freezer-test-{os.getpid()}"
    directory.mkdir()
    child = subprocess.Popen(["sleep", "30"])
    try:
        cg = V2Cgroup(directory, directory.name)
        cg.add(child.pid)
        cg.freeze()
        assert _kernel_says_frozen(cg) and cg.frozen()
        cg.thaw()
        assert not _kernel_says_frozen(cg) and not cg.frozen()
        cg.freeze()
        cg.kill_all()  # thaws first, and the process dies
        assert child.wait(5) == -9
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        directory.rmdir()


def test_a_snapshot_of_a_running_instance_is_taken_with_its_processes_frozen(controller, monkeypatch):
    """Issue 28: a live snapshot read the volume while the agent ran, free to swap names under the packer. Now a
    running instance's processes are frozen (each by the freezer cgroup it is in) for exactly the pack, and run
    again after; an instance frozen already stays frozen."""
    rec = controller.provision("org1", "alice")
    controller.wake(rec.id)
    proc = controller.sandbox(rec.id)
    pids = proc.cgroup.pids()
    seen = []
    take = controller.snapshots.take

    def watched(*args, **kwargs):
        seen.append({pid: observe.frozen(pid) for pid in pids})
        return take(*args, **kwargs)

    monkeypatch.setattr(controller.snapshots, "take", watched)
    snap = controller.snapshot(rec.id)
    assert seen == [dict.fromkeys(pids, True)], seen
    assert {pid: observe.frozen(pid) for pid in pids} == dict.fromkeys(pids, False)
    assert controller.exec(rec.id, ["/bin/true"]).rc == 0 and proc.cgroup.pids() == pids
    assert snap.id in {s.id for s in controller.snapshots.list("org1", "alice")}
    controller.sleep(rec.id, "frozen")
    controller.snapshot(rec.id)
    assert _kernel_says_frozen(proc.cgroup) and all(observe.frozen(pid) for pid in pids)
