"""The runtime's agent launch spec and turn delivery (``runtime/agents/launch.py``), against a fake agent API."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime.agents import launch as agents
from runtime.agents.launch import AgentLaunch, Readiness, TurnApi, deliver
from runtime.errors import ConfigError, SandboxError

SYNC = TurnApi(style="sync", port=8700, start="POST /chat", input_field="text", reply_field="answer")


def runs_agent(statuses: list[str], events: list[dict]):
    """A fake 'runs' API: the run's status goes through ``statuses``; every request is recorded."""
    seen: list[tuple[str, str, object]] = []
    left = list(statuses)

    def request(method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
        seen.append((method, path, json.loads(body) if body else None))
        if (method, path) == ("POST", "/v1/runs"):
            return 202, json.dumps({"run_id": "run_1"}).encode()
        if (method, path) == ("GET", "/v1/runs/run_1"):
            return 200, json.dumps({"status": left.pop(0) if len(left) > 1 else left[0]}).encode()
        if (method, path) == ("GET", "/v1/runs/run_1/events"):
            return 200, json.dumps({"events": events}).encode()
        return 404, b"{}"
    return request, seen


def test_a_runs_turn_starts_polls_until_done_and_reads_the_last_reply_event():
    request, seen = runs_agent(["running", "running", "completed"],
                               [{"type": "run.started"}, {"type": "message", "content": "first"},
                                {"type": "note", "content": "not a reply"}, {"type": "message", "content": "hello"}])
    assert deliver(agents.REFERENCE.turn, request, "hi", timeout=5) == "hello"
    assert seen[0] == ("POST", "/v1/runs", {"input": "hi"})
    assert [p for _, p, _ in seen[1:]] == ["/v1/runs/run_1"] * 3 + ["/v1/runs/run_1/events"]


def test_a_sync_turn_is_one_post():
    seen = []

    def request(method, path, body):
        seen.append((method, path, json.loads(body)))
        return 200, b'{"answer": "yes"}'
    assert deliver(SYNC, request, "well?", timeout=5) == "yes"
    assert seen == [("POST", "/chat", {"text": "well?"})]


@pytest.mark.parametrize("answer,match", [
    ((500, b'{"error": "boom"}'), "HTTP 500"),
    ((200, b"not json"), "no JSON"),
    ((200, b'{"reply": "x"}'), "has no 'answer'"),
    ((200, b"[1]"), "not an object"),
])
def test_an_answer_out_of_shape_is_a_sandbox_error(answer, match):
    with pytest.raises(SandboxError, match=match):
        deliver(SYNC, lambda *_: answer, "x", timeout=5)


def test_a_run_that_never_finishes_or_fails_or_has_no_reply_is_a_sandbox_error():
    request, _ = runs_agent(["running"], [])
    with pytest.raises(SandboxError, match="not done within"):
        deliver(agents.REFERENCE.turn, request, "x", timeout=0.05)
    failing = TurnApi(**{**vars(agents.REFERENCE.turn), "failed": ("failed",)})
    request, _ = runs_agent(["failed"], [])
    with pytest.raises(SandboxError, match="ended failed"):
        deliver(failing, request, "x", timeout=5)
    request, _ = runs_agent(["completed"], [{"type": "run.started"}])
    with pytest.raises(SandboxError, match="no reply event"):
        deliver(agents.REFERENCE.turn, request, "x", timeout=5)


def test_a_run_id_cannot_steer_the_path():
    seen = []

    def request(method, path, body):
        seen.append(path)
        if method == "POST":
            return 202, b'{"run_id": "../../v1/jobs"}'
        return 200, b'{"status": "completed", "events": [{"type": "message", "content": "ok"}]}'
    deliver(agents.REFERENCE.turn, request, "x", timeout=5)
    assert seen[1:] == ["/v1/runs/..%2F..%2Fv1%2Fjobs", "/v1/runs/..%2F..%2Fv1%2Fjobs/events"]


@pytest.mark.parametrize("make,match", [
    (lambda: TurnApi(style="stream", port=1, start="POST /x", input_field="a", reply_field="b"), "style"),
    (lambda: TurnApi(style="sync", port=0, start="POST /x", input_field="a", reply_field="b"), "port"),
    (lambda: TurnApi(style="sync", port=1, start="GET /x", input_field="a", reply_field="b"), "must be a POST"),
    (lambda: TurnApi(style="runs", port=1, start="POST /x", input_field="a", reply_field="b"), "needs run_id_field"),
    (lambda: TurnApi(style="sync", port=1, start="POST /x", input_field="a", reply_field="b", key_file="/etc/k"),
     "run folder"),
    (lambda: Readiness("file"), "readiness"),
    (lambda: Readiness("http", "health"), "path"),
    (lambda: AgentLaunch(command=(), files=(), turn=SYNC), "command"),
    (lambda: AgentLaunch(command=("x",), files=(Path("a/x.py"), Path("b/x.py")), turn=SYNC), "distinct"),
])
def test_a_launch_spec_out_of_shape_is_refused(make, match):
    with pytest.raises(ConfigError, match=match):
        make()


def test_the_reference_launch_runs_the_runtime_agent():
    assert agents.REFERENCE.files == (Path(agents.__file__).with_name("reference.py"),)
    assert agents.REFERENCE.command[-1] == "/opt/pairproof/reference.py"


def test_a_runs_turn_without_an_events_route_reads_the_reply_from_the_finished_status():
    """hermes-agent's shape: its events are a live stream, and the finished run's status carries the output."""
    api = TurnApi(style="runs", port=8642, start="POST /v1/runs", input_field="input", run_id_field="run_id",
                  status="GET /v1/runs/{id}", status_field="status", done=("completed",), reply_field="output")
    seen = []

    def request(method, path, body):
        seen.append((method, path))
        if method == "POST":
            return 202, b'{"run_id": "run_1"}'
        state = "running" if len(seen) < 3 else "completed"
        return 200, json.dumps({"status": state, **({"output": "done it"} if state == "completed" else {})}).encode()
    assert deliver(api, request, "x", timeout=5) == "done it"
    assert seen == [("POST", "/v1/runs"), ("GET", "/v1/runs/run_1"), ("GET", "/v1/runs/run_1")]
    with pytest.raises(SandboxError, match="no 'output' in its status"):
        deliver(api, lambda m, p, b: (202, b'{"run_id": "r"}') if m == "POST" else (200, b'{"status": "completed"}'),
                "x", timeout=5)


@pytest.mark.parametrize("binds,match", [
    ((("/usr/lib/x", "."),), "under /opt/"),
    ((("/opt/pairproof", "."),), "under /opt/"),
    ((("/opt/../etc", "."),), "under /opt/"),
    ((("/opt/venv", "/nonexistent/venv"),), "does not exist"),
    ((("/opt/venv", "."), ("/opt/venv", ".")), "distinct"),
])
def test_an_agent_bind_must_be_an_existing_folder_mounted_under_opt(binds, match):
    with pytest.raises(ConfigError, match=match):
        AgentLaunch(command=("x",), files=(), turn=SYNC, binds=tuple((inside, Path(host)) for inside, host in binds))


def test_events_and_events_field_come_together():
    with pytest.raises(ConfigError, match="events and events_field together"):
        TurnApi(style="runs", port=1, start="POST /x", input_field="a", reply_field="b", run_id_field="id",
                status="GET /x/{id}", status_field="s", done=("d",), events="GET /x/{id}/events")


def test_the_sandbox_mounts_an_agent_bind_read_only(tmp_path):
    from runtime.isolation import sandbox

    spec = sandbox.SandboxSpec(instance_id="i", uid=1, gid=1, volume=tmp_path, control_dir=tmp_path, etc_dir=tmp_path,
                               image_dir=tmp_path, hostname="h", binds=((tmp_path / "venv", "/opt/venv"),))
    argv = sandbox.bwrap_argv(spec, ["true"], info_fd=3, seccomp_fd=4)
    at = argv.index(str(tmp_path / "venv"))
    assert argv[at - 1:at + 2] == ["--ro-bind", str(tmp_path / "venv"), "/opt/venv"]
    assert at < argv.index("--chdir")


def test_a_mount_added_to_the_launcher_goes_before_the_root_is_sealed(tmp_path):
    """bwrap makes a mount point on the root, read-only once ``--remount-ro /`` has run: a broken arrangement's
    extra bind goes before it (before the command when the launcher has no seal)."""
    from runtime.isolation import sandbox

    spec = sandbox.SandboxSpec(instance_id="i", uid=1, gid=1, volume=tmp_path, control_dir=tmp_path, etc_dir=tmp_path,
                               image_dir=tmp_path, hostname="h")
    argv = sandbox.bwrap_argv(spec, ["true"], info_fd=3, seccomp_fd=4)
    bind = ["--ro-bind", "/x", "/etc/resolv.conf"]
    seal = argv.index("--remount-ro", argv.index("--chdir") - 2)
    assert argv[seal:seal + 2] == sandbox.ROOT_SEAL
    assert sandbox.add_mounts(argv, bind) == [*argv[:seal], *bind, *argv[seal:]]
    unsealed = argv[:seal] + argv[seal + 2:]
    end = unsealed.index("--")
    assert sandbox.add_mounts(unsealed, bind) == [*unsealed[:end], *bind, *unsealed[end:]]


def test_a_failed_run_that_says_why_has_replied_when_the_api_says_so():
    api = TurnApi(style="runs", port=8642, start="POST /v1/runs", input_field="input", run_id_field="run_id",
                  status="GET /v1/runs/{id}", status_field="status", done=("completed",), failed=("failed", "cancelled"),
                  reply_field="output", failed_reply_field="error")

    def answer(status):
        return lambda m, p, b: (202, b'{"run_id": "r"}') if m == "POST" else (200, json.dumps(status).encode())
    assert deliver(api, answer({"status": "failed", "error": "spend cap"}), "x", timeout=5) == "[run failed] spend cap"
    with pytest.raises(SandboxError, match="ended cancelled"):
        deliver(api, answer({"status": "cancelled"}), "x", timeout=5)
    strict = TurnApi(**{**vars(api), "failed_reply_field": ""})
    with pytest.raises(SandboxError, match="ended failed"):
        deliver(strict, answer({"status": "failed", "error": "spend cap"}), "x", timeout=5)


def test_a_run_held_by_the_agents_own_prompt_is_stopped_and_answers_the_turn():
    """A run in a held state (hermes's own approval prompt) is stopped at once, and the turn's answer says it was
    held and stopped, with what the status said; the turn does not wait out the agent's own timeout."""
    api = TurnApi(**{**vars(agents.REFERENCE.turn), "held": ("waiting_for_approval",),
                     "stop": "POST /v1/runs/{id}/stop"})
    request, seen = runs_agent(["running", "waiting_for_approval"], [])
    status = {"status": "waiting_for_approval", "last_event": "approval.request"}

    def held(method, path, body):
        if (method, path) == ("GET", "/v1/runs/run_1") and len([s for s in seen if s[1] == path]) >= 1:
            seen.append((method, path, None))
            return 200, json.dumps(status).encode()
        if (method, path) == ("POST", "/v1/runs/run_1/stop"):
            seen.append((method, path, json.loads(body)))
            return 200, b'{"status": "stopping"}'
        return request(method, path, body)
    reply = deliver(api, held, "x", timeout=60)
    assert reply.startswith("[run held: waiting_for_approval] stopped by the platform (stop answered 200)")
    assert "approval.request" in reply
    assert ("POST", "/v1/runs/run_1/stop", {}) in seen and seen[-1][1] == "/v1/runs/run_1/stop"


@pytest.mark.parametrize("fields, match", [
    ({"held": ("waiting_for_approval",)}, "needs stop"),
    ({"held": ("completed",), "stop": "POST /v1/runs/{id}/stop"}, "also done or failed"),
    ({"stop": "GET /v1/runs/{id}/stop"}, "must be a POST"),
])
def test_held_states_need_a_stop_route_of_their_own(fields, match):
    with pytest.raises(ConfigError, match=match):
        TurnApi(**{**vars(agents.REFERENCE.turn), **fields})
