"""openai-agents: an Agent with a @function_tool, Runner.run_sync turns against the
stub's Responses API (AsyncOpenAI client set as the default, tracing off); each turn
continues from the previous result's input list, kept across snapshots."""

import os

from agents import (
    Agent,
    Runner,
    function_tool,
    set_default_openai_api,
    set_default_openai_client,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

from snapstate import snapshot

set_default_openai_client(
    AsyncOpenAI(base_url=os.environ["LLM_URL"] + "/v1", api_key=os.environ["OPENAI_API_KEY"]),
    use_for_tracing=False,
)
set_default_openai_api("responses")
set_tracing_disabled(True)


@function_tool
def weather(city: str, days: int) -> str:
    """The weather forecast for a city."""
    return f"{city}: sunny for {days} days"


agent = Agent(name="forecaster", instructions="Use the tool.", tools=[weather], model="gpt-stub")


def main():
    items = []
    for turn, question in enumerate(["weather in Oslo?", "and next week?", "bye"], 1):
        result = Runner.run_sync(agent, items + [{"role": "user", "content": question}])
        items = result.to_input_list()
        print(turn, result.final_output, len(items), result.last_agent.name)
        snapshot(f"turn-{turn}")
    print("done", [item.get("type", item.get("role")) for item in items])
