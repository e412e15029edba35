"""What a command run in a container prints is bounded (issue 28 item 10): ``containers._pump`` reads the
engine's multiplexed stream into the platform's memory; past ``EXEC_OUTPUT_MAX`` the command is killed and the
call says so, instead of holding whatever the container sends."""

from __future__ import annotations

import socket
import threading

import pytest

from runtime.isolation import containers
from runtime.isolation.sandbox import SandboxError


def _frame(kind: int, payload: bytes) -> bytes:
    return bytes([kind, 0, 0, 0]) + len(payload).to_bytes(4, "big") + payload


def _serve(sock: socket.socket, frames: list[bytes]) -> threading.Thread:
    def send() -> None:
        try:
            for frame in frames:
                sock.sendall(frame)
        except OSError:
            pass  # the reader stopped reading
        finally:
            sock.close()

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    return sender


def test_stdout_and_stderr_are_taken_apart():
    ours, theirs = socket.socketpair()
    sender = _serve(theirs, [_frame(1, b"out "), _frame(2, b"err"), _frame(1, b"more")])
    try:
        assert containers._pump(ours, None, 10, lambda: None, "t") == (b"out more", b"err")
    finally:
        ours.close()
        sender.join(10)


def test_output_past_the_limit_kills_the_command(monkeypatch):
    monkeypatch.setattr(containers, "EXEC_OUTPUT_MAX", 1 << 20)
    ours, theirs = socket.socketpair()
    sender = _serve(theirs, [_frame(1, b"x" * (1 << 16))] * 64)  # 4 MiB
    killed = []
    try:
        with pytest.raises(SandboxError, match="printed more than 1048576 bytes and was killed"):
            containers._pump(ours, None, 10, lambda: killed.append(True), "a flood")
    finally:
        ours.close()
        sender.join(10)
    assert killed == [True]
