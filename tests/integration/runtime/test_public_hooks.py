"""The runtime's public hooks a driver builds its broken arrangements from (issue 13 §2): each does what a
real platform's operation does, and each is undone whole. None of them weakens a guard by itself."""

from __future__ import annotations

import json
import logging
import os
import time
import urllib.request

import pytest

from runtime.controller import Controller
from runtime.platform import Platform, PlatformConfig
from runtime.snapshots import SnapshotError, SnapshotStore


def _get(url: str, token: str) -> tuple[int, dict]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_a_route_a_deployment_adds_is_removed_by_what_add_route_returned(platform_controller):
    product = platform_controller.platform.product
    before = product.routes()
    remove = product.add_route("GET", r"/api/operator/extra/(\d+)", "operator", lambda who, rid: {"rid": rid})
    token = product.operator_token("olga")
    assert _get(product.url + "/api/operator/extra/7", token) == (200, {"rid": "7"})
    remove()
    assert product.routes() == before
    assert _get(product.url + "/api/operator/extra/7", token)[0] == 404


def test_a_store_reads_a_record_whoever_asks_and_none_for_an_absent_one(platform_controller):
    store = platform_controller.platform.product.store
    assert store.record(987654) is None
    from runtime.product.store import Caller

    written = store.person_write(Caller("person", "org1", "alice"), "note", "private", "hello")
    record = store.record(written)
    assert (record["org"], record["owner"], record["body"]) == ("org1", "alice", "hello")
    assert store.audit(Caller("person", "org1", "alice")) == []  # reading the store is not an operator's read


def test_a_brokers_product_upstream_is_repointed_and_back(platform_controller):
    c = platform_controller
    record = c.wake(c.provision("org1", "alice").id)
    broker = c.broker(record.id)
    before = broker.set_product_upstream("http://127.0.0.1:9/")
    assert before == c.platform.product.url
    assert broker.product_url == "http://127.0.0.1:9"
    assert broker.set_product_upstream(before) == "http://127.0.0.1:9"
    assert broker.product_url == c.platform.product.url


class Marking:
    def seal(self, key: bytes, plain: bytes, aad: bytes) -> bytes:
        return b"MARK" + plain

    def open(self, key: bytes, sealed: bytes, aad: bytes) -> bytes:
        return sealed[4:]


def test_a_snapshot_store_seals_with_another_sealer_for_a_block_only(tmp_path):
    volume = tmp_path / "volume"
    volume.mkdir()
    (volume / "memory.md").write_text("- the blue door\n")
    store = SnapshotStore(tmp_path / "state")
    default = store.sealer
    with pytest.raises(RuntimeError):
        with store.sealed_with(Marking()):
            marked = store.take(volume, org="org1", user="alice", instance="i", generation=1)
            raise RuntimeError("the block failed")
    assert store.sealer is default
    assert store.path(marked.id) == marked.path and b"MARK" in marked.path.read_bytes()
    sealed = store.take(volume, org="org1", user="alice", instance="i", generation=1)
    assert b"MARK" not in sealed.path.read_bytes()
    with pytest.raises(SnapshotError):
        store.path("../escape")


def test_the_platform_holds_its_environment_while_it_runs_and_gives_it_back(root, monkeypatch):
    monkeypatch.setenv("PAIRPROOF_TEST_KEPT", "before")
    monkeypatch.delenv("PAIRPROOF_TEST_SECRET", raising=False)
    state = root / "runs" / "env"
    state.mkdir(parents=True)
    config = PlatformConfig("http://127.0.0.1:9", "k", environment={"PAIRPROOF_TEST_SECRET": "s3cret",
                                                                    "PAIRPROOF_TEST_KEPT": "during"})
    platform = Platform(state, config).start()
    try:
        assert (os.environ["PAIRPROOF_TEST_SECRET"], os.environ["PAIRPROOF_TEST_KEPT"]) == ("s3cret", "during")
    finally:
        platform.stop()
    assert "PAIRPROOF_TEST_SECRET" not in os.environ and os.environ["PAIRPROOF_TEST_KEPT"] == "before"


def test_the_platform_log_level_is_an_operators_setting(platform_controller):
    platform = platform_controller.platform
    assert platform.set_log_level(logging.DEBUG) == logging.INFO
    logging.getLogger("pairproof.test").debug("a debug line")
    assert platform.set_log_level(logging.INFO) == logging.DEBUG
    logging.getLogger("pairproof.test").debug("not written")
    log = platform.read_log()
    assert "a debug line" in log and "not written" not in log


def test_an_extra_sandbox_runs_as_asked_and_leaves_nothing(controller: Controller):
    uid = controller.spare_uid(0)
    assert uid not in {r.uid for r in controller.instances()}
    proc = controller.launch_extra("extra-1", ("/bin/sleep", "infinity"), uid=uid)
    home = controller.state / "extra" / "extra-1"
    try:
        assert proc.alive() and proc.spec.uid == uid and proc.spec.volume == home / "volume"
        status = open(f"/proc/{proc.host_pid}/status").read()
        assert f"Uid:\t{uid}\t" in status
    finally:
        controller.remove_extra("extra-1")
    assert not proc.alive() and not home.exists()
    assert [f for f in proc.cgroup.procs_files if f.parent.exists()] == []


def test_an_extra_sandbox_gets_the_argv_its_caller_edits(controller: Controller):
    seen = []

    def edit(argv: list[str]) -> list[str]:
        seen.append(list(argv))
        cut = argv.index("--")
        return argv[:cut] + ["--setenv", "PAIRPROOF_EXTRA", "edited"] + argv[cut:]

    command = ("/bin/sh", "-c", "env > /data/env.tmp && mv /data/env.tmp /data/env && exec sleep infinity")
    proc = controller.launch_extra("extra-2", command, uid=controller.spare_uid(1), edit=edit)
    try:
        assert seen and "bwrap" in seen[0] and "--clearenv" in seen[0]
        written = proc.spec.volume / "env"
        end = time.monotonic() + 10
        while not written.exists():
            assert proc.alive() and time.monotonic() < end, "the extra sandbox never wrote its environment"
            time.sleep(0.01)
        assert "PAIRPROOF_EXTRA=edited" in written.read_text().splitlines()
    finally:
        controller.close()
    assert not proc.alive() and not (controller.state / "extra").exists()


def test_volume_and_snapshot_paths_are_the_platforms_own(platform_controller):
    c = platform_controller
    record = c.wake(c.provision("org1", "alice").id)
    assert c.volume_path(record.id).is_dir()
    snap = c.snapshot(record.id)
    assert c.snapshot_path(snap.id) == snap.path and snap.path.is_file()
