"""The managed configuration and the user's settings: the pin, the schema, strict parsing, the allowlist.

The agent's resolver is pure and tested directly (hypothesis: no user file, however built, changes a
pinned key); the controller's refusals run real controllers on real sandboxes."""

from __future__ import annotations

import hashlib
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.agents import managed
from runtime.agents import reference as agent

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


# -- another agent's managed file: YAML, its own schema and pin ------------------------------------------

YAML_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "https://example.test/yaml-managed",
    "type": "object", "additionalProperties": False, "required": ["model", "toolsets"],
    "properties": {"model": {"type": "string"},
                   "toolsets": {"type": "array", "items": {"enum": ["memory", "file"]}}},
}
YAML_FILE = b"# reviewed\nmodel: pinned\ntoolsets: [memory, file]\n"


@pytest.fixture
def yaml_form(tmp_path):
    (tmp_path / "config.yaml").write_bytes(YAML_FILE)
    (tmp_path / "schema.json").write_text(json.dumps(YAML_SCHEMA))
    return managed.ManagedFormat(tmp_path / "config.yaml", tmp_path / "schema.json",
                                 hashlib.sha256(YAML_FILE).hexdigest(), syntax="yaml", inside="/etc/agent/config.yaml")


def test_a_yaml_managed_file_is_checked_against_its_own_schema_and_pin(yaml_form):
    assert managed.check(YAML_FILE, yaml_form) == {"model": "pinned", "toolsets": ["memory", "file"]}
    assert yaml_form.stored_name == "managed.yaml"


@pytest.mark.parametrize(("raw", "message"), [
    (b"", "not strict YAML (a mapping is required at the top level, not an empty document)"),
    (b"- model\n", "not strict YAML (a mapping is required at the top level, not a list)"),
    (b"\xff" + YAML_FILE, "not UTF-8"),
    (b"model: [\n", "not strict YAML (while parsing"),
    (b"model: a\nmodel: b\ntoolsets: []\n", "duplicate key 'model'"),
    (b"x: &m pinned\nmodel: *m\ntoolsets: []\n", "found an alias (*m): aliases are refused"),
    (b"<<: {model: a}\ntoolsets: []\n", "merge keys (<<) are refused"),
    (b"1: a\nmodel: b\ntoolsets: []\n", "key 1 is not a string"),
    (b"model: 2001-01-01\ntoolsets: []\n", "a value JSON has no word for"),
    (b"model: .nan\ntoolsets: []\n", "a value JSON has no word for"),
    (b"model: pinned\ntoolsets: [memory, terminal]\n", "refuses toolsets/1: 'terminal' is not one of"),
    (b"model: pinned\ntoolsets: [memory, file]\nextra: 1\n", "'extra' was unexpected"),
    (b"model: pinned\n", "'toolsets' is a required property"),
    (b"model: pinned\ntoolsets: [file, memory]\n", "unexpected managed config"),  # valid, not the reviewed bytes
    (YAML_FILE.replace(b"# reviewed\n", b""), "unexpected managed config"),  # same meaning, unreviewed bytes
])
def test_a_bad_yaml_managed_file_is_refused_with_one_clear_message(yaml_form, raw, message):
    with pytest.raises(managed.ManagedConfigError, match="^managed config: .*" + re.escape(message)):
        managed.check(raw, yaml_form)


@pytest.mark.parametrize(("change", "message"), [
    ({"syntax": "toml"}, "syntax 'toml' is unknown"),
    ({"pinned_sha256": "abc"}, "is not a SHA-256"),
    ({"inside": "/etc/passwd"}, "must be /etc/<folder>/<file>"),
    ({"inside": "/data/config.yaml"}, "must be /etc/<folder>/<file>"),
    ({"inside": "/etc/agent/../passwd"}, "must be /etc/<folder>/<file>"),
])
def test_a_bad_managed_format_is_a_config_error(yaml_form, change, message):
    import dataclasses

    from runtime.errors import ConfigError

    with pytest.raises(ConfigError, match=re.escape(message)):
        dataclasses.replace(yaml_form, **change)


def test_nothing_inside_can_add_a_file_beside_the_managed_file(controller):
    """The managed file's folder is read-only inside the sandbox: an agent that reads its managed folder whole
    (hermes-agent reads a .env beside its config.yaml, and it wins) finds only the platform's file there."""
    record = controller.provision("org1", "alice")
    controller.wake(record.id)
    out = controller.exec(record.id, ["/bin/sh", "-c", "touch /etc/pairproof/.env; ls -A /etc/pairproof; "
                                                       "cat /etc/pairproof/managed.json"])
    assert b"Read-only file system" in out.stderr
    assert out.stdout == b"managed.json\n" + SHIPPED
