"""An MCP client driven line by line, for the gateway's end-to-end tests: the official Python SDK's
ClientSession over stdio (a command) or streamable HTTP (a URL).

    python3 client.py stdio COMMAND [ARG...]
    python3 client.py http URL [TOKEN [SESSION]]   (TOKEN as a bearer token, SESSION as Approval-Session)

With MCP_CLIENT_LIFECYCLE=discover the client speaks MCP 2026-07-28 (server/discover, then
requests that each carry their own version and client) instead of initializing.

Each line on stdin is a JSON operation; each answer is one JSON line on stdout:

    {"op": "list_tools"}                          -> {"tools": [name, ...]}
    {"op": "list_tools_page", "cursor": C}        -> {"tools": [name, ...], "next": C or null}
    {"op": "call", "name": N, "arguments": {...}} -> {"is_error": b, "text": "..."} or {"error": "..."}
    {"op": "start", "id": I, "name": N, ...}      -> {"started": I} (the call runs on)
    {"op": "progress", "id": I}                   -> {"progress": [message, ...]} once one came
    {"op": "cancel", "id": I}                     -> {"cancelled": I} (the SDK tells the server)
    {"op": "await", "id": I}                      -> the call's answer, as for "call"
    {"op": "list_prompts"} / {"op": "get_prompt", "name": N, "arguments": {...}}
    {"op": "list_resources"} / {"op": "list_templates"} / {"op": "read_resource", "uri": U}
    {"op": "ping"}
    {"op": "quit"}
"""

import json
import os
import sys

import anyio

from mcp import types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


async def list_roots(context) -> types.ListRootsResult:
    """The client's one root, as an agent would declare its project."""
    return types.ListRootsResult(roots=[types.Root(uri="file:///project", name="project")])


def answer(result) -> dict:
    texts = [c.text for c in result.content if getattr(c, "type", None) == "text"]
    return {"is_error": bool(result.is_error), "text": "\n".join(texts)}


async def run(session: ClientSession) -> None:
    if os.environ.get("MCP_CLIENT_LIFECYCLE") == "discover":
        # MCP 2026-07-28: no initialize; every request carries its own version and client.
        await session.discover()
        print(json.dumps({"server": session.server_info.name if session.server_info else None,
                          "protocol": session.protocol_version,
                          "instructions": session.instructions}), flush=True)
    else:
        init = await session.initialize()
        print(json.dumps({"server": init.server_info.name, "protocol": init.protocol_version,
                          "instructions": init.instructions}), flush=True)
    calls: dict[str, dict] = {}
    lines = anyio.wrap_file(sys.stdin)
    async with anyio.create_task_group() as tg:
        async for line in lines:
            op = json.loads(line)
            kind = op["op"]
            try:
                if kind == "quit":
                    break
                elif kind == "list_tools":
                    out = {"tools": [t.name for t in (await session.list_tools()).tools]}
                elif kind == "list_tools_page":
                    got = await session.list_tools(params=types.PaginatedRequestParams(cursor=op["cursor"]))
                    out = {"tools": [t.name for t in got.tools], "next": got.next_cursor}
                elif kind == "call":
                    out = answer(await session.call_tool(op["name"], op.get("arguments", {})))
                elif kind == "start":
                    call = {"done": anyio.Event(), "progress": [], "got_progress": anyio.Event(),
                            "scope": anyio.CancelScope(), "out": None}
                    calls[op["id"]] = call

                    async def progress(p, total, message, call=call):
                        call["progress"].append(message)
                        call["got_progress"].set()

                    async def running(op=op, call=call, progress=progress):
                        with call["scope"]:
                            try:
                                call["out"] = answer(await session.call_tool(
                                    op["name"], op.get("arguments", {}), progress_callback=progress))
                            except Exception as e:  # noqa: BLE001 - reported to the test
                                call["out"] = {"error": str(e)}
                        if call["scope"].cancelled_caught:
                            call["out"] = {"cancelled_locally": True}
                        call["done"].set()

                    tg.start_soon(running)
                    out = {"started": op["id"]}
                elif kind == "progress":
                    call = calls[op["id"]]
                    await call["got_progress"].wait()
                    out = {"progress": call["progress"]}
                elif kind == "cancel":
                    calls[op["id"]]["scope"].cancel()
                    await calls[op["id"]]["done"].wait()
                    out = {"cancelled": op["id"]}
                elif kind == "await":
                    await calls[op["id"]]["done"].wait()
                    out = calls[op["id"]]["out"]
                elif kind == "list_prompts":
                    out = {"prompts": [p.name for p in (await session.list_prompts()).prompts]}
                elif kind == "get_prompt":
                    got = await session.get_prompt(op["name"], op.get("arguments", {}))
                    out = {"messages": [m.content.text for m in got.messages]}
                elif kind == "list_resources":
                    out = {"resources": [str(r.uri) for r in (await session.list_resources()).resources]}
                elif kind == "list_templates":
                    got = await session.list_resource_templates()
                    out = {"templates": [t.uri_template for t in got.resource_templates]}
                elif kind == "read_resource":
                    got = await session.read_resource(op["uri"])
                    out = {"contents": [c.text for c in got.contents]}
                elif kind == "ping":
                    await session.send_ping()
                    out = {"pong": True}
                else:
                    out = {"error": f"unknown op {kind}"}
            except Exception as e:  # noqa: BLE001 - the test reads the error
                out = {"error": str(e)}
            print(json.dumps(out), flush=True)
        tg.cancel_scope.cancel()


async def main() -> None:
    mode = sys.argv[1]
    if mode == "stdio":
        # The SDK passes only a few variables on by default; the test's (NOTES_EVENTS) go through.
        params = StdioServerParameters(command=sys.argv[2], args=sys.argv[3:], env=dict(os.environ))
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write, list_roots_callback=list_roots) as session:
                await run(session)
    else:
        headers = {}
        if len(sys.argv) > 3:
            headers["Authorization"] = f"Bearer {sys.argv[3]}"
        if len(sys.argv) > 4:
            headers["Approval-Session"] = sys.argv[4]
        http = create_mcp_http_client(headers=headers)
        async with streamable_http_client(sys.argv[2], http_client=http) as streams:
            async with ClientSession(streams[0], streams[1], list_roots_callback=list_roots) as session:
                await run(session)


if __name__ == "__main__":
    anyio.run(main)
