"""allow-tools gate (Python): grants one call of any tool listed in its `tools` config
(comma-separated, e.g. `tools = "read,grep"`), and says `next` for everything else."""

from wit_world import WitWorld as World
from wit_world.imports import host
from wit_world.imports.types import Decision, Request


class WitWorld(World):
    def decide(self, request: Request) -> Decision:
        tools = host.config("tools") or ""
        listed = any(t.strip() and t.strip() == request.tool_name for t in tools.split(","))
        return Decision.ALLOW_ONCE if listed else Decision.NEXT
