"""A second, tiny agent for the suite's profile test: not the reference agent's code, API or tool names.

Served inside the sandbox on 127.0.0.1:8700: ``POST /chat {"text"}`` answers ``{"answer"}``. It keeps its
own files on /data (mem.txt, log.jsonl, todo.txt, box/notes.txt), calls the model through the broker
(``TINY_MODEL_URL``) with tool names of its own and no ``metadata.purpose``, and runs the product's tools
through the broker's MCP endpoint under their product names. Standard library only.
"""
import json
import os
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer

URL = os.environ.get("TINY_MODEL_URL", "")
OWN = {"save_note": "notes_create", "list_notes": "notes_list", "read_note": "notes_get"}  # mine -> product's
WRITES = {"memo:": "/data/mem.txt", "todo:": "/data/todo.txt", "keep:": "/data/box/notes.txt"}


def post(path, body):
    request = urllib.request.Request(URL + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def tools():
    listed = post("/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).get("result", {}).get("tools", [])
    mine = {v: k for k, v in OWN.items()}
    return {mine.get(t["name"], "do_" + t["name"]): t for t in listed}


def chat(text):
    with open("/data/log.jsonl", "a") as f:
        f.write(json.dumps({"said": text}) + "\n")
    for prefix, path in WRITES.items():
        if text.startswith(prefix):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "a") as f:
                f.write(text[len(prefix):].strip() + "\n")
    offered = tools()
    fns = [{"type": "function", "function": {"name": n, "description": t.get("description", ""),
                                             "parameters": t.get("inputSchema", {})}} for n, t in offered.items()]
    fns.append({"type": "function", "function": {"name": "jot", "parameters": {"type": "object"}}})
    messages = [{"role": "user", "content": text}]
    for _ in range(4):
        try:
            message = post("/v1/chat/completions", {"model": "tiny", "messages": messages, "tools": fns})["choices"][0]["message"]
        except OSError as exc:  # the model path refused (its status is the platform's business, not the user's)
            return f"(no model: {getattr(exc, 'code', exc)})"
        if not message.get("tool_calls"):
            return message.get("content") or ""
        messages.append(message)
        for call in message["tool_calls"]:
            name, args = call["function"]["name"], json.loads(call["function"]["arguments"] or "{}")
            if name == "jot":
                with open("/data/mem.txt", "a") as f:
                    f.write(str(args.get("text", "")) + "\n")
                result = {"ok": True}
            elif name in offered:
                result = post("/mcp", {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                       "params": {"name": offered[name]["name"], "arguments": args}})
            else:
                result = {"error": "no such tool"}
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)})
    return "(too many tool calls)"


class Chat(BaseHTTPRequestHandler):
    def do_GET(self):  # readiness: it answers once it serves
        self.send_response(200 if self.path == "/ready" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        if self.path != "/chat":
            self.send_error(404)
            return
        text = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}").get("text", "")
        body = json.dumps({"answer": chat(str(text))}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class Server(HTTPServer):
    def server_bind(self):  # no reverse lookup of its own address (getfqdn): no egress for nothing
        import socketserver
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = "127.0.0.1", 8700


if __name__ == "__main__":
    Server(("127.0.0.1", 8700), Chat).serve_forever()
