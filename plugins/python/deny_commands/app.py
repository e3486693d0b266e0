"""deny-commands gate (Python, plugin API 0.2): rejects a call whose `command` argument contains
one of the configured `patterns` (comma-separated substrings), saying why: the deployment's
`reason` when it sets one, else `the command contains "<pattern>", which this deployment does not
allow`. A call without recorded arguments or a string `command` is not this gate's to judge: it
says `next`. `patterns` and `reason` are its only config keys; any other is refused at load."""

import json
from typing import List, Tuple

from componentize_py_types import Err
from wit_world import WitWorld as World
from wit_world.imports import host
from wit_world.imports.host import Level
from wit_world.imports.types import Decision, Decision_Next, Decision_Reject, Request

KEYS = ("patterns", "reason")


def command_of(request: Request):
    if request.call_id is None or request.arguments is None:
        return None
    try:
        value = json.loads(request.arguments)
    except ValueError:
        return None
    command = value.get("command") if isinstance(value, dict) else None
    return command if isinstance(command, str) else None


class WitWorld(World):
    def validate_config(self, config: List[Tuple[str, str]]) -> None:
        for key, _ in config:
            if key not in KEYS:
                raise Err(f'unknown key "{key}": deny-commands reads only "patterns" and "reason"')

    def decide(self, request: Request) -> Decision:
        command = command_of(request)
        if command is None:
            return Decision_Next()
        patterns = host.config("patterns") or ""
        for pattern in (p.strip() for p in patterns.split(",")):
            if pattern and pattern in command:
                host.log(Level.INFO, f"command matches {pattern!r}: rejected")
                reason = host.config("reason")
                if reason is None:
                    reason = f'the command contains "{pattern}", which this deployment does not allow'
                return Decision_Reject(reason)
        return Decision_Next()
