"""mcp: a client session held open across a snapshot (anyio tracks the session's tasks
by weak reference, so a restored task would be one it has never seen): refused by name,
and the job carries on."""

import os

from mcp import Client
from mcp.server.mcpserver import MCPServer, RequestStateSecurity

from snapstate import SnapshotError, snapshot

server = MCPServer(
    "inv",
    log_level="WARNING",
    request_state_security=RequestStateSecurity(keys=[os.environ["MCP_STATE_KEY"]], audience="inv"),
)


@server.tool()
def ping(x: str) -> str:
    return x


async def main():
    async with Client(server) as client:
        await client.list_tools()
        try:
            await snapshot("session open")
        except SnapshotError as exc:
            print("REFUSED", exc)
        r = await client.call_tool("ping", arguments={"x": "after"})
        print("after", r.content[0].text, flush=True)
