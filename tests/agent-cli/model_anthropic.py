#!/usr/bin/env python3
"""A scripted model that speaks the Anthropic Messages API, for driving real agent CLIs offline.

Usage:
    python3 model_anthropic.py --script script.json --log requests.jsonl --port-file port.txt

It listens on 127.0.0.1 (port 0 unless --port is given) and writes the chosen port to
--port-file once it accepts connections.

Script:
    {"turns": [{"tool": {"name": "Bash", "input": {"command": "rm -rf x"}}},
               {"text": "done"}]}

A turn is {"tool": {...}} (one tool_use block), {"tools": [{...}, ...]} (several, i.e. parallel
calls) or {"text": "..."} (a final answer). Optional "text" beside "tool"/"tools" is sent first.

POST /v1/messages (any prefix before /v1/messages is accepted): a request that offers tools is
the agent's main loop and gets the next turn; any other request (title generation, summaries,
quota checks, ...) gets a short text answer and consumes no turn. When the turns run out the
answer is the text "done". "stream": true gets server-sent events, otherwise one JSON message.

POST .../count_tokens answers a rough count; GET .../models lists the requested model names seen
so far (or "scripted-model"); anything else is a 404 in Anthropic's error shape.

Log: one JSON line per request: {"method", "path", "kind": "main"|"side"|"other", "turn": the
turn index served or null, "body": the request body as parsed JSON}. A test reads the
tool_result blocks of the "main" requests to see what the model was told (e.g. a hook's reason).

Standard library only.
"""

import itertools
import json
import sys
from http.server import BaseHTTPRequestHandler

from scripted import Script, serve


class Model(Script):
    """The script, the log, the ids handed out and the model names asked for."""

    def __init__(self, path, log_path):
        super().__init__(path, log_path)
        self.ids = itertools.count(1)
        self.models = []

    def fresh_id(self, prefix):
        with self.lock:
            return f"{prefix}_{next(self.ids):06d}"


def is_main_loop(body):
    """The agent's main loop offers tools; side requests (titles, summaries) do not."""
    return bool(body.get("tools"))


def content_blocks(model, turn):
    """The assistant content blocks for one turn, and the stop reason."""
    blocks = []
    if turn.get("text"):
        blocks.append({"type": "text", "text": turn["text"]})
    calls = turn.get("tools") or ([turn["tool"]] if "tool" in turn else [])
    for call in calls:
        blocks.append(
            {
                "type": "tool_use",
                "id": model.fresh_id("toolu"),
                "name": call["name"],
                "input": call.get("input", {}),
            }
        )
    if not blocks:
        blocks.append({"type": "text", "text": "done"})
    return blocks, ("tool_use" if calls else "end_turn")


def message(model, name, blocks, stop_reason):
    return {
        "id": model.fresh_id("msg"),
        "type": "message",
        "role": "assistant",
        "model": name,
        "content": blocks,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": 10,
            "output_tokens": 10,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def sse(msg):
    """The message as the event stream the Messages API sends when streaming."""

    def event(kind, data):
        return f"event: {kind}\ndata: {json.dumps(data)}\n\n"

    start = dict(msg, content=[], stop_reason=None)
    start["usage"] = dict(msg["usage"], output_tokens=1)
    out = [event("message_start", {"type": "message_start", "message": start})]
    for i, block in enumerate(msg["content"]):
        if block["type"] == "text":
            first, delta = dict(block, text=""), {"type": "text_delta", "text": block["text"]}
        else:
            first = dict(block, input={})
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        out.append(event("content_block_start", {"type": "content_block_start", "index": i, "content_block": first}))
        out.append(event("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}))
        out.append(event("content_block_stop", {"type": "content_block_stop", "index": i}))
    out.append(
        event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": msg["usage"]["output_tokens"]},
            },
        )
    )
    out.append(event("message_stop", {"type": "message_stop"}))
    return "".join(out)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    model = None  # set by main

    def log_message(self, fmt, *args):  # quiet
        pass

    def reply(self, status, body, content_type="application/json"):
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("request-id", self.model.fresh_id("req"))
        self.end_headers()
        self.wfile.write(data)

    def read_body(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw) if raw else {}
        except ValueError:
            return {"_raw": raw.decode("utf-8", "replace")}

    def not_found(self, body):
        self.model.log({"method": self.command, "path": self.path, "kind": "other", "turn": None, "body": body})
        self.reply(404, {"type": "error", "error": {"type": "not_found_error", "message": f"no {self.path}"}})

    def do_GET(self):
        path = self.path.split("?")[0]
        if path.endswith("/models"):
            self.model.log({"method": "GET", "path": self.path, "kind": "other", "turn": None, "body": None})
            names = self.model.models or ["scripted-model"]
            data = [{"type": "model", "id": n, "display_name": n, "created_at": "2025-01-01T00:00:00Z"} for n in names]
            self.reply(200, {"data": data, "has_more": False, "first_id": names[0], "last_id": names[-1]})
        else:
            self.not_found(None)

    def do_HEAD(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        path = self.path.split("?")[0]
        body = self.read_body()
        model = self.model
        if path.endswith("/count_tokens"):
            model.log({"method": "POST", "path": self.path, "kind": "other", "turn": None, "body": body})
            self.reply(200, {"input_tokens": max(1, len(json.dumps(body)) // 4)})
            return
        if not path.endswith("/messages"):
            self.not_found(body)
            return
        name = body.get("model") or "scripted-model"
        with model.lock:
            if name not in model.models:
                model.models.append(name)
        if is_main_loop(body):
            index, turn = model.take_turn()
            kind = "main"
        else:
            index, turn, kind = None, {"text": "ok"}, "side"
        model.log({"method": "POST", "path": self.path, "kind": kind, "turn": index, "body": body})
        blocks, stop = content_blocks(model, turn)
        msg = message(model, name, blocks, stop)
        if body.get("stream"):
            self.reply(200, sse(msg), "text/event-stream")
        else:
            self.reply(200, msg)


def main():
    serve(Handler, __doc__.splitlines()[0], attribute="model", make=Model)
    return 0


if __name__ == "__main__":
    sys.exit(main())
