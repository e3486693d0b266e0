"""allow-tools gate (Python, plugin API 0.2): grants one call of any tool listed in its `tools`
config (comma-separated, e.g. `tools = "read,grep"`), and says `next` for everything else.
`tools` is its only config key: any other is refused at load."""

from typing import List, Tuple

from componentize_py_types import Err
from wit_world import WitWorld as World
from wit_world.imports import host
from wit_world.imports.types import Decision, Decision_AllowOnce, Decision_Next, Request

KEYS = ("tools",)


class WitWorld(World):
    def validate_config(self, config: List[Tuple[str, str]]) -> None:
        for key, _ in config:
            if key not in KEYS:
                raise Err(f'unknown key "{key}": allow-tools reads only "tools"')

    def decide(self, request: Request) -> Decision:
        tools = host.config("tools") or ""
        listed = any(t.strip() and t.strip() == request.tool_name for t in tools.split(","))
        return Decision_AllowOnce() if listed else Decision_Next()
