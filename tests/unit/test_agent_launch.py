"""The runtime's agent launch spec and turn delivery (``runtime/agents.py``), against a fake agent API."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime import agents
from runtime.agents import AgentLaunch, Readiness, TurnApi, deliver
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
    assert agents.REFERENCE.files == (Path(agents.__file__).with_name("agent.py"),)
    assert agents.REFERENCE.command[-1] == "/opt/pairproof/agent.py"
