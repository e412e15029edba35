"""Agent profiles as data: the reference profile loads; bad input gets one error naming the file and field."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import pytest

from acceptance.targets import TargetOptions, profiles
from acceptance.targets.profiles import ProfileError

REFERENCE = Path(profiles.__file__).with_name("reference.toml")
TINY = Path(__file__).resolve().parents[1] / "support" / "tiny_agent.toml"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agent.toml"
    path.write_text(text)
    (tmp_path / "agent.py").write_text("")
    return path


def _edited(tmp_path: Path, old: str, new: str) -> Path:
    text = REFERENCE.read_text().replace('files = ["../../../runtime/agents/reference.py"]', 'files = ["agent.py"]')
    assert text.count(old) == 1, old
    return _write(tmp_path, text.replace(old, new))


def test_the_reference_profile_is_the_default_and_names_its_tools():
    profile = profiles.load()
    assert profile.name == "reference" and profile.path == REFERENCE
    assert profile.tool("notes_create") == "notes_create" and profile.tool("memory") == "memory_note"
    assert set(profile.plant) == set(profile.state) == {"memory", "transcript", "task", "volume"}
    assert profile.plant_message("memory", "TOKEN").endswith("TOKEN")
    assert [f.name for f in profile.files] == ["reference.py"] and all(f.is_file() for f in profile.files)
    assert TargetOptions("r", Path("/tmp"), {}).profile == profile


def test_a_profile_is_found_by_name_or_path():
    assert profiles.load("reference").path == REFERENCE
    tiny = profiles.load(str(TINY))
    assert (tiny.name, tiny.turn["style"], tiny.turn["port"]) == ("tiny", "sync", 8700)
    assert tiny.tool("notes_create") != "notes_create"


def test_an_unknown_name_lists_the_known_ones():
    with pytest.raises(ProfileError, match="unknown profile 'nosuch'.*reference"):
        profiles.load("nosuch")


def test_a_tool_the_profile_does_not_name_is_a_setup_error_not_a_finding():
    with pytest.raises(ProfileError, match=r"\[tools\] has no 'shell'"):
        profiles.load(str(TINY)).tool("shell")


@pytest.mark.parametrize("old,new,field", [
    ('style = "runs"', 'style = "stream"', r"\[turn\]\.style"),
    ("port = 8642", 'port = "8642"', r"\[turn\]\.port"),
    ('status = "GET /v1/runs/{id}"', 'status = "/v1/runs/{id}"', r"\[turn\]\.status"),
    ('kind = "listening"', 'kind = "file"', r"\[ready\]\.kind"),
    ('memory = "/data/memory.md"', 'memory = "data/memory.md"', r"\[state\]\.memory"),
    ('volume = "save notes.txt: {token}"', 'volume = "save notes.txt"', r"\[plant\]\.volume"),
    ('task = "task: renew the parking permit, reference {token}"\n', "", r"\[plant\]\.task"),
    ('files = ["agent.py"]', 'files = ["missing.py"]', r"\[start\]\.files"),
    ('command = ["/usr/bin/python3", "-I", "-S", "/opt/pairproof/reference.py"]', "command = []", r"\[start\]\.command"),
    ('shell = "shell"', "shell = 1", r"\[tools\]\.shell"),
    ("[surface]", "[surfaces]", "top level"),
    ('key_file = "/run/agent/runctl.key"', 'key_file = "runctl.key"', r"\[turn\]\.key_file"),
])
def test_bad_input_names_the_file_and_the_field(tmp_path, old, new, field):
    path = _edited(tmp_path, old, new)
    with pytest.raises(ProfileError, match=rf"profile {path}: {field}"):
        profiles.load(str(path))


def test_not_toml_names_the_file(tmp_path):
    path = _write(tmp_path, "name = \n")
    with pytest.raises(ProfileError, match=rf"profile {path}: not TOML"):
        profiles.load(str(path))


def test_every_shipped_profile_loads():
    for path in [*REFERENCE.parent.glob("*.toml"), TINY]:
        tomllib.loads(path.read_text())
        profiles.load(str(path))


def test_qualify_refuses_a_bad_profile_before_anything_runs(tmp_path, capsys):
    from acceptance import cli

    assert cli.main(["qualify", "--profile", "nosuch", "--reports-dir", str(tmp_path / "r")]) == 2
    assert "unknown profile 'nosuch'" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_the_reference_profile_is_the_runtimes_own_launch():
    """The profile, translated by the reference driver, is what a controller runs when told nothing."""
    from acceptance.targets.reference.driver import launch_of
    from runtime.agents.launch import REFERENCE as RUNTIME_DEFAULT

    assert launch_of(profiles.load()) == RUNTIME_DEFAULT


@pytest.mark.parametrize("binds,field", [
    ('binds = { "/usr/x" = "." }', r"\[start\]\.binds\.'/usr/x'"),
    ('binds = { "/opt/venv" = "nosuch" }', r"\[start\]\.binds\.'/opt/venv'.*is the agent installed"),
    ('binds = ["x"]', r"\[start\]\.binds"),
    ('bind = { "/opt/venv" = "." }', r"\[start\]: unknown keys"),
])
def test_a_bad_bind_names_the_file_and_the_field(tmp_path, binds, field):
    path = _edited(tmp_path, 'files = ["agent.py"]', 'files = ["agent.py"]\n' + binds)
    with pytest.raises(ProfileError, match=rf"profile {path}: {field}"):
        profiles.load(str(path))


def test_the_hermes_profile_binds_its_venv_and_reads_the_reply_from_the_run_status():
    """hermes-agent from the venv tools/setup-machine makes, read-only at /opt/hermes; its events are a stream."""
    from acceptance.targets.reference.driver import launch_of

    profile = profiles.load("hermes")
    launch = launch_of(profile)
    tools = Path(os.environ.get(profiles.TOOLS_ENV) or profiles.TOOLS_BUILT)
    assert dict(launch.binds) == {"/opt/hermes": (tools / "hermes-venv").resolve()}
    assert (launch.turn.events, launch.turn.reply_field, launch.turn.done) == ("", "output", ("completed",))
    assert launch.ready.path == "/health" and launch.turn.key_file == "/run/agent/runctl.key"
    assert launch.files == ()  # its managed layer is the platform's, checked and bound at /etc/hermes
    assert (launch.managed.syntax, launch.managed.inside) == ("yaml", "/etc/hermes/config.yaml")
    assert profile.env["HERMES_MANAGED_DIR"] == "/etc/hermes" and profile.dialect == "hermes-agent"
    assert launch.settings.path == "/data/hermes/config.yaml" and launch.settings.syntax == "yaml"
    assert dict(launch.settings.allow)["platform_hints.api_server.append"] == "text"


def test_the_hermes_managed_layer_is_its_pinned_reviewed_file():
    """The platform's check passes the file as shipped, so every hermes start is not refused for its own."""
    from acceptance.targets.reference.driver import launch_of
    from runtime.agents import managed

    form = launch_of(profiles.load("hermes")).managed
    config = managed.check(form.read(), form)
    assert config["platform_toolsets"] == {"api_server": ["memory", "todo", "file"]}
    assert config["tools"]["tool_search"]["enabled"] is False and list(config["mcp_servers"]) == ["product"]


MANAGED = """
[managed]
file = "agent.py"
syntax = "yaml"
schema = "agent.py"
sha256 = "%s"
path = "/etc/agent/config.yaml"
""" % ("0" * 64)
SETTINGS = """
[settings]
path = "/data/agent/config.yaml"
syntax = "yaml"
allow = { "display.personality" = "text" }
"""


@pytest.mark.parametrize("section,old,new,field", [
    (MANAGED, 'syntax = "yaml"', 'syntax = "toml"', r"\[managed\]\.syntax"),
    (MANAGED, 'schema = "agent.py"', 'schema = "nosuch.json"', r"\[managed\]\.schema"),
    (MANAGED, "0" * 64, "abc", r"\[managed\]\.sha256"),
    (MANAGED, 'path = "/etc/agent/config.yaml"', 'path = "/data/config.yaml"', r"\[managed\]\.path"),
    (MANAGED, 'path = "/etc/agent/config.yaml"', 'pth = "/etc/agent/config.yaml"', r"\[managed\]: unknown keys"),
    (SETTINGS, 'path = "/data/agent/config.yaml"', 'path = "/etc/agent/config.yaml"', r"\[settings\]\.path"),
    (SETTINGS, '"text"', '"list"', r"\[settings\]\.allow\.'display\.personality'"),
    (SETTINGS, 'allow = { "display.personality" = "text" }', 'allow = ["display.personality"]', r"\[settings\]\.allow"),
])
def test_a_bad_managed_or_settings_section_names_the_file_and_the_field(tmp_path, section, old, new, field):
    path = _edited(tmp_path, "[ready]", section.replace(old, new) + "\n[ready]")
    with pytest.raises(ProfileError, match=rf"profile {path}: {field}"):
        profiles.load(str(path))


PURPOSES = 'purposes = ["title", "memory_review"]'


def test_background_settings_without_a_settings_section_go_to_the_agent_itself(tmp_path):
    """No [settings]: the agent applies its user's settings itself (the target's configure hands them over, as
    hermes-unguarded's driver does), so [background].settings load as given."""
    path = _edited(tmp_path, PURPOSES, PURPOSES + "\nsettings = { memory = { nudge_interval = 1 } }")
    assert profiles.load(str(path)).background["settings"] == {"memory": {"nudge_interval": 1}}
    assert profiles.load("hermes-unguarded").background == {"purposes": ("unattributed",),
                                                            "settings": {"memory": {"nudge_interval": 1}}}


@pytest.mark.parametrize("wanted,named", [
    ('{ memory = { nudge_interval = 1 } }', "memory.nudge_interval"),   # not on the allowlist: dropped
    ('{ display = { personality = 3 } }', r"display\.personality \(not text\)"),  # not of its kind: dropped
])
def test_background_settings_the_allowlist_would_drop_are_refused(tmp_path, wanted, named):
    """With [settings] the platform writes a user's settings through its allowlist: a background setting it would
    drop never reaches the agent, so the profile is refused, naming it."""
    text = REFERENCE.read_text().replace('files = ["../../../runtime/agents/reference.py"]', 'files = ["agent.py"]')
    text = text.replace("[ready]", SETTINGS + "\n[ready]").replace(PURPOSES, PURPOSES + f"\nsettings = {wanted}")
    path = _write(tmp_path, text)
    with pytest.raises(ProfileError, match=rf"profile {path}: \[background\]\.settings: {named}"):
        profiles.load(str(path))
    kept = text.replace(f"settings = {wanted}", 'settings = { display = { personality = "terse" } }')
    assert profiles.load(str(_write(tmp_path, kept))).background["settings"] == {"display": {"personality": "terse"}}


def test_an_agents_own_tools_take_arguments_in_its_shape():
    """The suite's shapes without [arguments]; the profile's templates with it (a command as one quoted line)."""
    assert profiles.load().tool_arguments("shell", argv=["/usr/bin/touch", "/data/x"]) == {"argv": ["/usr/bin/touch", "/data/x"]}
    hermes = profiles.load("hermes")
    assert hermes.tool_arguments("shell", argv=["/usr/bin/touch", "/data/a b"]) == {"command": "/usr/bin/touch '/data/a b'"}
    assert hermes.tool_arguments("memory", text="memo-1") == {"action": "add", "target": "memory", "content": "memo-1"}
    with pytest.raises(ProfileError, match=r"\[arguments\]\.memory cannot be filled"):
        hermes.tool_arguments("memory", words="x")


@pytest.mark.parametrize("extra,field", [
    ('held = ["waiting_for_approval"]', r"\[turn\]\.stop: held states need the route that stops a run"),
    ('held = ["waiting_for_approval"]\nstop = "GET /v1/runs/{id}/stop"', r"\[turn\]\.stop: .* is not 'POST /path'"),
])
def test_held_states_come_with_a_stop_route(tmp_path, extra, field):
    path = _edited(tmp_path, 'done = ["completed", "stopped"]', 'done = ["completed", "stopped"]\n' + extra)
    with pytest.raises(ProfileError, match=rf"profile {path}: {field}"):
        profiles.load(str(path))


def test_the_hermes_profiles_stop_a_run_held_by_hermess_own_approval_prompt():
    from acceptance.targets.reference.driver import launch_of

    for name in ("hermes", "hermes-unguarded"):
        turn = launch_of(profiles.load(name)).turn
        assert (turn.held, turn.stop) == (("waiting_for_approval",), "POST /v1/runs/{id}/stop")


def test_the_schema_is_a_valid_draft_2020_12_schema_naming_the_contracts_locations():
    """profile.schema.json is what every profile is checked against; its [state] and [plant] must list exactly the
    locations of the contract (it cannot import them)."""
    import jsonschema

    from acceptance.contract import LOCATIONS

    jsonschema.Draft202012Validator.check_schema(profiles.SCHEMA)
    for section in ("state", "plant"):
        assert profiles.SCHEMA["properties"][section]["required"] == list(LOCATIONS)
        assert list(profiles.SCHEMA["properties"][section]["properties"]) == list(LOCATIONS)


@pytest.mark.parametrize("old,new,message", [
    ('events_field = "events"\n', "", r"\[turn\]\.events_field: required with events"),
    ('run_id_field = "run_id"\n', "", r"\[turn\]\.run_id_field: a turn of style runs .* needs this field"),
    ('kind = "listening"', 'kind = "http"', r"\[ready\]\.path: a ready check of kind http needs the path"),
    ("[surface]", "[surfaces]", r"top level: unknown keys \['surfaces'\]: use name, dialect, start"),
])
def test_a_rule_that_holds_with_another_field_names_both(tmp_path, old, new, message):
    """The schema's conditional rules (a runs turn, events with their field, an http ready check) say why the
    field is needed; an unknown key lists the known ones."""
    path = _edited(tmp_path, old, new)
    with pytest.raises(ProfileError, match=rf"profile {path}: {message}"):
        profiles.load(str(path))


def test_idle_timers_are_declared_in_seconds_and_the_longest_is_what_nt5_watches_for(tmp_path):
    """``[idle].timers`` (NT-5 watches an idle instance for at least the longest): the hermes profiles declare
    hermes's MCP keepalive (180 s by default), the reference agent none; a period that is not a number above 0
    is refused naming the field."""
    assert profiles.load("hermes").idle_timers == {"mcp_keepalive": 180.0}
    assert profiles.load("hermes-unguarded").idle_timers == {"mcp_keepalive": 180.0}
    assert profiles.load().idle_timers == {}
    declared = _edited(tmp_path, "[background]", "[idle]\ntimers = { refresh = 600, ping = 2.5 }\n\n[background]")
    assert profiles.load(str(declared)).idle_timers == {"refresh": 600.0, "ping": 2.5}
    for bad in ("0", '"600"', "-1"):
        path = _edited(tmp_path, "[background]", f"[idle]\ntimers = {{ refresh = {bad} }}\n\n[background]")
        with pytest.raises(ProfileError, match=rf"profile {path}: \[idle\]\.timers\.refresh"):
            profiles.load(str(path))
