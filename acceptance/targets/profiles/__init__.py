"""Agent profiles: the agent a target runs, as data (``<name>.toml`` here, or any file given by path).

A profile says how the agent is started, how it is known ready, how a turn reaches it and how its reply is
read, where its private state lives, what it calls its tools and how a canary is planted in each location.
The suite plants and probes through it; a driver translates it into its platform's own launch spec. The
fields (``reference.toml`` is the worked example):

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
"""

from __future__ import annotations

import os
import re
import shlex
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from acceptance.contract import LOCATIONS
from acceptance.errors import SetupError

HERE = Path(__file__).resolve().parent
DEFAULT = "reference"
READY_KINDS = ("listening", "http")
STYLES = ("runs", "sync")
SYNTAXES = ("json", "yaml")  # of a managed file and of a user's settings file
SETTING_KINDS = ("text", "bool", "int")
RUNS_FIELDS = ("run_id_field", "status", "status_field", "done", "events", "events_field")
BIND_ROOT = "/opt/"
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


def _parse(path: Path, raw: dict) -> AgentProfile:
    def bad(where: str, problem: str) -> ProfileError:
        return ProfileError(f"profile {path}: {where}: {problem}")

    def table(key: str, optional: bool = False) -> dict:
        value = raw.get(key, {} if optional else None)
        if not isinstance(value, dict):
            raise bad(f"[{key}]", "missing" if value is None else "must be a table")
        return value

    def text(section: dict, where: str, key: str, default: str | None = None) -> str:
        value = section.get(key, default)
        if not isinstance(value, str) or (default is None and not value):
            raise bad(f"{where}.{key}", "a non-empty string is required" if value is None or value == ""
                      else f"must be a string, not {type(value).__name__}")
        return value

    def strings(section: dict, where: str, key: str) -> tuple[str, ...]:
        value = section.get(key)
        if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
            raise bad(f"{where}.{key}", "a non-empty list of non-empty strings is required")
        return tuple(value)

    def route(section: dict, where: str, key: str, method: str) -> str:
        value = text(section, where, key)
        verb, _, target = value.partition(" ")
        if verb != method or not target.startswith("/") or " " in target:
            raise bad(f"{where}.{key}", f"{value!r} is not '{method} /path'")
        return value

    unknown = set(raw) - {"name", "start", "ready", "turn", "surface", "state", "plant", "tools", "arguments",
                          "dialect", "managed", "settings", "background"}
    if unknown:
        raise bad("top level", f"unknown keys {sorted(unknown)}")
    name = text(raw, "top level", "name")
    start = table("start")
    command = strings(start, "[start]", "command")
    files = []
    for item in start.get("files", []):
        if not isinstance(item, str) or not item:
            raise bad("[start].files", "each entry must be a path (a non-empty string)")
        source = (path.parent / item).resolve()
        if not source.is_file():
            raise bad("[start].files", f"{item!r} ({source}) is not a file")
        files.append(source)
    env = start.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise bad("[start].env", "must be a table of strings")
    binds: dict[str, Path] = {}
    raw_binds = start.get("binds", {})
    if not isinstance(raw_binds, dict):
        raise bad("[start].binds", "must be a table: folder inside -> host folder")
    for inside, host in raw_binds.items():
        if not inside.startswith(BIND_ROOT) or ".." in Path(inside).parts or inside.rstrip("/") == "/opt/pairproof":
            raise bad(f"[start].binds.{inside!r}", "the folder inside must be under /opt/ (not /opt/pairproof)")
        if not isinstance(host, str) or not host:
            raise bad(f"[start].binds.{inside!r}", "the host folder must be a path (a non-empty string)")
        if host.startswith(TOOLS_PREFIX):
            source = (Path(os.environ.get(TOOLS_ENV) or TOOLS_BUILT) / host.removeprefix(TOOLS_PREFIX)).resolve()
        else:
            source = (path.parent / host).resolve()
        if not source.is_dir():
            raise bad(f"[start].binds.{inside!r}", f"{host!r} ({source}) is not a folder: is the agent installed? "
                      "(tools/setup-machine installs the agents the shipped profiles name)")
        binds[inside] = source
    process = text(start, "[start]", "process", "")
    if set(start) - {"command", "files", "env", "binds", "process"}:
        raise bad("[start]", f"unknown keys {sorted(set(start) - {'command', 'files', 'env', 'binds', 'process'})}")

    ready = table("ready")
    kind = text(ready, "[ready]", "kind")
    if kind not in READY_KINDS:
        raise bad("[ready].kind", f"{kind!r} is not one of {', '.join(READY_KINDS)}")
    ready_out: dict[str, object] = {"kind": kind}
    if "deadline" in ready:
        deadline = ready["deadline"]
        if not isinstance(deadline, (int, float)) or isinstance(deadline, bool) or not 0 < deadline <= 300:
            raise bad("[ready].deadline", "seconds from start to ready: a number above 0, at most 300")
        ready_out["deadline"] = float(deadline)
    if set(ready) - {"kind", "path", "deadline"}:
        raise bad("[ready]", f"unknown keys {sorted(set(ready) - {'kind', 'path', 'deadline'})}")
    if kind == "http":
        ready_out["path"] = text(ready, "[ready]", "path")
        if not ready_out["path"].startswith("/"):
            raise bad("[ready].path", "must start with '/'")

    turn = table("turn")
    style = text(turn, "[turn]", "style")
    if style not in STYLES:
        raise bad("[turn].style", f"{style!r} is not one of {', '.join(STYLES)}")
    port = turn.get("port")
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise bad("[turn].port", "a TCP port number is required")
    turn_out: dict[str, object] = {"style": style, "port": port, "start": route(turn, "[turn]", "start", "POST"),
                                   "input_field": text(turn, "[turn]", "input_field"),
                                   "reply_field": text(turn, "[turn]", "reply_field"),
                                   "key_file": text(turn, "[turn]", "key_file", "")}
    if style == "runs":
        for key in ("run_id_field", "status_field"):
            turn_out[key] = text(turn, "[turn]", key)
        turn_out["status"] = route(turn, "[turn]", "status", "GET")
        if "events" in turn or "events_field" in turn:
            turn_out["events_field"] = text(turn, "[turn]", "events_field")
            turn_out["events"] = route(turn, "[turn]", "events", "GET")
        turn_out["done"] = strings(turn, "[turn]", "done")
        turn_out["failed"] = strings(turn, "[turn]", "failed") if "failed" in turn else ()
        turn_out["failed_reply_field"] = text(turn, "[turn]", "failed_reply_field", "")
        turn_out["reply_type_field"] = text(turn, "[turn]", "reply_type_field", "")
        turn_out["reply_type"] = text(turn, "[turn]", "reply_type", "")
        turn_out["held"] = strings(turn, "[turn]", "held") if "held" in turn else ()
        if "stop" in turn:
            turn_out["stop"] = route(turn, "[turn]", "stop", "POST")
        if turn_out["held"] and "stop" not in turn:
            raise bad("[turn].stop", "held states need the route that stops a run (e.g. \"POST /v1/runs/{id}/stop\")")
    known_turn = {"style", "port", "start", "input_field", "reply_field", "key_file", "failed", "failed_reply_field",
                  "reply_type_field", "held", "stop",
                  "reply_type", *RUNS_FIELDS}
    if turn_out["key_file"] and not str(turn_out["key_file"]).startswith("/"):
        raise bad("[turn].key_file", "must be an absolute path inside the sandbox")
    if set(turn) - known_turn:
        raise bad("[turn]", f"unknown keys {sorted(set(turn) - known_turn)}")

    surface: dict[str, str] = {}
    if "surface" in raw:
        section = table("surface")
        surface = {"route": route(section, "[surface]", "route", "GET"), "field": text(section, "[surface]", "field")}

    state, plant = table("state"), table("plant")
    for section, where in ((state, "[state]"), (plant, "[plant]")):
        for location in LOCATIONS:
            text(section, where, location)
        if set(section) - set(LOCATIONS):
            raise bad(where, f"unknown locations {sorted(set(section) - set(LOCATIONS))}: use {', '.join(LOCATIONS)}")
    for location, where in state.items():
        if not where.startswith("/"):
            raise bad(f"[state].{location}", f"{where!r} must be an absolute path inside the sandbox")
    for location, message in plant.items():
        if "{token}" not in message:
            raise bad(f"[plant].{location}", "the message must hold {token}")
    tools = table("tools")
    for key, value in tools.items():
        if not isinstance(value, str) or not value:
            raise bad(f"[tools].{key}", "the agent's name for the tool must be a non-empty string")
    arguments = table("arguments", optional=True)
    for key, value in arguments.items():
        if key not in ("shell", "memory"):
            raise bad(f"[arguments].{key}", "only the agent's own tools take templates here: shell, memory")
        if not isinstance(value, dict) or not value or not all(isinstance(v, str) for v in value.values()):
            raise bad(f"[arguments].{key}", "a table of string templates is required")
    dialect = text(raw, "top level", "dialect", "")

    managed: dict[str, object] = {}
    if "managed" in raw:
        section = table("managed")
        if set(section) - {"file", "syntax", "schema", "sha256", "path"}:
            raise bad("[managed]", f"unknown keys {sorted(set(section) - {'file', 'syntax', 'schema', 'sha256', 'path'})}")
        for key in ("file", "schema"):
            source = (path.parent / text(section, "[managed]", key)).resolve()
            if not source.is_file():
                raise bad(f"[managed].{key}", f"{section[key]!r} ({source}) is not a file")
            managed[key] = source
        managed["syntax"] = text(section, "[managed]", "syntax")
        if managed["syntax"] not in SYNTAXES:
            raise bad("[managed].syntax", f"{managed['syntax']!r} is not one of {', '.join(SYNTAXES)}")
        managed["sha256"] = text(section, "[managed]", "sha256")
        if not re.fullmatch(r"[0-9a-f]{64}", str(managed["sha256"])):
            raise bad("[managed].sha256", "the file's SHA-256, 64 lowercase hex digits, is required")
        managed["path"] = text(section, "[managed]", "path")
        if not re.fullmatch(r"/etc/[A-Za-z0-9._-]+/[A-Za-z0-9._-]+", str(managed["path"])) or ".." in str(managed["path"]):
            raise bad("[managed].path", f"{managed['path']!r} must be /etc/<folder>/<file>")

    settings: dict[str, object] = {}
    if "settings" in raw:
        section = table("settings")
        if set(section) - {"path", "syntax", "allow"}:
            raise bad("[settings]", f"unknown keys {sorted(set(section) - {'path', 'syntax', 'allow'})}")
        settings["path"] = text(section, "[settings]", "path")
        if not str(settings["path"]).startswith("/data/") or ".." in str(settings["path"]).split("/"):
            raise bad("[settings].path", f"{settings['path']!r} must be a file on the volume, under /data/")
        settings["syntax"] = text(section, "[settings]", "syntax")
        if settings["syntax"] not in SYNTAXES:
            raise bad("[settings].syntax", f"{settings['syntax']!r} is not one of {', '.join(SYNTAXES)}")
        allow = section.get("allow")
        if not isinstance(allow, dict):
            raise bad("[settings].allow", "a table is required: dotted path -> kind (text, bool, int)")
        for key, kind in allow.items():
            if kind not in SETTING_KINDS:
                raise bad(f"[settings].allow.{key!r}", f"{kind!r} is not one of {', '.join(SETTING_KINDS)}")
        settings["allow"] = dict(allow)

    background: dict[str, object] = {}
    if "background" in raw:
        section = table("background")
        if set(section) - {"purposes", "settings"}:
            raise bad("[background]", f"unknown keys {sorted(set(section) - {'purposes', 'settings'})}")
        background["purposes"] = strings(section, "[background]", "purposes")
        wanted = section.get("settings", {})
        if not isinstance(wanted, dict):
            raise bad("[background].settings", "a table of a user's settings is required")
        if wanted and settings:
            # The platform writes them through its allowlist: every leaf must be kept, or the agent never sees it.
            refused = _not_allowed(wanted, dict(settings["allow"]))
            if refused:
                raise bad("[background].settings", f"{', '.join(refused)} not kept by [settings].allow: allow them "
                          "(or drop them), else the agent never makes the background call")
        # Without [settings] the agent applies its user's settings itself: the target's ``configure`` hands them over
        # as its user would (the reference agent's settings message, hermes-unguarded's driver's config.yaml).
        background["settings"] = wanted
    return AgentProfile(name=name, path=path, command=command, files=tuple(files), env=dict(env), ready=ready_out,
                        turn=turn_out, state=dict(state), plant=dict(plant), tools=dict(tools), surface=surface,
                        binds=binds, process=process, arguments=arguments, dialect=dialect, managed=managed,
                        settings=settings, background=background)
