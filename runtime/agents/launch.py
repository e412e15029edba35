"""How the platform runs one kind of agent: its launch spec (``AgentLaunch``), built by whoever configures the
controller (the suite's reference driver builds it from an agent profile).

An agent is started from files copied into the instance image (read-only at ``/opt/pairproof``) with a
command and an environment of its own; it is ready when its readiness rule holds (checked from the host);
its turns are delivered through its own HTTP API inside the sandbox, which the platform reaches from the
host through the instance's broker (``Broker.forward_runctl``), never through a shim in the agent. Two
styles of turn API are known, each described by data (paths and JSON field names):

- ``runs``: POST starts a run and answers its id; GET polls its status until it is done; GET reads its
  events, and the reply is the content of the last event of the reply type (the reference agent's
  run-control API); or, for an API with no ``events`` route in its launch (whose events are a live
  stream), the reply is a field of the finished run's status (hermes-agent's);
- ``sync``: one POST whose answer carries the reply.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from urllib.parse import quote

from runtime import httpjson
from runtime.agents import managed as managed_files
from runtime.agents.settings import UserSettings
from runtime.errors import ConfigError, SandboxError

ROUTE = re.compile(r"^(GET|POST) (/[A-Za-z0-9._~/{}-]*)$")
READINESS = ("listening", "http")
STYLES = ("runs", "sync")
IMAGE_MOUNT = "/opt/pairproof"  # where the image's files are, read-only, inside every sandbox


def _route(value: str, what: str) -> tuple[str, str]:
    match = ROUTE.match(value)
    if not match:
        raise ConfigError(f"{what} {value!r} is not 'GET /path' or 'POST /path'")
    return match.group(1), match.group(2)


@dataclass(frozen=True)
class Readiness:
    """``listening``: the agent's API port accepts a connection inside its network namespace; ``http``: a
    GET of ``path`` on it answers 2xx."""

    kind: str = "listening"
    path: str = ""

    def __post_init__(self) -> None:
        if self.kind not in READINESS:
            raise ConfigError(f"readiness {self.kind!r} is unknown: use one of {', '.join(READINESS)}")
        if self.kind == "http" and not self.path.startswith("/"):
            raise ConfigError(f"readiness http needs a path starting with '/', not {self.path!r}")


@dataclass(frozen=True)
class TurnApi:
    """How a turn reaches the agent's own API and how its reply is read (paths may hold ``{id}``)."""

    style: str
    port: int
    start: str  # "POST /v1/runs" (runs) or "POST /chat" (sync)
    input_field: str
    reply_field: str  # sync: in the POST's answer; runs: in the reply event
    run_id_field: str = ""
    status: str = ""  # "GET /v1/runs/{id}"
    status_field: str = ""
    done: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    events: str = ""  # "GET /v1/runs/{id}/events"
    events_field: str = ""  # empty with ``events``: the reply is ``reply_field`` of the finished status
    reply_type_field: str = ""
    reply_type: str = ""
    # A run that ends in a ``failed`` state and says why in this field of its status has answered the turn: its
    # reply is "[run <state>] <why>" (an agent whose model call the platform refused, by the spend cap or the
    # kill switch, fails its run where another agent would reply). Empty: a failed run is an error.
    failed_reply_field: str = ""
    # States in which a run waits on a decision of the agent's own that nobody on the platform's path takes (hermes:
    # "waiting_for_approval", its own approval prompt for a command it judges dangerous). The platform's approvals
    # are the product's cards; a run held by a second prompt is stopped (``stop``) at once and its turn answered
    # "[run held: <state>] ...": the turn is not left to wait out the agent's own approval timeout.
    held: tuple[str, ...] = ()
    stop: str = ""  # "POST /v1/runs/{id}/stop": how the platform stops a run (required with ``held``)
    # Where the agent reads its run-control key inside the sandbox (a file in the instance's run folder,
    # /run/agent, which the platform writes each wake and the broker presents); empty: its API takes none.
    key_file: str = ""

    def __post_init__(self) -> None:
        if self.style not in STYLES:
            raise ConfigError(f"turn style {self.style!r} is unknown: use one of {', '.join(STYLES)}")
        if not 0 < self.port < 65536:
            raise ConfigError(f"turn port {self.port} is not a TCP port")
        if _route(self.start, "turn start")[0] != "POST":
            raise ConfigError(f"turn start {self.start!r} must be a POST")
        if not self.input_field or not self.reply_field:
            raise ConfigError("a turn API needs input_field and reply_field")
        if self.key_file and not self.key_file.startswith("/run/agent/"):
            raise ConfigError(f"key_file {self.key_file!r} must be in the instance's run folder, /run/agent/")
        if self.style == "runs":
            for name in ("run_id_field", "status", "status_field", "done"):
                if not getattr(self, name):
                    raise ConfigError(f"a 'runs' turn API needs {name}")
            if bool(self.events) != bool(self.events_field):
                raise ConfigError("a 'runs' turn API gives events and events_field together, or neither (the reply "
                                  "is then reply_field of the finished run's status)")
            for name in ("status", "events"):
                if getattr(self, name) and _route(getattr(self, name), f"turn {name}")[0] != "GET":
                    raise ConfigError(f"turn {name} {getattr(self, name)!r} must be a GET")
            if self.held and not self.stop:
                raise ConfigError("a 'runs' turn API with held states needs stop (the route that stops a run)")
            if self.stop and _route(self.stop, "turn stop")[0] != "POST":
                raise ConfigError(f"turn stop {self.stop!r} must be a POST")
            if set(self.held) & {*self.done, *self.failed}:
                raise ConfigError(f"turn held states {list(self.held)} are also done or failed states")


@dataclass(frozen=True)
class AgentLaunch:
    """One agent, as the platform starts it and talks to it."""

    command: tuple[str, ...]
    files: tuple[Path, ...]  # copied into the image, by name
    turn: TurnApi
    env: tuple[tuple[str, str], ...] = ()
    ready: Readiness = field(default_factory=Readiness)
    # Host folders the agent's software lives in (an installed venv), each mounted read-only at its own path
    # under /opt/ in every sandbox: (path inside, host folder). Never writable, never the volume.
    binds: tuple[tuple[str, Path], ...] = ()
    # The agent's managed file: its reviewed bytes, syntax, schema, pin and place in the sandbox (the reference
    # agent's JSON by default). The controller checks it at provision and at every cold start.
    managed: managed_files.ManagedFormat = managed_files.REFERENCE
    # Where the agent reads its user's settings and what of them may apply; None: the agent applies its user's
    # settings itself (the reference agent, through its managed file's user_settable).
    settings: UserSettings | None = None
    # Start-up inputs the platform decides: files (and folders, given as None) on the volume the agent reads as it
    # starts, written by the platform before every start and bound read-only over the volume (path inside ->
    # bytes). What an agent reads at start from its home and could write itself would be an authority it grants
    # itself (a profile pointer, an env file, a hooks folder): the platform writes those, never the agent.
    pinned: tuple[tuple[str, bytes | None], ...] = ()

    def __post_init__(self) -> None:
        if not self.command:
            raise ConfigError("an agent launch needs a command")
        for inside, _ in self.pinned:
            parts = PurePosixPath(inside).parts
            if not inside.startswith("/data/") or ".." in parts or len(parts) < 3 or inside.endswith("/"):
                raise ConfigError(f"pinned start-up input {inside!r} must be a path under /data/ (the volume)")
            if self.settings is not None and inside == self.settings.path:
                raise ConfigError(f"pinned start-up input {inside!r} is the user's settings file: the platform "
                                  "writes that one from the allowlist")
        if len({inside for inside, _ in self.pinned}) != len(self.pinned):
            raise ConfigError("pinned start-up inputs must have distinct paths")
        targets = [inside for inside, _ in self.binds]
        for inside, host in self.binds:
            parts = Path(inside).parts
            if not inside.startswith("/opt/") or ".." in parts or len(parts) < 3 or inside.rstrip("/") == IMAGE_MOUNT:
                raise ConfigError(f"agent bind {inside!r} must be a folder under /opt/ other than {IMAGE_MOUNT}")
            if not Path(host).is_dir():
                raise ConfigError(f"agent bind {inside!r}: host folder {host} does not exist (is the agent installed? "
                                  "tools/setup-machine installs the agents it knows)")
        if len(set(targets)) != len(targets):
            raise ConfigError(f"agent binds must have distinct paths inside: {targets}")
        names = [f.name for f in self.files]
        if len(set(names)) != len(names):
            raise ConfigError(f"agent image files must have distinct names: {names}")


# HTTP as the platform speaks it to an agent's API: request(method, path, body) -> (status, raw body).
Request = Callable[[str, str, "bytes | None"], tuple[int, bytes]]


def _json(status: int, raw: bytes, what: str) -> dict:
    if status >= 400:
        raise SandboxError(f"agent refused {what}: HTTP {status}: {raw[:300].decode(errors='replace')}")
    try:
        answer = json.loads(raw or b"{}")
    except ValueError:
        raise SandboxError(f"agent answered {what} with no JSON: {raw[:300]!r}") from None
    if not isinstance(answer, dict):
        raise SandboxError(f"agent answered {what} with {type(answer).__name__}, not an object")
    return answer


def _field(answer: dict, name: str, what: str) -> object:
    if name not in answer:
        raise SandboxError(f"agent's answer to {what} has no {name!r}: {json.dumps(answer)[:300]}")
    return answer[name]


def deliver(api: TurnApi, request: Request, message: str, *, timeout: float) -> str:
    """One turn through the agent's own API; its reply text. SandboxError when the agent refuses, fails
    the run, answers out of shape, or does not finish within ``timeout``."""
    _, start = _route(api.start, "turn start")
    answer = _json(*request("POST", start, json.dumps({api.input_field: message}).encode()), "the turn")
    if api.style == "sync":
        return str(_field(answer, api.reply_field, "the turn"))
    run_id = quote(str(_field(answer, api.run_id_field, "the turn")), safe="")
    end = time.monotonic() + timeout
    pause = 0.002
    while True:
        status = _json(*request("GET", _route(api.status, "turn status")[1].replace("{id}", run_id), None),
                       f"run {run_id}'s status")
        state = _field(status, api.status_field, f"run {run_id}'s status")
        if state in api.failed:
            if api.failed_reply_field and isinstance(status.get(api.failed_reply_field), str):
                return f"[run {state}] {status[api.failed_reply_field]}"
            raise SandboxError(f"agent's run {run_id} ended {state}")
        if state in api.done:
            break
        if state in api.held:
            # Held by a prompt of the agent's own: stopped now, and that is the turn's answer (with what the
            # agent's status says of it), not an error: the platform took no part in the prompt.
            stopped = request("POST", _route(api.stop, "turn stop")[1].replace("{id}", run_id), b"{}")[0]
            detail = {k: v for k, v in status.items() if k not in (api.reply_field, api.status_field)}
            return f"[run held: {state}] stopped by the platform (stop answered {stopped}); {json.dumps(detail)[:400]}"
        if time.monotonic() > end:
            raise SandboxError(f"agent's run {run_id} not done within {timeout}s (still {state})")
        time.sleep(pause)
        pause = min(pause * 2, 0.02)
    if not api.events:
        if api.reply_field not in status:
            raise SandboxError(f"agent's run {run_id} ended {state} with no {api.reply_field!r} in its status")
        return str(status[api.reply_field])
    events_path = _route(api.events, "turn events")[1].replace("{id}", run_id)
    events = _field(_json(*request("GET", events_path, None), f"run {run_id}'s events"),
                    api.events_field, f"run {run_id}'s events")
    replies = [e for e in events if isinstance(e, dict)
               and (not api.reply_type_field or e.get(api.reply_type_field) == api.reply_type)
               and api.reply_field in e] if isinstance(events, list) else []
    if not replies:
        raise SandboxError(f"agent's run {run_id} ended {state} with no reply event")
    return str(replies[-1][api.reply_field])


# The runtime's own agent (runtime/agents/reference.py) and its run-control API: what a controller runs unless told
# otherwise. The suite's reference profile (acceptance/targets/profiles/reference.toml) says the same, as data.
REFERENCE = AgentLaunch(
    command=("/usr/bin/python3", "-I", "-S", f"{IMAGE_MOUNT}/reference.py"),
    files=(Path(__file__).with_name("reference.py"),),
    turn=TurnApi(style="runs", port=8642, start="POST /v1/runs", input_field="input", run_id_field="run_id",
                 status="GET /v1/runs/{id}", status_field="status", done=("completed", "stopped"),
                 events="GET /v1/runs/{id}/events", events_field="events",
                 reply_type_field="type", reply_type="message", reply_field="content",
                 key_file="/run/agent/runctl.key"),
)


def http_in(pid: int, port: int, method: str, path: str, body: bytes | None, *, timeout: float = httpjson.AGENT_TIMEOUT,
            headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """One HTTP request to 127.0.0.1:``port`` inside the network namespace of ``pid``, from the host (the
    platform's path to an agent when it runs no broker)."""
    import http.client

    from runtime.isolation.netns import socket_in

    sock = socket_in(pid)
    sock.settimeout(timeout)
    try:
        sock.connect(("127.0.0.1", port))
    except OSError:
        sock.close()
        raise
    try:
        return httpjson.request(method, f"http://127.0.0.1:{port}{path}", body,
                                {"Content-Type": "application/json", **(headers or {})}, timeout=timeout, sock=sock)
    except http.client.HTTPException as exc:
        raise SandboxError(f"agent's API answered {method} {path} out of HTTP: {type(exc).__name__}") from exc
