"""The managed configuration and the user's settings: the pin, the schema, strict parsing, the allowlist.

The agent's resolver is pure and tested directly (hypothesis: no user file, however built, changes a
pinned key); the controller's refusals run real controllers on real sandboxes."""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime import agent, managed

SHIPPED = managed.shipped()
CONFIG = json.loads(SHIPPED)
PINNED_KEYS = [k for k in CONFIG if k not in ("defaults", "user_settable")]


def test_the_shipped_file_is_the_pinned_one_and_valid():
    assert hashlib.sha256(SHIPPED).hexdigest() == managed.PINNED_SHA256
    assert managed.check(SHIPPED) == CONFIG


def test_schema_and_agent_agree_on_the_builtin_tools():
    schema = json.loads(managed.SCHEMA.read_text())
    assert set(schema["properties"]["toolsets"]["properties"]["builtin"]["items"]["enum"]) == set(agent.BUILTIN)


@pytest.mark.parametrize(("raw", "message"), [
    (b"", "not strict JSON"),
    (b"\xff" + SHIPPED, "not UTF-8"),
    (SHIPPED.replace(b"{", b'{"schema": "x", ', 1), "duplicate key 'schema'"),
    (json.dumps({**CONFIG, "extra": 1}).encode(), "'extra' was unexpected"),
    (json.dumps({**CONFIG, "mcp": {"servers": {"product": {"via": "direct"}}}}).encode(), "mcp/servers/product/via"),
    (json.dumps({**CONFIG, "user_settable": ["toolsets.builtin"]}).encode(), "user_settable/0"),
    (b" " * (managed.MAX_BYTES + 1), "more than"),
    (json.dumps({**CONFIG, "tool_search": {"enabled": True}}).encode(), "unexpected managed config"),
    (json.dumps(CONFIG, indent=3).encode(), "unexpected managed config"),  # same meaning, unreviewed bytes
])
def test_check_refuses_with_one_clear_message(raw, message):
    with pytest.raises(managed.ManagedConfigError, match="^managed config: .*" + message.replace("(", r"\(")):
        managed.check(raw)


def test_a_different_pin_accepts_its_own_file():
    other = json.dumps({**CONFIG, "tool_search": {"enabled": True}}).encode()
    assert managed.check(other, pinned_sha256=hashlib.sha256(other).hexdigest())["tool_search"]["enabled"] is True


# -- the agent's resolver --------------------------------------------------------------------------------

json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
                           max_leaves=12)
key_names = st.sampled_from([*CONFIG, "display", "personality", "language", "builtin", "servers", "enabled",
                             "display.personality", "toolsets.builtin", "Tool_Search"])
user_files = st.recursive(json_values, lambda inner: st.dictionaries(key_names, inner, max_size=5), max_leaves=20)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(user_files)
def test_no_user_file_changes_a_pinned_key(user):
    """Whatever the user's file holds, every key but the settings is the managed file's, and a setting
    differs from its default only at a path the managed file lists."""
    agent.MANAGED_CONFIG, saved = json.loads(SHIPPED), agent.MANAGED_CONFIG
    original, agent.user_config = agent.user_config, lambda: user
    try:
        effective = agent.effective()
    finally:
        agent.MANAGED_CONFIG, agent.user_config = saved, original
    assert {k: effective[k] for k in CONFIG} == CONFIG
    for section, values in effective["settings"].items():
        for key, value in values.items():
            if value != CONFIG["defaults"][section][key]:
                assert f"{section}.{key}" in CONFIG["user_settable"]
                assert type(value) is type(CONFIG["defaults"][section][key]) and len(value) <= agent.MAX_SETTING


def test_allowed_paths_apply_and_everything_else_is_reported():
    user = {"display": {"personality": "terse", "language": 7, "colour": "red"}, "tool_search": {"enabled": True},
            "display.language": "fr"}
    settings_, refused = agent.resolve(CONFIG, user)
    assert settings_ == {"display": {"personality": "terse", "language": "fr"}}
    assert sorted(refused) == ["display.colour", "display.language", "tool_search.enabled"]
    assert agent.resolve(CONFIG, ["not", "an", "object"]) == (CONFIG["defaults"], ["(not an object)"])


def test_the_surface_follows_the_managed_file_only(monkeypatch):
    monkeypatch.setattr(agent, "list_server_tools", lambda server, timeout=120: [{"name": "notes_list"}])
    assert {n: t["route"] for n, t in agent.surface(CONFIG).items()} == {
        "memory_note": "builtin", "task_add": "builtin", "notes_list": "mcp:product"}
    opened = {**CONFIG, "tool_search": {"enabled": True}, "mcp": {"servers": {"product": {"via": "broker"},
                                                                             "mirror": {"via": "broker"}}}}
    assert {n: t["route"] for n, t in agent.surface(opened).items() if t["route"] != "builtin"} == {
        "tool_search": "bridge:tool_search", "notes_list": "mcp:product", "mirror__notes_list": "mcp:mirror"}


def test_the_agent_refuses_to_start_on_a_file_it_cannot_read(tmp_path):
    bad = tmp_path / "managed.json"
    bad.write_text(json.dumps({**CONFIG, "toolsets": {"builtin": ["web_browse"]}}))
    with pytest.raises(agent.ManagedConfigInvalid, match="unknown built-in tools"):
        agent.load_managed(str(bad))
    bad.write_text('{"schema": 1, "schema": 2}')
    with pytest.raises(agent.ManagedConfigInvalid, match="duplicate key"):
        agent.load_managed(str(bad))


# -- the controller --------------------------------------------------------------------------------------

def test_provision_under_an_unexpected_file_registers_nothing(controller):
    with pytest.raises(managed.ManagedConfigError, match="managed config for org1/alice: unexpected"):
        controller.provision("org1", "alice", managed_config=json.dumps(CONFIG).encode())
    assert controller.instances() == []


def test_a_file_changed_after_provision_stops_the_next_wake(controller):
    record = controller.provision("org1", "alice")
    path = controller.state / "instances" / record.id / "managed.json"
    path.write_bytes(SHIPPED.replace(b'"enabled": false}', b'"enabled": true }', 1))
    with pytest.raises(managed.ManagedConfigError, match=f"managed config of instance {record.id}.*unexpected"):
        controller.wake(record.id)
    assert controller.get(record.id).state != "running" and record.id not in controller._sandboxes
    path.write_bytes(SHIPPED)
    assert controller.wake(record.id).state == "running"
