"""The single helpers of issue 25 behave as their call sites relied on: a wait's two endings, an HTTP error
status as an answer, a forwarded path byte for byte, server-sent events split as the old parsers split them."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from acceptance.errors import HarnessTimeout, TargetError, UnexpectedRedirect
from acceptance.harness import http as harness_http
from acceptance.harness import wait
from runtime import httpjson
from runtime import wait as runtime_wait
from runtime.errors import DeadlineExceeded, RuntimeFault, UnsafeTarget


def test_until_returns_the_first_truthy_value():
    values = iter([0, None, "found"])
    assert wait.until(lambda: next(values), "a value", deadline=1, every=0) == "found"
    values = iter([0, [], 7])
    assert runtime_wait.until(lambda: next(values), 1, "a value", every=0) == 7


def test_a_wait_that_runs_out_raises_each_sides_one_error_with_what_was_seen():
    seen = []
    with pytest.raises(HarnessTimeout, match=r"the thing \(seen 1\) did not happen within 0s"):
        wait.until(lambda: seen.append(1), lambda: f"the thing (seen {len(seen)})", deadline=0, every=0)
    with pytest.raises(DeadlineExceeded, match="^gone: 1$") as caught:
        runtime_wait.until(lambda: seen.append(1), 0, lambda: f"gone: {len(seen) - 1}", every=0)
    assert isinstance(caught.value, RuntimeFault)


def test_settle_returns_the_last_observation_either_way():
    values = iter(range(100))
    assert wait.settle(lambda: next(values), lambda v: v == 2, deadline=5, step=0) == 2
    assert wait.settle(lambda: "never", lambda v: False, deadline=0, step=0) == "never"


def test_an_exception_of_the_predicate_ends_the_wait_as_it_is():
    def died():
        raise ValueError("the process ended")
    with pytest.raises(ValueError):
        wait.until(died, "never", deadline=5)
    with pytest.raises(ValueError):
        runtime_wait.until(died, 5, "never")


class _Echo(http.server.BaseHTTPRequestHandler):
    """Answers 404 with the request line's target as a JSON body (and a text/event-stream on /sse)."""

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        if self.path.startswith("/moved"):
            self.send_response(int(self.path.rsplit("/", 1)[1]))
            self.send_header("Location", "/elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path == "/sse":
            body = b": hi\n\ndata: a\ndata: b\n\nevent: x\n\ndata: c"
            kind = "text/event-stream"
            self.send_response(200)
        else:
            body = b'{"target": "%s"}' % self.path.encode()
            kind = "application/json"
            self.send_response(404)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args):  # noqa: A002
        pass


@contextmanager
def _server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_an_error_status_is_an_answer_and_the_path_goes_on_as_given():
    with _server() as base:
        assert httpjson.request("GET", base + "/v1/runs/a%2Fb?x=1", timeout=5) == (404, b'{"target": "/v1/runs/a%2Fb?x=1"}')
        answer = harness_http.request("GET", base + "/r?q=%20", timeout=5)
        assert (answer.status, answer.json(), answer.content_type) == (404, {"target": "/r?q=%20"}, "application/json")


def test_a_refused_connection_is_an_oserror_for_the_caller_to_map():
    with _server() as base:
        pass
    with pytest.raises(OSError):
        httpjson.request("GET", base + "/", timeout=5)
    with pytest.raises(OSError):
        harness_http.request("GET", base + "/", timeout=5)


def test_server_sent_events_are_split_alike_on_both_sides():
    with _server() as base:
        conn = httpjson.connect(base + "/sse", 5)
        try:
            events = list(httpjson.sse_events(httpjson.send(conn, "GET", base + "/sse", None, {})))
        finally:
            conn.close()
        conn, response = harness_http.open_stream("GET", base + "/sse", timeout=5)
        try:
            data = list(harness_http.sse_data(harness_http.lines_of(response)))
        finally:
            conn.close()
    assert events == [b": hi\n\n", b"data: a\ndata: b\n\n", b"event: x\n\n", b"data: c"]
    assert [list(httpjson.sse_data(e)) for e in events] == [[], [b"a", b"b"], [], [b"c"]]
    assert data == ["a\nb", "c"]  # events without data skipped, the unterminated last one kept
    assert list(harness_http.sse_events([": c", "event: x", "data:  y ", "", "", "id"])) == \
        [[("event", "x"), ("data", "y")], [("id", "")]]


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_redirect_is_neither_followed_nor_an_answer_a_case_could_judge(code):
    """A held call answered "303, see elsewhere" must not read as refused to ``status != 200``: the harness's
    client raises its own error (the test is broken), never a TargetError a refusal could take for a refusal."""
    with _server() as base:
        for call in (harness_http.request, harness_http.open_stream):
            with pytest.raises(UnexpectedRedirect, match=f"answered {code}") as raised:
                call("GET", f"{base}/moved/{code}", timeout=5)
            assert not isinstance(raised.value, TargetError)


# A path joined to a base the platform holds must not change the host it goes to. Four members of the class:
# a userinfo ("base@host"), and paths that do not start with "/" (a port's digits, a second port, a query).
@pytest.mark.parametrize("path", ["@127.0.0.2:9/v1/messages", "0/v1/messages", ":9/x", "?to=elsewhere"])
def test_a_joined_path_that_could_change_the_host_is_refused_before_any_connection(path):
    with _server() as base:
        with pytest.raises((UnsafeTarget, ValueError)) as raised:
            httpjson.request("POST", base + path, b"{}", timeout=5)
        if isinstance(raised.value, UnsafeTarget):  # refused as unreachable: every caller fails it closed
            assert isinstance(raised.value, OSError) and isinstance(raised.value, RuntimeFault)
        with pytest.raises((UnsafeTarget, ValueError)):
            httpjson.connect(base + path, 5)


def test_a_path_that_starts_with_a_slash_goes_to_the_bases_host():
    with _server() as base:
        assert httpjson.request("GET", base + "//elsewhere/x", timeout=5)[0] == 404
