"""The container configuration the runtime's Docker engine creates every instance with carries every guard
the platform decides (``runtime.isolation.containers.container_config``): read as data, no engine needed. The
containers' behaviour under these settings is checked in tests/integration/docker."""

from __future__ import annotations

from pathlib import Path

from runtime.isolation.cgroups import Limits
from runtime.isolation.containers import LABEL_INSTANCE, LABEL_RUN, container_config
from runtime.isolation.sandbox import SandboxSpec

SPEC = SandboxSpec(instance_id="org1-alice-0", uid=1234567, gid=1234567, volume=Path("/state/v"),
                   control_dir=Path("/state/c"), etc_dir=Path("/state/etc"), image_dir=Path("/state/image"),
                   hostname="agent", env=(("PAIRPROOF_BROKER", "http://127.0.0.1:8765"),),
                   managed_config=Path("/state/managed.json"))


def _config() -> dict:
    return container_config(SPEC, Limits(256 << 20, 64), ["/usr/bin/python3", "agent.py"], image="img:1",
                            run="r1", name="pairproof-r1-x")


def test_every_guard_is_set():
    config = _config()
    assert config["network_mode"] == "none"
    assert config["user"] == "1234567:1234567"
    assert config["read_only"] is True
    assert config["cap_drop"] == ["ALL"] and "cap_add" not in config
    assert config["security_opt"][0] == "no-new-privileges" and len(config["security_opt"]) == 2
    import json

    profile = json.loads(config["security_opt"][1].removeprefix("seccomp="))  # the platform's, not unconfined
    refused = {n for rule in profile["syscalls"] if rule["action"] == "SCMP_ACT_ERRNO" and "args" not in rule
               for n in rule["names"]}
    assert {"io_uring_setup", "io_uring_enter", "keyctl", "add_key", "bpf", "perf_event_open", "userfaultfd",
            "unshare", "mount", "kexec_load", "open_by_handle_at"} <= refused
    assert config["ipc_mode"] == "private"
    assert (config["mem_limit"], config["memswap_limit"], config["pids_limit"]) == (256 << 20, 256 << 20, 64)
    assert config["init"] is False and not config.get("privileged") and "pid_mode" not in config
    assert config["labels"] == {LABEL_RUN: "r1", LABEL_INSTANCE: "org1-alice-0"}
    assert config["cgroup_parent"] == "/pairproof/r1"
    assert set(config["tmpfs"]) == {"/tmp"}
    assert config["sysctls"] == {"net.ipv6.conf.all.disable_ipv6": "0", "net.ipv6.conf.default.disable_ipv6": "0"}


def test_mounts_are_the_instances_own_and_nothing_else():
    mounts = {m["Target"]: (m["Source"], m["ReadOnly"]) for m in _config()["mounts"]}
    assert mounts == {
        "/data": ("/state/v", False),
        "/run/agent": ("/state/c", False),
        "/etc/passwd": ("/state/etc/passwd", True),
        "/etc/group": ("/state/etc/group", True),
        "/etc/resolv.conf": ("/state/etc/resolv.conf", True),
        "/etc/pairproof/managed.json": ("/state/managed.json", True),
    }
    assert not any("docker.sock" in m["Source"] for m in _config()["mounts"])


def test_environment_is_the_platforms_not_the_hosts(monkeypatch):
    monkeypatch.setenv("PAIRPROOF_PROVIDER_KEY", "host-secret")
    env = _config()["environment"]
    assert env == {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/data", "LANG": "C.UTF-8",
                   "PAIRPROOF_BROKER": "http://127.0.0.1:8765"}
