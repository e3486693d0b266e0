#!/usr/bin/env python3
"""A scripted stand-in for the Gemini API, as Gemini CLI consumes it.

Run Gemini CLI with ``GEMINI_API_KEY`` set and ``GOOGLE_GEMINI_BASE_URL`` at
``http://127.0.0.1:<port>``; it answers

* ``POST /v1beta/models/{model}:streamGenerateContent?alt=sse`` (server-sent
  events, one ``GenerateContentResponse`` per ``data:`` line),
* ``POST /v1beta/models/{model}:generateContent`` (one JSON response),
* ``POST /v1beta/models/{model}:countTokens``.

Usage::

    python3 model_gemini.py --script script.json --log requests.jsonl --port-file port.txt

The script is shared with the other CLIs' stand-ins::

    {"turns": [{"tool": {"name": "shell", "input": {"command": ["bash", "-lc", "rm -rf x"]}}},
               {"text": "done"}]}

A main-loop request (one that offers tools) takes the next turn: a function
call or a final text.  Side requests (next-speaker checks, model routing, loop
detection, titles...) take no turn: one that asks for JSON
(``generationConfig.responseJsonSchema``/``responseSchema``) gets the smallest
object its schema allows (``next_speaker`` is ``"user"``), the rest a short
text.  When the turns run out the answer is "done".  The script's ``shell`` tool
becomes Gemini CLI's ``run_shell_command`` (``command`` as a string, a
``workdir`` as ``dir_path``) unless the request offers a tool by that name.

Every request body is appended to the log as one JSON line, so a test can read
what the model was sent, e.g. the function response a hook's deny reason became.
Python 3.11 standard library only.
"""

import json
import sys
from http.server import BaseHTTPRequestHandler

from scripted import serve, shell_text

SIDE_ANSWER = "ok"


def offered_tools(body):
    return {decl.get("name") for tool in body.get("tools") or []
            for decl in tool.get("functionDeclarations") or tool.get("function_declarations") or []}


def function_part(tool, offered):
    """The functionCall part for a scripted tool call, fitted to the tools offered."""
    name, args = tool["name"], dict(tool.get("input", {}))
    if name == "shell" and name not in offered:
        workdir = args.pop("workdir", None)
        name, args = "run_shell_command", {"command": shell_text(args.pop("command", [])), **args}
        if workdir:
            args["dir_path"] = workdir
    return {"functionCall": {"name": name, "args": args}}


def smallest(schema, key=""):
    """The smallest value a JSON schema allows (enough for Gemini CLI's side checks)."""
    if key == "next_speaker":
        return "user"
    kind = schema.get("type", "object")
    kind = (kind[0] if isinstance(kind, list) else kind).lower()
    if schema.get("enum"):
        return schema["enum"][0]
    if kind == "object":
        props = schema.get("properties") or {}
        return {k: smallest(props.get(k, {}), k) for k in schema.get("required") or props}
    if kind in ("integer", "number"):
        return schema.get("minimum", 1)
    return {"array": [], "string": SIDE_ANSWER, "boolean": False,
            "null": None}.get(kind, SIDE_ANSWER)


def response(parts):
    return {"candidates": [{"content": {"role": "model", "parts": parts},
                            "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5,
                              "totalTokenCount": 15},
            "modelVersion": "scripted"}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    script = None  # set by main()

    def log_message(self, fmt, *args):
        sys.stderr.write("model_gemini: " + (fmt % args) + "\n")

    def send_body(self, status, data, content_type):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_json(self, status, obj):
        self.send_body(status, json.dumps(obj).encode(), "application/json")

    def do_GET(self):
        self.send_json(404, {"error": {"code": 404, "message": f"no route {self.path}"}})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"raw": raw.decode("utf-8", "replace")}
        self.script.log(body)
        path = self.path.split("?")[0]
        method = path.rsplit(":", 1)[-1]
        if method == "countTokens":
            self.send_json(200, {"totalTokens": 10})
            return
        if method not in ("generateContent", "streamGenerateContent"):
            self.send_json(404, {"error": {"code": 404, "message": f"no route {self.path}"}})
            return
        offered = offered_tools(body)
        config = body.get("generationConfig") or {}
        schema = config.get("responseJsonSchema") or config.get("responseSchema")
        if offered:
            _, turn = self.script.take_turn()
            if "tool" in turn:
                parts = [function_part(turn["tool"], offered)]
            else:
                parts = [{"text": turn.get("text", "done")}]
        elif schema or config.get("responseMimeType") == "application/json":
            parts = [{"text": json.dumps(smallest(schema or {}))}]
        else:
            parts = [{"text": SIDE_ANSWER}]
        reply = response(parts)
        if method == "generateContent":
            self.send_json(200, reply)
        else:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(f"data: {json.dumps(reply)}\r\n\r\n".encode())
            self.wfile.flush()
            self.close_connection = True


def main():
    serve(Handler, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
