"""pydantic-ai, async: an Agent on OpenAIChatModel with a tool, `await agent.run(...)`
turns in an async main, the message history kept across `await snapshot(...)`."""

import os

from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from snapstate import snapshot

model = OpenAIChatModel(
    "gpt-stub",
    provider=OpenAIProvider(
        base_url=os.environ["LLM_URL"] + "/v1", api_key=os.environ["OPENAI_API_KEY"]
    ),
)
agent = Agent(model, instructions="Answer with the stock level.")


@agent.tool_plain
def stock_level(sku: str, warehouse: int) -> str:
    """How many units of a SKU a warehouse holds."""
    return f"{sku}@{warehouse}: {len(sku) * warehouse} units"


async def main():
    history = []
    for turn, question in enumerate(["stock of A-1?", "and in Lyon?", "ok"], 1):
        result = await agent.run(question, message_history=history)
        history = result.all_messages()
        print(turn, result.output, len(history), result.usage.requests)
        await snapshot(f"turn-{turn}")
    print("done", [m.kind for m in history])
