#!/usr/bin/env python3
"""A scripted stand-in for the OpenAI Responses API, as Codex consumes it.

Point a Codex ``model_providers`` entry with ``wire_api = "responses"`` at
``http://127.0.0.1:<port>/v1`` and every ``POST .../responses`` is answered
from a script, streamed as server-sent events (``response.created``,
``response.output_item.done``, ``response.completed``).

Usage::

    python3 model_openai.py --script script.json --log requests.jsonl --port-file port.txt

The script is shared with the other CLIs' stand-ins::

    {"turns": [{"tool": {"name": "shell", "input": {"command": ["bash", "-lc", "rm -rf x"]}}},
               {"text": "done"}]}

A main-loop request (one that offers tools and is not a sub-agent's) takes the
next turn: a function call or a final text.  Any other request takes no turn:
Codex's approval reviewer (``--approve-for-me``; ``client_metadata`` names an
``x-openai-subagent``, and it asks for JSON) gets the script's optional
``"review"`` object, by default ``{"outcome": "deny", ...}``; the rest (titles,
summaries, compaction...) get a short text.  When the turns run out the answer is
"done".  A tool the request does not offer under the script's name is mapped
onto the shell tool Codex does offer: ``shell`` (``command`` as an argv list),
``shell_command`` (``command`` as a string) or ``exec_command`` (``cmd``).
An MCP tool scripted as ``mcp__<server>__<tool>`` is called the way Codex
offers it, as ``<tool>`` in the namespace ``mcp__<server>``; until Codex offers
that namespace (its MCP servers start beside the first request), the turn waits
and the model calls ``get_goal``, which does nothing.

Every request body is appended to the log as one JSON line, so a test can read
what the model was sent, e.g. the function output a hook's deny reason became.
Python 3.11 standard library only.
"""

import json
import sys
from http.server import BaseHTTPRequestHandler

from scripted import serve, shell_text

SIDE_ANSWER = "ok"
# Requests a turn may wait for its MCP namespace before it is taken anyway.
MAX_WAITS = 20
DEFAULT_REVIEW = {"outcome": "deny", "risk_level": "high", "user_authorization": "unknown",
                  "rationale": "the scripted reviewer denies every action"}


def function_item(tool, offered, call_id):
    """The output item for a scripted tool call, fitted to the tools offered."""
    name, args = tool["name"], dict(tool.get("input", {}))
    if name not in offered and name == "shell":
        command = args.pop("command", [])
        if "shell_command" in offered:
            name, args = "shell_command", {"command": shell_text(command), **args}
        elif "exec_command" in offered:
            workdir = args.pop("workdir", None)
            name, args = "exec_command", {"cmd": shell_text(command), **args}
            if workdir:
                args["workdir"] = workdir
    namespace, _, own = name.rpartition("__")
    if name not in offered and offered.get(namespace) == "namespace":
        return {"type": "function_call", "namespace": namespace, "name": own,
                "arguments": json.dumps(args), "call_id": call_id, "status": "completed"}
    if offered.get(name) == "custom":
        text = args if isinstance(args, str) else args.get("input", "")
        return {"type": "custom_tool_call", "name": name, "input": text,
                "call_id": call_id, "status": "completed"}
    return {"type": "function_call", "name": name, "arguments": json.dumps(args),
            "call_id": call_id, "status": "completed"}


def message_item(text, n):
    return {"type": "message", "role": "assistant", "id": f"msg_{n}", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    script = None  # set by main()

    def log_message(self, fmt, *args):
        sys.stderr.write("model_openai: " + (fmt % args) + "\n")

    def send_json(self, status, obj):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.split("?")[0].endswith("/models"):
            self.send_json(200, {"object": "list", "data": [], "models": []})
        else:
            self.send_json(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"raw": raw.decode("utf-8", "replace")}
        self.script.log(body)
        if not self.path.split("?")[0].endswith("/responses"):
            self.send_json(404, {"error": {"message": f"no route {self.path}"}})
            return
        offered = {t.get("name"): t.get("type") for t in body.get("tools") or [] if t.get("name")}
        subagent = (body.get("client_metadata") or {}).get("x-openai-subagent")
        wants_json = ((body.get("text") or {}).get("format") or {}).get("type") == "json_schema"
        waiting = self.waits_for_namespace(offered)
        if offered and not subagent and waiting:
            self.script.waits = getattr(self.script, "waits", 0) + 1
            turn, n = {"tool": {"name": "get_goal", "input": {}}}, f"wait_{self.script.waits}"
        elif offered and not subagent:
            index, turn = self.script.take_turn()
            n = 0 if index is None else index + 1
        elif wants_json:
            turn, n = {"text": json.dumps(self.script.data.get("review", DEFAULT_REVIEW))}, 0
        else:
            turn, n = {"text": SIDE_ANSWER}, 0
        if "tool" in turn:
            item = function_item(turn["tool"], offered, f"call_{n}")
        else:
            item = message_item(turn.get("text", "done"), n)
        self.stream(f"resp_{id(item)}", item)

    def waits_for_namespace(self, offered):
        """Whether the next turn calls an MCP tool whose namespace is not offered yet."""
        turn = self.script.peek_turn() or {}
        name = (turn.get("tool") or {}).get("name", "")
        namespace = name.rpartition("__")[0]
        return (name.startswith("mcp__") and name not in offered
                and namespace not in offered and "get_goal" in offered
                and getattr(self.script, "waits", 0) < MAX_WAITS)

    def stream(self, resp_id, item):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": 15}
        events = [
            {"type": "response.created", "response": {"id": resp_id}},
            {"type": "response.output_item.added", "output_index": 0, "item": item},
            {"type": "response.output_item.done", "output_index": 0, "item": item},
            {"type": "response.completed",
             "response": {"id": resp_id, "status": "completed", "output": [item], "usage": usage}},
        ]
        for event in events:
            self.wfile.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
            self.wfile.flush()
        self.close_connection = True


def main():
    serve(Handler, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
