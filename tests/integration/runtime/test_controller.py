"""The controller's lifecycle, on real sandboxes: one instance per (org, user), generations, restart."""

from __future__ import annotations

import json
import os

import pytest

from runtime.controller import Controller
from runtime.errors import ConfigError, InstanceError, SandboxError


def _memory(controller, instance_id: str) -> str:
    """The agent's memory file, as the instance itself reads it."""
    return controller.exec(instance_id, ["/bin/cat", "/data/memory.md"]).stdout.decode()


def test_one_instance_per_pair_and_a_person_in_two_orgs_gets_two(controller):
    a1 = controller.provision("org1", "alice")
    a2 = controller.provision("org2", "alice")
    assert a1.id != a2.id and a1.uid != a2.uid
    with pytest.raises(InstanceError, match="one instance per \\(org, user\\) pair"):
        controller.provision("org1", "alice")


def test_lifecycle_keeps_the_volume_and_bumps_the_generation_on_recreate(controller):
    rec = controller.provision("org1", "alice")
    controller.wake(rec.id)
    controller.turn(rec.id, "remember: the blue door")
    first_pid = controller.sandbox(rec.id).host_pid
    again = controller.recreate(rec.id)
    assert again.generation == rec.generation + 1
    assert controller.sandbox(rec.id).host_pid != first_pid
    assert "the blue door" in _memory(controller, rec.id)
    controller.sleep(rec.id)
    assert controller.get(rec.id).state == "sleeping"
    with pytest.raises(InstanceError, match="not running"):
        controller.exec(rec.id, ["true"])
    controller.wake(rec.id)
    assert "the blue door" in _memory(controller, rec.id)
    controller.destroy(rec.id)
    with pytest.raises(InstanceError, match="destroyed"):
        controller.wake(rec.id)
    assert not (controller.state / "instances" / rec.id).exists()


def test_a_restarted_controller_finds_its_instances_asleep(root):
    """Sandboxes die with their controller; the registry on disk keeps the instances, which wake again
    with their memory and generation."""
    run = f"restart-{os.getpid()}"
    first = Controller(root, run)
    rec = first.provision("org1", "bob")
    first.wake(rec.id)
    first.turn(rec.id, "remember: kept across restarts")
    first.recreate(rec.id)
    first.close(keep_state=True)
    second = Controller(root, run)
    try:
        found = second.find("org1", "bob")
        assert (found.id, found.uid, found.generation, found.state) == (rec.id, rec.uid, 2, "sleeping")
        second.wake(found.id)
        assert "kept across restarts" in _memory(second, found.id)
    finally:
        second.close()


def test_volume_is_private_to_the_instance_uid(controller):
    rec = controller.provision("org1", "carol")
    volume = controller.state / "instances" / rec.id / "volume"
    st = volume.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (rec.uid, rec.uid, 0o700)


def test_a_crashed_sandbox_is_reported_not_running(controller):
    rec = controller.provision("org1", "dave")
    controller.wake(rec.id)
    controller.crash(rec.id)
    with pytest.raises(InstanceError, match="not running"):
        controller.exec(rec.id, ["true"])


@pytest.mark.parametrize("org,user", [("Org1", "alice"), ("org1", "a/b"), ("", "x"), ("org1", "x" * 40)])
def test_bad_names_are_refused_before_anything_is_created(controller, org, user):
    before = list((controller.state).rglob("*"))
    with pytest.raises(ConfigError, match="is invalid"):
        controller.provision(org, user)
    assert list((controller.state).rglob("*")) == before


def test_a_state_folder_others_cannot_enter_is_refused(tmp_path):
    # pytest's tmp_path lives under a 0700 folder: no instance uid could reach its volume there.
    with pytest.raises(ConfigError, match="other users cannot enter"):
        Controller(tmp_path / "state", "x")


def test_exec_timeout_kills_the_command(controller):
    rec = controller.provision("org1", "erin")
    controller.wake(rec.id)
    with pytest.raises(SandboxError, match="ran past"):
        controller.exec(rec.id, ["sleep", "30"], timeout=0.5)
    assert controller.exec(rec.id, ["echo", "still fine"]).stdout == b"still fine\n"


def test_turns_go_to_the_agents_own_api_and_the_agent_serves_no_control_socket(controller):
    """No shim in the agent: a turn is a run of its run-control API, reached from the host in its network
    namespace, and the agent serves no unix socket (the control socket it once had) anywhere it can write."""
    rec = controller.provision("org1", "ana")
    controller.wake(rec.id)
    assert controller.turn(rec.id, "hello") == "Noted."  # no platform: the agent answers without a model
    status, raw = controller.agent_api(rec.id, "GET", "/v1/sessions")
    assert status == 200 and json.loads(raw)["items"]  # the run that turn was
    sockets = controller.exec(rec.id, ["/usr/bin/find", "/run/agent", "/data", "/tmp", "-type", "s"])
    assert (sockets.rc, sockets.stdout) == (0, b"")
