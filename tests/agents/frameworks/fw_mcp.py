"""mcp: an MCPServer (mcp 2's FastMCP) defined at module level with a tool, its
request-state keys from the environment (MCP_STATE_KEY: saved as a reference to the
variable; MCPServer's default, a random key of the process, cannot be saved: see
fw_mcp_ephemeral.py). Each turn
opens an in-memory client session to it (mcp.Client(server), in-process transport)
inside asyncio.run, lists its tools, offers them to the stub LLM (an openai.OpenAI
client), calls the tool the LLM picked with the LLM's arguments, closes the session;
then a snapshot. The transcript is kept across snapshots."""

import asyncio
import json
import os

import openai
from mcp import Client
from mcp.server.mcpserver import MCPServer, RequestStateSecurity

from snapstate import snapshot

server = MCPServer(
    "inventory",
    log_level="WARNING",
    request_state_security=RequestStateSecurity(
        keys=[os.environ["MCP_STATE_KEY"]], audience="inventory"
    ),
)
llm = openai.OpenAI(
    base_url=os.environ["LLM_URL"] + "/v1", api_key=os.environ["OPENAI_API_KEY"], max_retries=0
)


@server.tool()
def count_items(shelf: str, depth: int) -> str:
    """How many items a shelf holds."""
    return f"shelf {shelf} (depth {depth}) holds {len(shelf) * depth} items"


async def one_turn(question: str) -> tuple[str, str]:
    async with Client(server) as client:
        listing = await client.list_tools()
        tools = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.input_schema,
                },
            }
            for t in listing.tools
        ]
        reply = llm.chat.completions.create(
            model="gpt-stub", messages=[{"role": "user", "content": question}], tools=tools
        )
        call = reply.choices[0].message.tool_calls[0].function
        result = await client.call_tool(call.name, arguments=json.loads(call.arguments))
        return call.name, result.content[0].text


def main():
    transcript = []
    for turn, question in enumerate(["count shelf A", "count shelf B"], 1):
        name, text = asyncio.run(one_turn(question))
        transcript.append((question, name, text))
        print(turn, name, text, len(transcript))
        snapshot(f"turn-{turn}")
    print("done", transcript)
