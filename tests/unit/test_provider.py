"""The provider mock, driven over real HTTP on a real socket the way a platform and the harness drive it.

Token counts below are worked by hand from the rule (four characters a token, at least one), not
recomputed with the module's helpers, so a change to the rule shows here.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from acceptance.errors import ScriptError
from acceptance.harness.lab.provider import ProviderMock

KEY = "sk-test-0123456789"
HI = [{"role": "user", "content": "hi"}]  # json.dumps(HI, sort_keys=True) gives 20 tokens
# Requests to 127.0.0.1 must not wander through a proxy named in the environment.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http(method: str, url: str, body: Any = None, headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    data = body if isinstance(body, bytes) else None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with OPENER.open(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        with e:
            return e.code, json.loads(e.read())


def openai(mock: ProviderMock, *, key: str | None = KEY, user: str | None = None, messages: list | None = None,
           **extra: Any) -> tuple[int, dict[str, Any]]:
    body = {"model": "gpt-test", "messages": HI if messages is None else messages, **extra}
    if user is not None:
        body["user"] = user
    headers = {} if key is None else {"Authorization": f"Bearer {key}"}
    return http("POST", mock.url + "/v1/chat/completions", body, headers)


def anthropic(mock: ProviderMock, *, key: str | None = KEY, user: str | None = None, version: str | None = "2023-06-01",
              messages: list | None = None, metadata: dict | None = None, **extra: Any) -> tuple[int, dict[str, Any]]:
    body = {"model": "claude-test", "max_tokens": 64, "messages": HI if messages is None else messages, **extra}
    metadata = dict(metadata or {})
    if user is not None:
        metadata["user_id"] = user
    if metadata:
        body["metadata"] = metadata
    headers = {} if key is None else {"x-api-key": key}
    if version is not None:
        headers["anthropic-version"] = version
    return http("POST", mock.url + "/v1/messages", body, headers)


def text_of(style: str, response: dict[str, Any]) -> str:
    if style == "openai":
        return response["choices"][0]["message"]["content"]
    return response["content"][0]["text"]


SEND = {"openai": openai, "anthropic": anthropic}


@pytest.fixture
def mock():
    with ProviderMock(KEY) as m:
        yield m


# -- response shapes -----------------------------------------------------------------------------------


def test_openai_reply_has_the_chat_completion_shape(mock):
    mock.script("alice", [{"reply": "hello there"}])
    status, response = openai(mock, user="alice")
    assert 200 == status
    assert {
        "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-test",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello there"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 2, "total_tokens": 22},
    } == response


def test_openai_tool_step_answers_a_function_tool_call(mock):
    mock.script("alice", [{"tool": "search", "arguments": {"q": "x"}}])
    status, response = openai(mock, user="alice")
    assert 200 == status
    assert {
        "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-test",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None,
            "tool_calls": [{"id": "call_1", "type": "function",
                            "function": {"name": "search", "arguments": '{"q": "x"}'}}]}}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 24, "total_tokens": 44},
    } == response


def test_anthropic_reply_has_the_message_shape(mock):
    mock.script("alice", [{"reply": "hello there"}])
    status, response = anthropic(mock, user="alice")
    assert 200 == status
    assert {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
        "content": [{"type": "text", "text": "hello there"}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 20, "output_tokens": 2},
    } == response


def test_anthropic_tool_step_answers_a_tool_use_block(mock):
    mock.script("alice", [{"tool": "search", "arguments": {"q": "x"}}])
    status, response = anthropic(mock, user="alice")
    assert 200 == status
    assert {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "search", "input": {"q": "x"}}],
        "stop_reason": "tool_use", "usage": {"input_tokens": 20, "output_tokens": 24},
    } == response


# -- scripts -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("style", ["openai", "anthropic"])
def test_each_user_consumes_their_own_queue_in_order(mock, style):
    """Queues are per end user: bob's requests neither take nor reorder alice's steps."""
    send = SEND[style]
    mock.script("alice", [{"reply": "a1"}, {"reply": "a2"}])
    mock.script("bob", [{"reply": "b1"}])
    mock.script("alice", [{"reply": "a3"}])  # appended after a2, not replacing the queue
    got = [(u, text_of(style, send(mock, user=u)[1])) for u in ("alice", "bob", "alice", "bob", "alice", "alice")]
    assert [("alice", "a1"), ("bob", "b1"), ("alice", "a2"), ("bob", "ok"), ("alice", "a3"), ("alice", "ok")] == got
    assert [{"reply": "a1"}, {"reply": "b1"}, {"reply": "a2"}, None, {"reply": "a3"}, None] == [
        r["step"] for r in mock.records()]


@pytest.mark.parametrize("style", ["openai", "anthropic"])
def test_with_nothing_queued_the_reply_is_ok(mock, style):
    mock.script("alice", [{"reply": "not for you"}])
    status, response = SEND[style](mock)  # no end-user id: the user is ""
    assert (200, "ok") == (status, text_of(style, response))
    assert [("", None, {"input": 20, "output": 1})] == [(r["user"], r["step"], r["usage"]) for r in mock.records()]


def test_script_checks_every_step_before_queueing_any(mock):
    with pytest.raises(ScriptError, match=r"steps\[1\]\.arguments must be an object"):
        mock.script("alice", [{"reply": "first"}, {"tool": "search", "arguments": ["x"]}])
    assert "ok" == text_of("openai", openai(mock, user="alice")[1])


@pytest.mark.parametrize("steps, field", [
    ("reply", "steps must be a list"),
    (["reply"], r"steps\[0\] must be an object"),
    ([{"reply": 3}], r"steps\[0\]\.reply must be a string"),
    ([{"reply": "x", "tool": "t"}], r"steps\[0\] mixes 'reply'"),
    ([{"tool": ""}], r"steps\[0\]\.tool must be a non-empty string"),
    ([{"tool": "t", "arguments": {"f": object()}}], r"steps\[0\]\.arguments must be JSON-serializable"),
    ([{"tool": "t", "args": {}}], r"steps\[0\] has unknown fields \['args'\]"),
    ([{}], r"steps\[0\] has neither 'reply' nor 'tool'"),
])
def test_a_bad_step_is_refused_naming_the_field(mock, steps, field):
    with pytest.raises(ScriptError, match=field):
        mock.script("alice", steps)


def test_a_queued_step_is_a_copy_of_what_the_caller_passed(mock):
    arguments = {"q": "x"}
    mock.script("alice", [{"tool": "search", "arguments": arguments}])
    arguments["q"] = "changed after scripting"
    assert {"q": "x"} == anthropic(mock, user="alice")[1]["content"][0]["input"]


# -- refusals ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("style, headers", [
    ("openai", {}),
    ("openai", {"Authorization": "Bearer sk-wrong"}),
    ("openai", {"Authorization": KEY}),  # the key without its scheme
    ("openai", {"Authorization": f"Bearer {KEY}x"}),
    ("openai", {"x-api-key": KEY}),  # the other style's header does not count
    ("anthropic", {"anthropic-version": "2023-06-01"}),
    ("anthropic", {"anthropic-version": "2023-06-01", "x-api-key": "sk-wrong"}),
    ("anthropic", {"anthropic-version": "2023-06-01", "Authorization": f"Bearer {KEY}"}),
])
def test_a_missing_or_wrong_key_is_refused_recorded_and_consumes_no_step(mock, style, headers):
    mock.script("alice", [{"reply": "kept for the authenticated request"}])
    path = "/v1/chat/completions" if style == "openai" else "/v1/messages"
    body = {"model": "m", "max_tokens": 8, "messages": HI, "user": "alice", "metadata": {"user_id": "alice"}}
    status, response = http("POST", mock.url + path, body, headers)
    assert 401 == status
    if style == "openai":
        assert "invalid_api_key" == response["error"]["type"]
    else:
        assert ("error", "authentication_error") == (response["type"], response["error"]["type"])
    [record] = mock.records()
    assert (401, None, None, "alice") == (record["status"], record["usage"], record["step"], record["user"])
    # Control: the right key, same request, takes the step the refused one left in place.
    assert "kept for the authenticated request" == text_of(style, SEND[style](mock, user="alice")[1])


def test_a_refusal_never_echoes_the_key_presented(mock):
    status, response = openai(mock, key="sk-a-secret-the-agent-leaked")
    assert 401 == status
    assert "sk-a-secret" not in json.dumps(response)
    assert "sk-a-secret" not in json.dumps(mock.records())
    assert KEY not in json.dumps(mock.records())


def test_anthropic_without_a_version_header_is_refused(mock):
    mock.script("alice", [{"reply": "kept"}])
    status, response = anthropic(mock, user="alice", version=None)
    assert (400, "invalid_request_error") == (status, response["error"]["type"])
    assert "anthropic-version" in response["error"]["message"]
    assert [(400, None, None)] == [(r["status"], r["usage"], r["step"]) for r in mock.records()]
    assert "kept" == text_of("anthropic", anthropic(mock, user="alice")[1])


@pytest.mark.parametrize("style, body, field", [
    ("openai", b"{not json", "not valid JSON"),
    ("openai", b"", "not valid JSON"),
    ("openai", [1, 2], "body must be a JSON object"),
    ("openai", {"messages": HI}, "model"),
    ("openai", {"model": "m"}, "messages"),
    ("openai", {"model": "m", "messages": "hi"}, "messages"),
    ("openai", {"model": "m", "messages": HI, "tools": [{"name": "search"}]}, "tools[0]"),
    ("openai", {"model": "m", "messages": HI, "user": 7}, "user"),
    ("openai", {"model": "m", "messages": HI, "metadata": "turn"}, "metadata"),
    ("openai", {"model": "m", "messages": HI, "stream": "yes"}, "stream"),
    ("openai", {"model": "m", "messages": HI, "stream_options": {"include_usage": True}}, "stream_options"),
    ("openai", {"model": "m", "messages": HI, "stream": True, "stream_options": {"include_usage": 1}}, "stream_options"),
    ("anthropic", {"model": "m", "messages": HI}, "max_tokens"),
    ("anthropic", {"model": "m", "max_tokens": 8, "messages": HI, "tools": [{"description": "d"}]}, "tools[0].name"),
    ("anthropic", {"model": "m", "max_tokens": 8, "messages": HI, "metadata": {"user_id": 3}}, "metadata.user_id"),
])
def test_a_malformed_body_is_refused_naming_the_field_and_recorded(mock, style, body, field):
    path = "/v1/chat/completions" if style == "openai" else "/v1/messages"
    headers = {"Authorization": f"Bearer {KEY}"} if style == "openai" else {"x-api-key": KEY, "anthropic-version": "1"}
    status, response = http("POST", mock.url + path, body, headers)
    assert (400, "invalid_request_error") == (status, response["error"]["type"])
    assert field in response["error"]["message"]
    assert [(400, None, None)] == [(r["status"], r["usage"], r["step"]) for r in mock.records()]


def test_unknown_paths_are_404_and_wrong_methods_405(mock):
    assert 404 == http("POST", mock.url + "/v1/completions", {}, {"Authorization": f"Bearer {KEY}"})[0]
    assert 405 == http("GET", mock.url + "/v1/chat/completions")[0]
    assert 405 == http("GET", mock.url + "/v1/messages")[0]
    assert 405 == http("POST", mock.url + "/_control/records", {})[0]
    assert [] == mock.records()


# -- what is recorded ----------------------------------------------------------------------------------


def test_tools_offered_are_recorded_by_name_in_order(mock):
    openai(mock, tools=[{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
                        for n in ("search", "send_mail")])
    anthropic(mock, tools=[{"name": n, "description": "d", "input_schema": {"type": "object"}}
                           for n in ("calendar", "search")])
    openai(mock)
    assert [["search", "send_mail"], ["calendar", "search"], []] == [r["tools"] for r in mock.records()]


def test_purpose_and_the_request_are_recorded(mock):
    openai(mock, user="alice", metadata={"purpose": "title"})
    anthropic(mock, user="bob", metadata={"purpose": "memory_review"}, messages=HI * 3)
    openai(mock)
    assert [
        {"seq": 1, "style": "openai", "path": "/v1/chat/completions", "model": "gpt-test", "user": "alice",
         "purpose": "title", "tools": [], "messages": 1, "system": "", "stream": False, "status": 200, "request_id": "",
         "usage": {"input": 20, "output": 1}, "step": None},
        {"seq": 2, "style": "anthropic", "path": "/v1/messages", "model": "claude-test", "user": "bob",
         "purpose": "memory_review", "tools": [], "messages": 3, "system": "", "stream": False, "status": 200, "request_id": "",
         "usage": {"input": 58, "output": 1}, "step": None},
        {"seq": 3, "style": "openai", "path": "/v1/chat/completions", "model": "gpt-test", "user": "",
         "purpose": "", "tools": [], "messages": 1, "system": "", "stream": False, "status": 200, "request_id": "",
         "usage": {"input": 20, "output": 1}, "step": None},
    ] == [{k: v for k, v in r.items() if k not in ("body", "at")} for r in mock.records()]
    # When each arrived, by the harness's clock, in the order they arrived (NT-5 reads an instance's last call).
    times = [r["at"] for r in mock.records()]
    assert times == sorted(times) and abs(times[-1] - time.time()) < 60
    # The whole request as it arrived is kept too (WD-1 scans it): the provider's view, not the caller's echo.
    bodies = [r["body"] for r in mock.records()]
    assert [b["messages"] for b in bodies] == [HI, HI * 3, HI]
    assert bodies[0]["metadata"] == {"purpose": "title"}


def test_the_request_id_a_call_came_with_is_recorded(mock):
    """The provider's own record names the request each call served (the platform sends the id on)."""
    body = {"model": "gpt-test", "messages": HI}
    http("POST", mock.url + "/v1/chat/completions", body, {"Authorization": f"Bearer {KEY}", "X-Request-Id": "pp-1"})
    http("POST", mock.url + "/v1/chat/completions", body, {"Authorization": "Bearer wrong", "X-Request-Id": "pp-2"})
    assert [(200, "pp-1"), (401, "pp-2")] == [(r["status"], r["request_id"]) for r in mock.records()]


def test_usage_is_a_function_of_the_request(mock):
    long = [{"role": "user", "content": "x" * 400}]
    first, second, longer = (openai(mock, messages=m)[1]["usage"] for m in (HI, HI, long))
    assert first == second
    assert {"prompt_tokens": 20, "completion_tokens": 1, "total_tokens": 21} == first
    assert {"prompt_tokens": 86, "completion_tokens": 1, "total_tokens": 87} == longer  # control: it does vary


def test_records_are_copies(mock):
    openai(mock)
    mock.records()[0]["status"] = 999
    assert 200 == mock.records()[0]["status"]


def test_the_server_writes_nothing_to_stderr(mock, capfd):
    """The platform's logs must not carry request lines or payloads."""
    openai(mock, user="alice", messages=[{"role": "user", "content": "private words"}])
    openai(mock, key="sk-wrong")
    assert "" == capfd.readouterr().err


# -- control over HTTP ---------------------------------------------------------------------------------


def test_the_harness_scripts_reads_and_resets_over_http(mock):
    assert (200, {"user": "alice", "queued": 2}) == http(
        "POST", mock.url + "/_control/script", {"user": "alice", "steps": [{"reply": "r1"}, {"tool": "t", "arguments": {}}]})
    assert "r1" == text_of("openai", openai(mock, user="alice")[1])
    status, body = http("GET", mock.url + "/_control/records")
    assert (200, [{"reply": "r1"}]) == (status, [r["step"] for r in body["records"]])
    assert mock.records() == body["records"]

    assert (200, {"reset": True}) == http("POST", mock.url + "/_control/reset")
    assert (200, {"records": []}) == http("GET", mock.url + "/_control/records")
    # The reset dropped the queued tool step and restarted the numbering.
    status, response = openai(mock, user="alice")
    assert ("chatcmpl-1", "ok") == (response["id"], text_of("openai", response))


@pytest.mark.parametrize("body, field", [
    (b"{", "not valid JSON"),
    ([], "JSON object"),
    ({"steps": []}, "user is required"),
    ({"user": "alice"}, "steps is required"),
    ({"user": 3, "steps": []}, "user must be a string"),
    ({"user": "alice", "steps": {}}, "steps must be a list"),
    ({"user": "alice", "steps": [{"reply": "ok"}, {"tool": 5}]}, "steps[1].tool"),
    ({"user": "alice", "steps": [], "extra": 1}, "unknown fields ['extra']"),
])
def test_bad_control_input_is_refused_naming_the_field(mock, body, field):
    status, response = http("POST", mock.url + "/_control/script", body)
    assert (400, "invalid_request_error") == (status, response["error"]["type"])
    assert field in response["error"]["message"]
    assert "ok" == text_of("openai", openai(mock, user="alice")[1])  # nothing was queued


# -- concurrency and lifecycle -------------------------------------------------------------------------


def test_concurrent_requests_are_all_recorded_with_unique_seq(mock):
    users = [f"user{i}" for i in range(8)]
    for user in users:
        mock.script(user, [{"reply": f"{user}-{n}"} for n in range(5)])
    start = threading.Barrier(len(users))
    replies: dict[str, list[str]] = {}

    def client(user: str) -> None:
        start.wait()
        style = "openai" if user[-1] in "0246" else "anthropic"
        replies[user] = [text_of(style, SEND[style](mock, user=user)[1]) for _ in range(5)]

    threads = [threading.Thread(target=client, args=(u,)) for u in users]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    records = mock.records()
    assert list(range(1, 41)) == [r["seq"] for r in records]
    assert {u: [f"{u}-{n}" for n in range(5)] for u in users} == replies
    for user in users:  # each user's steps were taken in seq order
        assert [f"{user}-{n}" for n in range(5)] == [r["step"]["reply"] for r in records if r["user"] == user]


def test_stop_frees_the_port_and_is_idempotent():
    first = ProviderMock(KEY).start()
    port = int(first.url.rsplit(":", 1)[1])
    openai(first)
    first.stop()
    first.stop()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    with ProviderMock(KEY, port=port) as second:
        assert f"http://127.0.0.1:{port}" == second.url
        assert 200 == openai(second)[0]


def test_start_twice_and_url_before_start_are_refused():
    mock = ProviderMock(KEY)
    with pytest.raises(ScriptError, match="start"):
        _ = mock.url
    with mock:
        with pytest.raises(ScriptError, match="already serves"):
            mock.start()


def test_an_empty_key_is_refused():
    with pytest.raises(ScriptError, match="key must be a non-empty string"):
        ProviderMock("")


def test_the_system_prompt_is_recorded_in_both_styles(mock):
    """Where a platform puts the settings a user chose (TS-2 reads it): OpenAI's system message, Anthropic's
    top-level system field; nothing when there is none."""
    openai(mock, messages=[{"role": "system", "content": "Personality: calm"}, *HI])
    anthropic(mock, system="Personality: terse")
    openai(mock)
    assert [r["system"] for r in mock.records()] == ["Personality: calm", "Personality: terse", ""]


# -- streaming -------------------------------------------------------------------------------------------


def sse(style: str, mock: ProviderMock, body: dict[str, Any], *, read_first_only: bool = False
        ) -> tuple[int, str, list[Any], float]:
    """POST a streaming request; (status, content type, the events' data in order, seconds to the first)."""
    import http.client
    import time

    path = "/v1/chat/completions" if style == "openai" else "/v1/messages"
    headers = {"Content-Type": "application/json"}
    headers.update({"Authorization": f"Bearer {KEY}"} if style == "openai"
                   else {"x-api-key": KEY, "anthropic-version": "2023-06-01"})
    host, port = mock.url.split("//")[1].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    started = time.monotonic()
    conn.request("POST", path, json.dumps(body).encode(), headers)
    response = conn.getresponse()
    events, first = [], None
    try:
        while True:
            line = response.readline()
            if not line:
                break
            if line.startswith(b"data: "):
                first = first if first is not None else time.monotonic() - started
                data = line[len(b"data: "):].strip()
                events.append("[DONE]" if data == b"[DONE]" else json.loads(data))
                if read_first_only:
                    break
    finally:
        conn.close()
    return response.status, response.headers.get("Content-Type", ""), events, first or 0.0


def _stream_body(style: str, user: str, **extra: Any) -> dict[str, Any]:
    if style == "openai":
        return {"model": "gpt-test", "messages": HI, "user": user, "stream": True, **extra}
    return {"model": "claude-test", "max_tokens": 64, "messages": HI, "metadata": {"user_id": user}, "stream": True,
            **extra}


def test_openai_stream_sends_chunks_then_usage_when_asked_then_done(mock):
    mock.script("alice", [{"reply": "a reply longer than one piece"}])
    status, kind, events, _ = sse("openai", mock, _stream_body("openai", "alice",
                                                               stream_options={"include_usage": True}))
    assert (200, "text/event-stream") == (status, kind)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == "chatcmpl-1" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == "a reply longer than one piece"
    assert sum(1 for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")) > 1  # really in pieces
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]] == ["stop"]
    # the usage chunk: last, no choices; "a reply longer than one piece" is 6 tokens
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == {"prompt_tokens": 20, "completion_tokens": 6,
                                                                   "total_tokens": 26}
    [record] = mock.records()
    assert (record["stream"], record["status"], record["usage"], record["user"]) == (True, 200, {"input": 20, "output": 6},
                                                                                     "alice")


def test_openai_stream_without_include_usage_has_no_usage_chunk_as_openai(mock):
    status, _, events, _ = sse("openai", mock, _stream_body("openai", "bob"))
    assert status == 200 and events[-1] == "[DONE]"
    assert not [c for c in events[:-1] if "usage" in c]
    assert mock.records()[0]["usage"] == {"input": 20, "output": 1}  # the provider's record has it all the same


def test_openai_stream_tool_call_arrives_as_delta_fragments(mock):
    arguments = {"query": "a long enough query to need several fragments"}
    mock.script("alice", [{"tool": "search", "arguments": arguments}])
    tools = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
    _, _, events, _ = sse("openai", mock, _stream_body("openai", "alice", tools=tools, metadata={"purpose": "turn"}))
    deltas = [c["choices"][0]["delta"] for c in events[:-1] if c["choices"]]
    calls = [d["tool_calls"][0] for d in deltas if d.get("tool_calls")]
    assert calls[0] == {"index": 0, "id": "call_1", "type": "function", "function": {"name": "search", "arguments": ""}}
    fragments = [c["function"]["arguments"] for c in calls[1:]]
    assert len(fragments) > 1 and json.loads("".join(fragments)) == arguments
    assert [c["choices"][0]["finish_reason"] for c in events[:-1] if c["choices"]][-1] == "tool_calls"
    [record] = mock.records()
    assert (record["purpose"], record["tools"], record["stream"], record["step"]["tool"]) == ("turn", ["search"], True, "search")


def test_anthropic_stream_has_the_messages_event_sequence_with_usage(mock):
    mock.script("carol", [{"reply": "streamed from the messages api"}])
    status, kind, events, _ = sse("anthropic", mock, _stream_body("anthropic", "carol"))
    assert (200, "text/event-stream") == (status, kind)
    types = [e["type"] for e in events]
    assert types[:2] == ["message_start", "content_block_start"] and types[-3:] == ["content_block_stop",
                                                                                    "message_delta", "message_stop"]
    assert set(types[2:-3]) == {"content_block_delta"} and len(types[2:-3]) > 1
    assert "".join(e["delta"]["text"] for e in events[2:-3]) == "streamed from the messages api"
    assert events[0]["message"]["usage"]["input_tokens"] == 20
    assert events[-2]["usage"] == {"output_tokens": 7} and events[-2]["delta"]["stop_reason"] == "end_turn"
    assert mock.records()[0]["stream"] is True


def test_anthropic_stream_tool_use_arrives_as_input_json_deltas(mock):
    mock.script("carol", [{"tool": "calendar", "arguments": {"day": "a day described at some length"}}])
    _, _, events, _ = sse("anthropic", mock, _stream_body("anthropic", "carol"))
    assert events[1]["content_block"] == {"type": "tool_use", "id": "toolu_1", "name": "calendar", "input": {}}
    partial = [e["delta"]["partial_json"] for e in events if e["type"] == "content_block_delta"]
    assert len(partial) > 1 and json.loads("".join(partial)) == {"day": "a day described at some length"}
    assert events[-2]["delta"]["stop_reason"] == "tool_use"


@pytest.mark.parametrize("style", ["openai", "anthropic"])
def test_a_delayed_stream_sends_its_first_event_before_the_delay(mock, style):
    """A scripted delay holds the rest of the stream, not its start: what relays it can be seen relaying."""
    mock.script("dan", [{"reply": "slow", "delay": 1.0}])
    status, _, events, first = sse(style, mock, _stream_body(style, "dan"), read_first_only=True)
    assert status == 200 and len(events) == 1 and first < 0.8
    assert mock.records()[0]["stream"] is True


@pytest.mark.parametrize("text, tokens", [
    ("", 1), ("ok", 1), ("hello there", 2), ("a1", 2), ("abcdefg", 2), ('{"a": 1}', 7),
    ("ppcanary-9c7ffd8d-a-mem-8ba44616c1def934", 27)])
def test_the_mock_tokenizer_is_not_the_platforms_estimate(text, tokens):
    """The mock bills by its own tokenizer, not by four characters a token (the proxy's estimate): a meter
    that estimates where the provider reported usage must disagree with the bill on ordinary text."""
    from acceptance.harness.lab.provider import _tokens

    assert _tokens(text) == tokens


def test_a_prompt_is_billed_unlike_the_estimate():
    from acceptance.harness.lab.provider import prompt_tokens

    billed = prompt_tokens(HI)
    assert (billed, max(1, -(-len(json.dumps(HI, sort_keys=True)) // 4))) == (20, 9)
