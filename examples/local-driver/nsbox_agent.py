"""nsbox's agent: a resident process in each sandbox, serving turns on 127.0.0.1:8700 inside the sandbox's
own network namespace (nothing outside it can reach that address).

    POST /turn  {"input": "..."}  ->  {"reply": "..."}
    GET  /state/<location>        ->  {"content": "..."}   (memory, transcript, task, volume)

It keeps its state in its volume, /data, at the paths nsbox-agent.toml names. Standard library only; it
runs as ``python3 -I -S``.
"""

import json
import os
from http.server import BaseHTTPRequestHandler, HTTPServer

STATE = {"memory": "/data/memory.md", "transcript": "/data/transcript.jsonl", "task": "/data/tasks.json",
         "volume": "/data/files/notes.txt"}
PORT = 8700


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def append(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a") as f:
        f.write(text)


def turn(message):
    append(STATE["transcript"], json.dumps({"role": "user", "content": message}) + "\n")
    if message.startswith("remember: "):
        append(STATE["memory"], "- " + message[len("remember: "):] + "\n")
        reply = "I will remember that."
    elif message.startswith("task: "):
        tasks = json.loads(read(STATE["task"]) or "[]")
        tasks.append({"title": message[len("task: "):], "done": False})
        os.makedirs(os.path.dirname(STATE["task"]), exist_ok=True)
        with open(STATE["task"], "w") as f:
            json.dump(tasks, f)
        reply = "Task added."
    elif message.startswith("save notes.txt: "):
        os.makedirs(os.path.dirname(STATE["volume"]), exist_ok=True)
        with open(STATE["volume"], "w") as f:
            f.write(message[len("save notes.txt: "):] + "\n")
        reply = "Saved notes.txt."
    else:
        reply = "ok"
    append(STATE["transcript"], json.dumps({"role": "assistant", "content": reply}) + "\n")
    return reply


class Handler(BaseHTTPRequestHandler):
    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        if self.path != "/turn":
            return self.answer(404, {"error": "no such route"})
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            message = body["input"]
        except (ValueError, KeyError, TypeError):
            return self.answer(400, {"error": "expected {\"input\": text}"})
        self.answer(200, {"reply": turn(str(message))})

    def do_GET(self):
        location = self.path.removeprefix("/state/")
        if location not in STATE:
            return self.answer(404, {"error": "no such location"})
        self.answer(200, {"content": read(STATE[location])})

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    HTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
