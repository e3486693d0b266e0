"""deny-commands gate (Python): rejects a call whose `command` argument contains one of the
configured `patterns` (comma-separated substrings). A call without a call id, recorded
arguments or a string `command` is not this gate's to judge: it says `next`."""

import json

from wit_world import WitWorld as World
from wit_world.imports import host
from wit_world.imports.host import Level
from wit_world.imports.types import Decision, Request


def command_of(request: Request):
    if request.call_id is None:
        return None
    arguments = host.call_arguments(request.call_id)
    if arguments is None:
        return None
    try:
        value = json.loads(arguments)
    except ValueError:
        return None
    command = value.get("command") if isinstance(value, dict) else None
    return command if isinstance(command, str) else None


class WitWorld(World):
    def decide(self, request: Request) -> Decision:
        command = command_of(request)
        if command is None:
            return Decision.NEXT
        patterns = host.config("patterns") or ""
        for pattern in (p.strip() for p in patterns.split(",")):
            if pattern and pattern in command:
                host.log(Level.INFO, f"command matches {pattern!r}: rejected")
                return Decision.REJECT
        return Decision.NEXT
