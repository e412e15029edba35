"""Agent profiles: the agent a target runs, as data (``<name>.toml`` here, or any file given by path).

A profile says how the agent is started, how it is known ready, how a turn reaches it and how its reply is
read, where its private state lives, what it calls its tools and how a canary is planted in each location.
The suite plants and probes through it; a driver translates it into its platform's own launch spec. A
profile's shape is ``profile.schema.json`` (JSON Schema, draft 2020-12); this module checks what a schema
cannot say (the files and folders it names exist, a background setting is one the allowlist keeps) and words
every error as ``profile <file>: <where>: <what is wrong and what it must be>``. The fields (``reference.toml``
is the worked example):

``name``
    the profile's name (reports, errors).
``[start]`` ``command`` (argv), ``files`` (paths relative to the profile, copied into the image the
    sandbox sees read-only at /opt/pairproof), ``env`` (table of strings; ``{broker}`` in a value is the
    URL of the instance's broker, where the agent calls the model and the tools), ``binds`` (optional table:
    a folder under /opt/ inside -> a host folder, relative to the profile, mounted read-only: the agent's
    installed software, such as a venv ``tools/setup-machine`` made; ``$PAIRPROOF_TOOLS/`` at its start is
    that variable's folder, else the checkout's ``.tools``, where tools/setup-machine installs agents),
    ``process`` (optional: the command line the agent's main process runs once started, when ``command`` is
    a launcher that execs it; ``command`` joined by spaces otherwise).
``[ready]`` ``kind``: ``listening`` (the turn API's port accepts connections inside the sandbox's network
    namespace) or ``http`` (a GET of ``path`` on it answers 2xx); ``deadline`` (optional, seconds; the
    platform's default otherwise): how long the agent may take from start to ready.
``[turn]`` ``style``: ``runs`` (``start`` answers ``run_id_field``; ``status`` is polled until
    ``status_field`` is one of ``done`` (or ``failed``); the reply is ``reply_field`` of the last event in
    ``events_field`` of ``events`` whose ``reply_type_field`` is ``reply_type``) or ``sync`` (``start``
    answers ``reply_field``); ``port``; ``input_field``, the field of the message in the start body;
    ``key_file``, where in the sandbox the agent reads its run-control key, if its API takes one (the
    platform writes it there; its broker presents it). Routes are "METHOD /path", ``{id}`` standing for the
    run's id.
``[surface]`` (optional) ``route`` and ``field``: a GET of the agent's API answering the tools it would
    offer now, name -> route.
``[state]`` location -> the absolute path of the file that holds it inside the sandbox (one per location
    of the contract: memory, transcript, task, volume).
``[plant]`` location -> the message that puts ``{token}`` there in one turn.
``[tools]`` the suite's name for a tool -> the agent's own name for it: the product's tools by their
    product names, and ``shell`` and ``memory`` for the agent's own command and memory tools.
``[startup]`` (optional) ``pinned``: path under /data/ -> the text the platform writes there before every start,
    bound read-only (a path ending in ``/``: an empty folder): the start-up inputs in the agent's home it must
    not decide itself (a profile pointer, an env file, a hooks folder); ``state``: paths under /data/ the agent
    reads back as it starts that are its own state by design, not configuration (TS-4 judges every other).
``[arguments]`` (optional) the agent's own tool (``shell``, ``memory``) -> its arguments as a table of
    templates: ``{argv}`` stands for a command (as one shell-quoted string), ``{text}`` for a memory's text.
    Without it the suite's own shapes are used: ``{"argv": [...]}`` and ``{"text": ...}``.
``dialect`` (optional) the agent's configuration language, by the name the suite's tool-surface cases know it
    under (``acceptance/cases/test_tools.py``: the adversarial settings and the bad managed files written in
    its keys): ``pairproof`` (the reference agent's), ``hermes-agent``. Without it TS-2 and TS-3 are broken.
``[managed]`` (optional; the runtime's own agent's JSON file otherwise) the agent's managed file, which the
    platform checks before every start: ``file`` (relative to the profile: the reviewed file), ``syntax``
    (``json`` or ``yaml``), ``schema`` (relative to the profile: the JSON Schema of the keys the platform
    decides), ``sha256`` (the file's pin: change the file and its pin in one review), ``path`` (where the
    agent reads it inside the sandbox, read-only: ``/etc/<folder>/<file>``).
``[settings]`` (optional; without it the agent applies its user's settings itself) the file on the volume
    where the agent reads its user's settings (``path``, under /data; ``syntax``, ``json`` or ``yaml``) and
    the platform's allowlist of them (``allow``: dotted path -> kind, ``text``, ``bool`` or ``int``): nothing
    else of a user's settings reaches the agent.
``[background]`` (optional) how the agent makes its background calls (model calls no user's message asks
    for: a title, a memory review): ``purposes``, the purposes the platform's meter files them under (the
    agent's own declaration, or what the model proxy recognises them as; ``unattributed`` if neither), and
    ``settings`` (optional table: a user's settings under which the agent makes one after every turn; the cases
    that count background calls start their instances with them). They reach the agent as any user's settings
    do: through ``[settings]``'s allowlist when the profile has one (then every leaf must be on it, or loading
    fails), else through the target's ``configure``, the agent applying them itself.
    Without it the agent is taken to make none, and MD-3 and MD-4 are broken on it, never passed.
``[idle]`` (optional) what the agent does on its own while idle: ``timers``, a table of its own timers (a
    keepalive, a refresh) -> their period in seconds. NT-5 watches an idle instance, from its last model call
    to the end of the case, for at least the longest of them (a call any of them causes shows there).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import jsonschema

from acceptance.errors import SetupError

HERE = Path(__file__).resolve().parent
DEFAULT = "reference"
# The shape of a profile (draft 2020-12): every field's type, the values it takes and what it must be, which the
# messages quote (``description``). tests/unit/test_profiles.py checks its locations are the contract's.
SCHEMA = json.loads((HERE / "profile.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
# Where tools/setup-machine installs agents: the checkout's .tools, or the folder this variable names (an
# installed pairproof, as tox runs it, is not beside the checkout).
TOOLS_ENV, TOOLS_PREFIX = "PAIRPROOF_TOOLS", "$PAIRPROOF_TOOLS/"
TOOLS_BUILT = HERE.parents[2] / ".tools"


class ProfileError(SetupError):
    """A profile file that cannot be used: names the file and the field."""


@dataclass(frozen=True)
class AgentProfile:
    name: str
    path: Path
    command: tuple[str, ...]
    files: tuple[Path, ...]
    env: Mapping[str, str]
    ready: Mapping[str, object]
    turn: Mapping[str, object]
    state: Mapping[str, str]
    plant: Mapping[str, str]
    tools: Mapping[str, str]
    surface: Mapping[str, str] = field(default_factory=dict)
    binds: Mapping[str, Path] = field(default_factory=dict)  # folder inside -> host folder, read-only
    process: str = ""  # the agent's main process's command line, once started (``command`` joined by default)
    arguments: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # own tool -> argument templates
    dialect: str = ""  # the agent's configuration language (the suite's tool-surface cases)
    # [managed]: file and schema as host paths, syntax, sha256, path inside; empty: the runtime's own agent's
    managed: Mapping[str, object] = field(default_factory=dict)
    # [settings]: path (inside), syntax, allow (dotted path -> kind); empty: the agent applies them itself
    settings: Mapping[str, object] = field(default_factory=dict)
    # [background]: purposes (tuple), settings (a user's settings tree); empty: the agent makes no background call
    background: Mapping[str, object] = field(default_factory=dict)
    # [startup]: pinned (path inside -> text, or None for an empty folder), state (paths the agent reads back)
    pinned: Mapping[str, str | None] = field(default_factory=dict)
    startup_state: tuple[str, ...] = ()
    # [idle]: timers (name -> period in seconds); empty: the agent declares no timer of its own
    idle_timers: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.process:
            object.__setattr__(self, "process", " ".join(self.command))

    def tool(self, name: str) -> str:
        """The agent's own name for the suite's tool ``name`` (a product tool, ``shell`` or ``memory``).
        A profile that names no such tool cannot run a case that needs it: SetupError (the case is broken,
        never failed)."""
        try:
            return self.tools[name]
        except KeyError:
            raise ProfileError(f"profile {self.path}: [tools] has no {name!r}: this agent offers no such tool, "
                               f"or the profile does not say what it calls it") from None

    def tool_arguments(self, name: str, **values: object) -> dict[str, object]:
        """The arguments the agent's own tool ``name`` takes for ``values`` (``argv``: a command as a list;
        ``text``: a memory's text), in the agent's shape if the profile gives one, else the suite's."""
        template = self.arguments.get(name)
        if template is None:
            return dict(values)
        filled = {key: str(v) for key, v in values.items() if not isinstance(v, list)}
        filled.update({key: shlex.join(map(str, v)) for key, v in values.items() if isinstance(v, list)})
        try:
            return {key: value.format_map(filled) for key, value in template.items()}
        except (KeyError, ValueError) as exc:
            raise ProfileError(f"profile {self.path}: [arguments].{name} cannot be filled from "
                               f"{sorted(values)}: {exc}") from None

    def plant_message(self, location: str, token: str) -> str:
        return self.plant[location].replace("{token}", token)


def resolve(name_or_path: str | Path | None) -> Path:
    """``reference`` -> this folder's reference.toml; anything with a ``/`` or ending ``.toml``, a file."""
    text = str(name_or_path or DEFAULT)
    if "/" in text or text.endswith(".toml"):
        return Path(text).resolve()
    path = HERE / f"{text}.toml"
    if not path.exists():
        known = sorted(p.stem for p in HERE.glob("*.toml"))
        raise ProfileError(f"unknown profile {text!r}: choose one of {', '.join(known)} or give a .toml file's path")
    return path


def _not_allowed(tree: dict, allow: Mapping[str, object], prefix: str = "") -> list[str]:
    """The leaves of ``tree`` an allowlist (dotted path -> kind) would not keep, as the platform's allowlist
    judges them (``runtime/agents/settings.py``): a path not listed, or a value not of its kind."""
    out = []
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if path in allow:
            kind = allow[path]
            fits = (isinstance(value, str) if kind == "text" else isinstance(value, bool) if kind == "bool"
                    else isinstance(value, int) and not isinstance(value, bool))
            if not fits:
                out.append(f"{path} (not {kind})")
        elif isinstance(value, dict) and value:
            out += _not_allowed(value, allow, path + ".")
        else:
            out.append(path)
    return sorted(out)


def load(name_or_path: str | Path | None = None) -> AgentProfile:
    """The profile, checked; ProfileError naming the file and the field on bad input."""
    path = resolve(name_or_path)
    try:
        raw = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ProfileError(f"profile {path}: cannot read it: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"profile {path}: not TOML: {exc}") from exc
    return _parse(path, raw)


def _where(section: tuple[object, ...], root: dict) -> str:
    """Where in a profile: ``[turn].port``, ``top level.name``, ``[start].binds.'/usr/x'`` (a key that is no plain
    word quoted), ``[start].files[0]``."""
    if not section:
        return "top level"
    first, rest = section[0], section[1:]
    out = f"[{first}]" if root["properties"].get(first, {}).get("type") == "object" else f"top level.{first}"
    for key in rest:
        out += f"[{key}]" if isinstance(key, int) else f".{key}" if re.fullmatch(r"\w+", key) else f".{key!r}"
    return out


def _message(error: jsonschema.ValidationError) -> str:
    """One schema error as the rest of the module words them: where, what is wrong, what it must be (the failing
    schema's ``description``)."""
    at, schema, wanted = tuple(error.absolute_path), error.schema, error.schema.get("description", "")
    if "propertyNames" in error.schema_path:  # the failing name is the instance; the path ends at its table
        return f"{_where((*at, error.instance), SCHEMA)}: {error.instance!r} is not {wanted}"
    if error.validator == "required":
        missing = re.match(r"'(.*)' is a required property", error.message).group(1)
        if "then" in error.schema_path:  # a rule that holds only with another field: its reason is the schema's
            return f"{_where((*at, missing), SCHEMA)}: {wanted}"
        return f"{_where((*at, missing), SCHEMA)}: required ({schema['properties'][missing].get('description', '')})"
    if error.validator == "dependentRequired":
        missing, given = re.match(r"'(.*)' is a dependency of '(.*)'", error.message).groups()
        return f"{_where((*at, missing), SCHEMA)}: required with {given} ({schema['properties'][missing]['description']})"
    if error.validator == "additionalProperties":
        known = ", ".join(schema.get("properties", {}))
        return f"{_where(at, SCHEMA)}: unknown keys {sorted(set(error.instance) - set(schema['properties']))}: use {known}"
    if error.validator == "enum":
        return f"{_where(at, SCHEMA)}: {error.instance!r} is not one of {', '.join(map(str, error.validator_value))}"
    return f"{_where(at, SCHEMA)}: {error.instance!r} is not {wanted}"


def _source(path: Path, item: str) -> Path:
    """A host path the profile names relative to itself (``$PAIRPROOF_TOOLS/`` at its start: that folder)."""
    if item.startswith(TOOLS_PREFIX):
        return (Path(os.environ.get(TOOLS_ENV) or TOOLS_BUILT) / item.removeprefix(TOOLS_PREFIX)).resolve()
    return (path.parent / item).resolve()


def _parse(path: Path, raw: dict) -> AgentProfile:
    # The shape is the schema's (profile.schema.json); what it cannot say is checked here: the files and folders
    # named exist, and a background setting is one the allowlist keeps.
    def bad(where: str, problem: str) -> ProfileError:
        return ProfileError(f"profile {path}: {where}: {problem}")

    error = jsonschema.exceptions.best_match(VALIDATOR.iter_errors(raw))
    if error is not None:
        raise ProfileError(f"profile {path}: {_message(error)}")
    start, ready, turn = raw["start"], raw["ready"], raw["turn"]
    files = []
    for item in start.get("files", []):
        source = (path.parent / item).resolve()
        if not source.is_file():
            raise bad("[start].files", f"{item!r} ({source}) is not a file")
        files.append(source)
    binds: dict[str, Path] = {}
    for inside, host in start.get("binds", {}).items():
        binds[inside] = _source(path, host)
        if not binds[inside].is_dir():
            raise bad(f"[start].binds.{inside!r}", f"{host!r} ({binds[inside]}) is not a folder: is the agent installed? "
                      "(tools/setup-machine installs the agents the shipped profiles name)")
    ready_out: dict[str, object] = {"kind": ready["kind"]}
    if "deadline" in ready:
        ready_out["deadline"] = float(ready["deadline"])
    if ready["kind"] == "http":
        ready_out["path"] = ready["path"]
    turn_out: dict[str, object] = {key: turn[key] for key in ("style", "port", "start", "input_field", "reply_field")}
    turn_out["key_file"] = turn.get("key_file", "")
    if turn["style"] == "runs":
        turn_out.update({key: turn[key] for key in ("run_id_field", "status_field", "status")})
        if "events" in turn:
            turn_out.update(events_field=turn["events_field"], events=turn["events"])
        turn_out["done"] = tuple(turn["done"])
        turn_out["failed"] = tuple(turn.get("failed", ()))
        turn_out.update({key: turn.get(key, "") for key in ("failed_reply_field", "reply_type_field", "reply_type")})
        turn_out["held"] = tuple(turn.get("held", ()))
        if "stop" in turn:
            turn_out["stop"] = turn["stop"]
    managed: dict[str, object] = {}
    if "managed" in raw:
        section = raw["managed"]
        for key in ("file", "schema"):
            managed[key] = (path.parent / section[key]).resolve()
            if not managed[key].is_file():
                raise bad(f"[managed].{key}", f"{section[key]!r} ({managed[key]}) is not a file")
        managed.update({key: section[key] for key in ("syntax", "sha256", "path")})
    settings = dict(raw.get("settings", {}))
    background: dict[str, object] = {}
    if "background" in raw:
        wanted = raw["background"].get("settings", {})
        if wanted and settings:
            # The platform writes them through its allowlist: every leaf must be kept, or the agent never sees it.
            refused = _not_allowed(wanted, dict(settings["allow"]))
            if refused:
                raise bad("[background].settings", f"{', '.join(refused)} not kept by [settings].allow: allow them "
                          "(or drop them), else the agent never makes the background call")
        # Without [settings] the agent applies its user's settings itself: the target's ``configure`` hands them over
        # as its user would (the reference agent's settings message, hermes-unguarded's driver's config.yaml).
        background = {"purposes": tuple(raw["background"]["purposes"]), "settings": wanted}
    startup = raw.get("startup", {})
    pinned = {inside.rstrip("/"): (None if inside.endswith("/") else text)
              for inside, text in startup.get("pinned", {}).items()}
    if any(text for inside, text in startup.get("pinned", {}).items() if inside.endswith("/")):
        raise bad("[startup].pinned", "a folder (a path ending in '/') is pinned empty: give it ''")
    return AgentProfile(name=raw["name"], path=path, command=tuple(start["command"]), files=tuple(files),
                        env=dict(start.get("env", {})), ready=ready_out, turn=turn_out, state=dict(raw["state"]),
                        plant=dict(raw["plant"]), tools=dict(raw["tools"]), surface=dict(raw.get("surface", {})),
                        binds=binds, process=start.get("process", ""), arguments=raw.get("arguments", {}),
                        dialect=raw.get("dialect", ""), managed=managed, settings=settings, background=background,
                        pinned=pinned, startup_state=tuple(startup.get("state", ())),
                        idle_timers={k: float(v) for k, v in raw.get("idle", {}).get("timers", {}).items()})
