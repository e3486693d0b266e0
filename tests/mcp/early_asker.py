"""A raw MCP server over stdio for the gateway's start-up: with EARLY_ROLE=ask it asks the agent
for its roots as soon as it is initialized, and once the gateway has answered, creates the file
EARLY_SIGNAL; with EARLY_ROLE=wait it answers `initialize` only once that file exists, so the
first server's request comes while the gateway is still starting its servers."""

import json
import os
import sys
import time

ROLE = os.environ["EARLY_ROLE"]
SIGNAL = os.environ["EARLY_SIGNAL"]
EMPTY = {
    "tools/list": {"tools": []},
    "prompts/list": {"prompts": []},
    "resources/list": {"resources": []},
    "resources/templates/list": {"resourceTemplates": []},
}


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def answer(message):
    if message["method"] == "initialize":
        if ROLE == "wait":
            deadline = time.monotonic() + 20
            while not os.path.exists(SIGNAL) and time.monotonic() < deadline:
                time.sleep(0.01)
        send({
            "jsonrpc": "2.0",
            "id": message["id"],
            "result": {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "early-" + ROLE, "version": "1"},
            },
        })
    else:
        send({"jsonrpc": "2.0", "id": message["id"], "result": EMPTY.get(message["method"], {})})


for line in sys.stdin:
    message = json.loads(line)
    if "method" in message and "id" in message:
        answer(message)
    elif message.get("method") == "notifications/initialized" and ROLE == "ask":
        send({"jsonrpc": "2.0", "id": "early-1", "method": "roots/list"})
        for reply in sys.stdin:
            reply = json.loads(reply)
            if reply.get("id") == "early-1" and "method" not in reply:
                break
            if "method" in reply and "id" in reply:
                answer(reply)
        with open(SIGNAL, "w") as signal:
            signal.write("asked\n")
