"""The ``hermes`` target: the reference platform with hermes-agent 0.19.0 as the agent, behind the platform's guards.

Everything the reference driver does holds (lifecycle through the controller, probes through ``nsenter``, turns
to the agent's own run API through the instance's broker); what differs is the agent. Hermes decides what to
do with a message by asking its model, and its model is the lab's scripted provider: planting a canary is one
turn whose model answer is scripted to call hermes's own tool for that location (``PLANT_CALLS``) and then
reply, so the canary lands where hermes itself keeps that kind of state, written by hermes.

Where hermes keeps each location (its home is ``/data/hermes`` on the private volume): memory in
``memories/MEMORY.md`` (its ``memory`` tool), the transcript and its task list (``todo``) in its session
database ``state.db`` (SQLite; recent writes sit in ``state.db-wal``, so reading back reads both files), the
volume as a file its ``write_file`` tool writes.

Its guards are the platform's, from its profile: the managed layer (``[managed]``, YAML) is checked and pinned
by the controller before every start, so ``managed_config`` and ``start_with_managed_config`` are the
reference driver's; a user's settings (``configure``) go through the platform's allowlist (``[settings]``)
into ``$HERMES_HOME/config.yaml``, and hermes is restarted to read them.
"""

from __future__ import annotations

import json
import os
import secrets

from acceptance.errors import SetupError, TargetError
from acceptance.harness import http
from acceptance.targets import TargetOptions
from acceptance.targets.profiles import load as load_profile
from acceptance.targets.reference.driver import ReferenceTarget, clean
from acceptance.targets.reference.driver import preflight as reference_preflight
from acceptance.targets.reference.helpers import add_mounts, before_command

__all__ = ["DEFAULT_PROFILE", "HermesTarget", "clean", "create", "preflight"]

PROFILE = DEFAULT_PROFILE = "hermes"  # the agent this target runs (targets.default_profile)
# hermes's own tools in the toolsets acceptance/targets/profiles/hermes/config.yaml pins (platform_toolsets.api_server).
HERMES_TOOLS = ("memory", "todo", "read_file", "write_file", "patch", "search_files")
MCP_PREFIX = "mcp__product__"  # hermes names an MCP tool mcp__<server>__<tool>; the product's server is "product"
PRODUCT_TOOLS = ("notes_create", "notes_get", "notes_list", "issues_list", "issue_get", "issue_comment", "task_create",
                 "crm_note", "message_send", "invite", "conversation_post", "conversation_add_participant")


# hermes as its user would run it, with no managed layer: its own defaults, so its start-up lookups are on (a
# tirith download, model metadata), and a user's config naming a model it knows nothing of. Its API server is
# on (a gateway with no platform at all exits), with a key of the arrangement's own, never the platform's.
DEFAULTS_CONFIG = "model:\n  provider: custom\n  base_url: http://127.0.0.1:8765/v1\n  default: pairproof-model\n"


def _plant_call(location: str, message: str) -> dict:
    """The scripted model step that makes hermes keep ``message`` at ``location`` with its own tool."""
    if location == "memory":
        return {"tool": "memory", "arguments": {"action": "add", "target": "memory", "content": message}}
    if location == "task":
        return {"tool": "todo", "arguments": {"todos": [{"id": "t1", "content": message, "status": "pending"}]}}
    if location == "volume":
        return {"tool": "write_file", "arguments": {"path": "/data/files/notes.txt", "content": message}}
    raise TargetError(f"no hermes tool keeps {location!r}")


def _answer(raw: bytes) -> dict:
    """A JSON answer, or a stream of server-sent events as ``{"events": [...]}`` (comments skipped)."""
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except ValueError:
        pass
    events = []
    for event in http.sse_events(raw.decode(errors="replace").splitlines()):
        for field, value in event:
            if field != "data":
                raise TargetError(f"hermes answered neither JSON nor server-sent events: {raw[:200]!r}")
            try:
                events.append(json.loads(value))
            except ValueError:
                raise TargetError(f"hermes answered an event that is not JSON: {value[:200]!r}") from None
    return {"events": events}


def create(options: TargetOptions) -> HermesTarget:
    return HermesTarget(options)


def preflight() -> list[str]:
    """The reference platform's needs, and hermes installed (its profile loads: its venv exists)."""
    problems = reference_preflight()
    try:
        load_profile(PROFILE)
    except SetupError as exc:
        problems.append(str(exc))
    return problems


class HermesTarget(ReferenceTarget):
    name = PROFILE

    def __init__(self, options: TargetOptions) -> None:
        if options.profile.name != self.name:
            raise SetupError(f"target {self.name} runs the {self.name} profile, not {options.profile.name!r}: drop "
                             "--profile, or use --target reference --profile ... for another agent")
        super().__init__(options)

    def plant(self, ref, location: str, token: str) -> None:
        """One turn with the profile's message; for memory, task and volume the model's answer is scripted to
        call hermes's own tool for it first. The transcript needs no tool: hermes records the turn itself."""
        if location not in self.profile.plant:
            raise TargetError(f"unknown canary location {location!r}: expected one of {', '.join(self.profile.plant)}")
        message = self.profile.plant_message(location, token)
        steps = [] if location == "transcript" else [_plant_call(location, message)]
        self.script_model(ref.principal, [*steps, {"reply": "noted"}])
        self.turn(ref, message)

    def read_back(self, ref, location: str) -> str:
        """As the reference driver; a SQLite file is read with its write-ahead log, where recent writes are."""
        text = super().read_back(ref, location)
        path = self.profile.state.get(location, "")
        if path.endswith(".db"):
            wal = self.exec(ref, ["/bin/sh", "-c", 'if [ -e "$1" ]; then exec /bin/cat -- "$1"; fi', "read-back",
                                  path + "-wal"])
            if wal.rc != 0:
                raise TargetError(f"reading {location} ({path}-wal) in {ref.key} failed with {wal.rc}")
            text += wal.stdout.decode(errors="replace")
        return text

    def intended_tools(self):
        """The surface signed off for hermes: the toolsets its managed layer pins for its API (memory, todo, file)
        and the product's tools through the broker, as hermes names them."""
        return {**{name: "builtin" for name in HERMES_TOOLS},
                **{self.profile.tool(name): "mcp:product" for name in PRODUCT_TOOLS}}

    def tool_surface(self, ref):
        """The tools hermes last offered its model for this instance's principal, as the provider recorded them
        (hermes has no route that says which tools it offers)."""
        user = f"{ref.principal.org}:{ref.principal.user}"
        offered = [r for r in self.provider_records() if r["user"] == user and r["status"] == 200]
        if not offered:
            raise TargetError(f"hermes of {ref.key} has not called its model yet: no tool surface seen")
        return {name: ("mcp:product" if name.startswith(MCP_PREFIX) else "builtin")
                for name in offered[-1]["tools"]}

    def runctl(self, ref, method: str, path: str, body=None, *, request_id: str = ""):
        """As the reference driver; hermes answers a run's events as server-sent events, which come back as
        ``{"events": [each event's data, parsed]}``."""
        from acceptance.targets.reference.helpers import request_header

        try:
            answer = http.request(method, self.controller.broker(ref.key).runctl_url + path, http.json_body(method, body),
                                  {"Content-Type": "application/json", **request_header(request_id)},
                                  timeout=http.DRIVER_TIMEOUT)
        except OSError as exc:
            raise TargetError(f"the broker of {ref.key} did not answer {method} {path}: {exc}") from exc
        return answer.status, _answer(answer.body)

    def _open_egress(self, principal, lab, catalog_refresh: float = 0.0):
        """As the reference driver's (a default route and a resolver into the lab only: the sandbox reaches
        nothing outside the run's lab); with ``catalog_refresh`` the sandbox runs hermes with its own defaults
        instead of the reference agent's catalog refresh: no managed layer (the reviewed file is not bound), so
        its start-up lookups are on. They happen at start, not every ``catalog_refresh`` seconds."""
        if not catalog_refresh:
            return super()._open_egress(principal, lab)
        uid = self._free_uid()
        resolv = self._lab_resolver()
        # The guarded profile binds its reviewed managed file (its [managed].path); a profile without one
        # (hermes-unguarded) binds none of hermes's, and hermes looks where the profile's environment says.
        managed = str(self.profile.managed.get("path", ""))
        folder = os.path.dirname(managed) if managed else self.profile.env.get("HERMES_MANAGED_DIR", "/etc/hermes")
        env = {"HERMES_HOME": "/data/hermes", "API_SERVER_ENABLED": "true", "API_SERVER_HOST": "127.0.0.1",
               "API_SERVER_PORT": str(self.profile.turn["port"]), "API_SERVER_KEY": secrets.token_hex(16),
               "HERMES_MANAGED_DIR": folder}
        mounts = ["--ro-bind", str(resolv), "/etc/resolv.conf"]  # before the root is sealed read-only
        for inside, host in self.profile.binds.items():
            mounts += ["--ro-bind", str(host), inside]
        extra = [a for key, value in env.items() for a in ("--setenv", key, value)]

        def edit(argv: list[str]) -> list[str]:
            # the reviewed managed file is not bound: its folder stays, empty (hermes runs on its defaults)
            if managed:
                at = argv.index(managed)
                argv = argv[:at - 2] + argv[at + 1:]
            return before_command(add_mounts(argv, mounts), extra)

        seed = DEFAULTS_CONFIG.replace("\n", "\\n")
        command = ("/bin/sh", "-c", f"mkdir -p /data/hermes && printf '{seed}' > /data/hermes/config.yaml && "
                   f": > /run/agent/ready && exec {self.profile.process}")
        ref = self._start_broken(principal, uid=uid, volume=None, command=command, edit=edit)
        lab.connect(self._broken[ref.key].host_pid)
        return ref

    def pin_tool(self, ref, name: str) -> None:
        """Pin a product tool, named as the product or as hermes names it (``mcp__product__<name>``)."""
        super().pin_tool(ref, name.removeprefix(MCP_PREFIX))
