"""A misbehaving gate (Python), for the conformance suite's adversarial cases. The tool name
picks the misbehaviour: `throw` raises, `loop` never returns, `alloc` allocates without end;
any other tool is granted, to show the plugin recovers."""

from wit_world import WitWorld as World
from wit_world.imports.types import Decision, Request


class WitWorld(World):
    def decide(self, request: Request) -> Decision:
        if request.tool_name == "throw":
            raise RuntimeError("the adversary throws")
        if request.tool_name == "loop":
            while True:
                pass
        if request.tool_name == "alloc":
            hoard = []
            while True:
                hoard.append(bytearray(1 << 20))
        return Decision.ALLOW_ONCE
