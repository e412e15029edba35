"""The minimal reference agent: the process that lives inside one instance's sandbox.

It keeps the three kinds of private state the seed names, all on the private volume: a conversation
transcript (``/data/transcript.jsonl``), a memory file (``/data/memory.md``) and task state
(``/data/tasks.json``); files it is asked to save go under ``/data/files``. It offers the controller a
small control interface: JSON lines over the unix socket ``/run/agent/agent.sock`` (a folder the
controller mounts in; no other sandbox has it).

This file runs under the sandbox's system Python with the standard library only, and is copied into the
instance image by the controller: it must not import anything from pairproof.

Turns are rule-based for now (the model path arrives with the broker): ``remember: X`` stores X in
memory, ``task: X`` adds a task, ``save NAME: X`` writes a file; every turn is kept in the transcript.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
import time

DATA = os.environ.get("PAIRPROOF_DATA", "/data")
SOCKET = os.environ.get("PAIRPROOF_CONTROL", "/run/agent/agent.sock")
SAFE_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


def _append_line(path: str, record: dict) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _write_atomic(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _tasks() -> list:
    try:
        with open(os.path.join(DATA, "tasks.json"), encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return []


def turn(message: str) -> str:
    _append_line(os.path.join(DATA, "transcript.jsonl"), {"role": "user", "content": message, "at": time.time()})
    if message.startswith("remember:"):
        with open(os.path.join(DATA, "memory.md"), "a", encoding="utf-8") as f:
            f.write("- " + message[len("remember:"):].strip() + "\n")
        reply = "I will remember that."
    elif message.startswith("task:"):
        tasks = _tasks()
        tasks.append({"id": len(tasks) + 1, "title": message[len("task:"):].strip(), "state": "open"})
        _write_atomic(os.path.join(DATA, "tasks.json"), json.dumps(tasks))
        reply = f"Task {len(tasks)} created."
    elif message.startswith("save "):
        name, _, content = message[len("save "):].partition(":")
        name = name.strip()
        if not SAFE_NAME.match(name):
            reply = f"I cannot save a file named {name!r}."
        else:
            os.makedirs(os.path.join(DATA, "files"), mode=0o700, exist_ok=True)
            _write_atomic(os.path.join(DATA, "files", name), content.strip())
            reply = f"Saved {name}."
    else:
        reply = "Noted."
    _append_line(os.path.join(DATA, "transcript.jsonl"), {"role": "assistant", "content": reply, "at": time.time()})
    return reply


def read(what: str) -> str:
    paths = {"memory": "memory.md", "transcript": "transcript.jsonl", "tasks": "tasks.json"}
    if what.startswith("file:"):
        name = what[len("file:"):]
        if not SAFE_NAME.match(name):
            raise ValueError(f"bad file name {name!r}")
        path = os.path.join(DATA, "files", name)
    elif what in paths:
        path = os.path.join(DATA, paths[what])
    else:
        raise ValueError(f"unknown state {what!r}: expected memory, transcript, tasks or file:NAME")
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def handle(request: dict) -> dict:
    op = request.get("op")
    if op == "ping":
        return {"ok": True, "pid": os.getpid(), "uid": os.getuid(), "instance": os.environ.get("PAIRPROOF_INSTANCE", "")}
    if op == "turn":
        return {"ok": True, "reply": turn(str(request["message"]))}
    if op == "read":
        return {"ok": True, "content": read(str(request["what"]))}
    return {"ok": False, "error": f"unknown op {op!r}"}


def serve() -> None:
    os.makedirs(DATA, exist_ok=True)
    try:
        os.unlink(SOCKET)
    except FileNotFoundError:
        pass
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(SOCKET + ".new")
    server.listen(16)
    os.chmod(SOCKET + ".new", 0o600)
    os.replace(SOCKET + ".new", SOCKET)  # appears only once it listens: readiness is "socket exists"
    while True:
        conn, _ = server.accept()
        with conn, conn.makefile("rwb") as stream:
            line = stream.readline()
            try:
                response = handle(json.loads(line))
            except Exception as exc:  # one bad request must not take the agent down
                response = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            stream.write(json.dumps(response).encode() + b"\n")
            stream.flush()


if __name__ == "__main__":
    sys.exit(serve())
