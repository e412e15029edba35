"""A user's settings for an agent that reads them from a file: the platform's allowlist, the write into the
volume, and the controller that keeps them and places them before every start.

The allowlist is pure and tested directly (hypothesis: no user file, however built, keeps a leaf that is not
listed); the write and the controller run on real folders and a real sandbox."""

from __future__ import annotations

import dataclasses
import os
import stat

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.agents import launch as agents
from runtime.agents import settings as user_settings
from runtime.controller import Controller
from runtime.errors import ConfigError

ALLOW = (("platform_hints.api_server.append", "text"), ("timezone", "text"), ("display.compact", "bool"))
SPEC = user_settings.UserSettings(path="/data/agentcfg/config.yaml", allow=ALLOW)


def test_only_listed_leaves_of_their_kind_are_kept_and_the_rest_is_named():
    user = {"platform_hints": {"api_server": {"append": "be brief", "replace": "x"}, "cli": "y"},
            "timezone": 5, "display": {"compact": True}, "mcp_servers": {"mirror": {"url": "http://x/mcp"}},
            "platform_hints.api_server.append": "dotted", "tools": {"tool_search": {"enabled": "on"}}}
    kept, refused = user_settings.allowed(user, SPEC)
    assert kept == {"platform_hints": {"api_server": {"append": "be brief"}}, "display": {"compact": True}}
    assert refused == ["'platform_hints.api_server.append'", "mcp_servers.mirror.url", "platform_hints.api_server.replace",
                       "platform_hints.cli", "timezone (not text)", "tools.tool_search.enabled"]
    assert user_settings.allowed(["not", "a", "mapping"], SPEC) == ({}, ["(not an object)"])
    # A subtree where a leaf is allowed is refused whole: a leaf is a value, never a table of them.
    assert user_settings.allowed({"timezone": {"name": "UTC"}}, SPEC) == ({}, ["timezone (not text)"])


keys = st.sampled_from(["platform_hints", "api_server", "append", "replace", "timezone", "display", "compact",
                        "mcp_servers", "tools", "platform_hints.api_server.append", "Timezone", "timezone "])
values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                      lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=4),
                      max_leaves=16)


def _leaves(tree: dict, prefix: str = "") -> dict[str, object]:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_leaves(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


@settings(max_examples=300, derandomize=True, deadline=None)
@given(st.dictionaries(keys, values, max_size=6))
def test_no_user_file_keeps_a_leaf_that_is_not_listed(user):
    kept, _ = user_settings.allowed(user, SPEC)
    kinds = dict(ALLOW)
    for path, value in _leaves(kept).items():
        assert path in kinds
        assert isinstance(value, {"text": str, "bool": bool}[kinds[path]])
    assert yaml.safe_load(SPEC.dump(kept)) == (kept or {})


@pytest.mark.parametrize(("change", "message"), [
    ({"path": "/etc/agent/config.yaml"}, "must be a file under /data/"),
    ({"path": "/data"}, "must be a file under /data/"),
    ({"path": "/data/../etc/x"}, "must be a file under /data/"),
    ({"syntax": "toml"}, "syntax 'toml' is unknown"),
    ({"allow": (("a b", "text"),)}, "is not a dotted path"),
    ({"allow": (("a", "list"),)}, "kind 'list' is unknown"),
    ({"allow": (("a", "text"), ("a.b", "text"))}, "is a leaf and the parent of another"),
])
def test_a_bad_settings_spec_is_a_config_error(change, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        dataclasses.replace(SPEC, **change)


def test_the_write_replaces_the_file_and_follows_no_link(tmp_path):
    volume = tmp_path / "volume"
    volume.mkdir()
    uid = 64000 + os.getpid() % 1000
    user_settings.write_into(volume, "/data/agentcfg/config.yaml", b"a: 1\n", uid)
    written = volume / "agentcfg" / "config.yaml"
    assert written.read_bytes() == b"a: 1\n"
    assert (written.stat().st_uid, stat.S_IMODE(written.stat().st_mode)) == (uid, 0o600)
    assert (volume / "agentcfg").stat().st_uid == uid and stat.S_IMODE((volume / "agentcfg").stat().st_mode) == 0o700
    user_settings.write_into(volume, "/data/agentcfg/config.yaml", b"b: 2\n", uid)
    assert written.read_bytes() == b"b: 2\n" and sorted(os.listdir(volume / "agentcfg")) == ["config.yaml"]
    # A link where a folder was: outside the volume nothing is written.
    outside = tmp_path / "outside"
    outside.mkdir()
    (volume / "agentcfg").rename(tmp_path / "old")
    (volume / "agentcfg").symlink_to(outside)
    with pytest.raises(ConfigError, match="'agentcfg' on the volume is not a folder"):
        user_settings.write_into(volume, "/data/agentcfg/config.yaml", b"c: 3\n", uid)
    assert os.listdir(outside) == []
    # A link where the file was is replaced, not written through.
    (volume / "agentcfg").unlink()
    (tmp_path / "old").rename(volume / "agentcfg")
    target = outside / "host-file"
    target.write_bytes(b"host\n")
    written.unlink()
    written.symlink_to(target)
    user_settings.write_into(volume, "/data/agentcfg/config.yaml", b"d: 4\n", uid)
    assert target.read_bytes() == b"host\n" and not written.is_symlink() and written.read_bytes() == b"d: 4\n"


@pytest.fixture
def settings_controller(root):
    """A controller (no platform) whose agent reads its user's settings from a file: the reference agent's
    launch with SPEC (the agent itself ignores the file; what is checked is what the platform puts there)."""
    c = Controller(root, f"set-{os.getpid()}", agent=dataclasses.replace(agents.REFERENCE, settings=SPEC))
    yield c
    c.close()


def _in_sandbox(controller, record_id: str) -> bytes:
    out = controller.exec(record_id, ["/bin/cat", SPEC.path])
    assert out.rc == 0, out.stderr
    return out.stdout


def test_the_controller_keeps_the_allowed_settings_and_places_them_before_every_start(settings_controller):
    c = settings_controller
    record = c.provision("org1", "alice")
    c.wake(record.id)
    assert yaml.safe_load(_in_sandbox(c, record.id)) == {}  # nothing configured yet: an empty mapping
    pid = c.sandbox(record.id).host_pid
    refused = c.configure(record.id, {"timezone": "Europe/Paris", "mcp_servers": {"mirror": {"url": "x"}}})
    assert refused == ["mcp_servers.mirror.url"]
    assert c.get(record.id).state == "running" and c.sandbox(record.id).host_pid != pid  # restarted to read them
    assert yaml.safe_load(_in_sandbox(c, record.id)) == {"timezone": "Europe/Paris"}
    # Whatever is written on the volume meanwhile does not outlive the next start.
    volume_file = c.volume_path(record.id) / "agentcfg" / "config.yaml"
    c.sleep(record.id, "stopped")
    volume_file.write_text("mcp_servers: {mirror: {url: x}}\n")
    c.wake(record.id)
    assert yaml.safe_load(_in_sandbox(c, record.id)) == {"timezone": "Europe/Paris"}
    # A sleeping instance keeps its new settings for its next start, and is not started by them.
    c.sleep(record.id, "stopped")
    assert c.configure(record.id, {"timezone": "UTC"}) == [] and c.get(record.id).state == "sleeping"
    c.wake(record.id)
    assert yaml.safe_load(_in_sandbox(c, record.id)) == {"timezone": "UTC"}


def test_an_agent_that_applies_its_own_settings_gets_none_from_the_controller(controller):
    record = controller.provision("org1", "alice")
    with pytest.raises(ConfigError, match="applies its user's settings itself"):
        controller.configure(record.id, {"display": {"personality": "x"}})
