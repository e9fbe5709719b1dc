"""pydantic-ai: an Agent on OpenAIChatModel with a tool, run_sync turns, the message
history kept across snapshots."""

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
agent = Agent(model, instructions="Be brief.")


@agent.tool_plain
def lookup_price(item: str) -> str:
    """The price of an item."""
    return f"{item} costs 42"


def main():
    history = []
    for turn, question in enumerate(["price of tea?", "and coffee?", "thanks"], 1):
        result = agent.run_sync(question, message_history=history)
        history = result.all_messages()
        print(turn, result.output, len(history))
        snapshot(f"turn-{turn}")
    print("done", len(history))
