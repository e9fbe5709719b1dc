"""smolagents: a ToolCallingAgent on OpenAIServerModel with one @tool, a task per turn
(the agent's memory reset each run), the answers kept in a list across snapshots."""

import os

from smolagents import OpenAIServerModel, ToolCallingAgent, tool

from snapstate import snapshot

model = OpenAIServerModel(
    model_id="gpt-stub",
    api_base=os.environ["LLM_URL"] + "/v1",
    api_key=os.environ["OPENAI_API_KEY"],
)


@tool
def convert(amount: float, currency: str) -> str:
    """Convert an amount of euros into another currency.

    Args:
        amount: the amount in euros
        currency: the currency to convert to
    """
    return f"{amount} EUR = {amount * 2} {currency}"


agent = ToolCallingAgent(tools=[convert], model=model, verbosity_level=0, max_steps=3)


def main():
    answers = []
    for turn, task in enumerate(["convert 10 EUR to USD", "and 20 to GBP", "thank you"], 1):
        answer = agent.run(task)
        answers.append(answer)
        print(turn, repr(answer), len(agent.memory.steps))
        snapshot(f"turn-{turn}")
    print("done", answers)
