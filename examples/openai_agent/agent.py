"""A support agent built the way many are: the OpenAI SDK's client in a tool-calling
loop, its system prompt a jinja2 template (the openai and jinja2 rows of the README's
framework matrix, both in the main test environment). For each customer question the
model calls the `order_status` tool, the agent looks the order up, and the model
answers with what it found; a snapshot after each answer.

    python examples/openai_agent/demo.py        # the story, narrated: killed, resumed

or by hand, with the providers running (`python examples/openai_agent/servers.py`
prints LLM_URL and ORDERS_URL: export them):

    snaprun run --job support examples/openai_agent/agent.py

Nothing of the model calls is wrapped: `record_http()` at the start of main() records
every HTTP request the job sends through httpx (so the SDK's `chat.completions.create`)
in the ledger with its response, and code re-executed after a restore gets the same
completion, byte for byte, instead of paying for a new one that might differ. Model
calls change nothing, so one whose outcome a crash left unknown is simply sent again.
The order lookup is an `@effect(kind="read")`. The client and the template themselves
are saved with the job as they are.
"""

import json
import os
import urllib.parse
import urllib.request

import openai
from jinja2 import Environment, StrictUndefined

from snapstate import effect, record_http, snapshot

QUESTIONS = [
    "Where is my order A-1042?",
    "Has order B-77 shipped yet?",
    "When will order C-3 arrive?",
]
SYSTEM = Environment(undefined=StrictUndefined).from_string(
    "You are {{ company }}'s support assistant. Look orders up with "
    "{% for tool in tools %}{{ tool.function.name }}{% if not loop.last %}, {% endif %}"
    "{% endfor %} before you answer."
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "order_status",
            "description": "The status of an order and the day it arrives.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string"}},
                "required": ["order_id"],
            },
        },
    }
]


@effect(kind="read")
def order_status(order_id):
    url = f"{os.environ['ORDERS_URL']}/orders/{urllib.parse.quote(order_id)}"
    with urllib.request.urlopen(url, timeout=30) as reply:
        return json.load(reply)


def complete(client, messages):
    """One model call: a plain SDK call, recorded by record_http()."""
    return client.chat.completions.create(model="stub-1", messages=messages, tools=TOOLS)


def answer(client, system, question):
    messages = [{"role": "system", "content": system}, {"role": "user", "content": question}]
    while True:
        message = complete(client, messages).choices[0].message
        if not message.tool_calls:
            return message.content
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            result = order_status(**json.loads(call.function.arguments))
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)}
            )


def main():
    record_http()  # every HTTP request of this job is recorded from here on
    client = openai.OpenAI(
        base_url=os.environ["LLM_URL"] + "/v1",
        api_key=os.environ.get("OPENAI_API_KEY", "sk-stub-no-key-needed"),
    )
    system = SYSTEM.render(company="Acme Outfitters", tools=TOOLS)
    answers = []
    for question in QUESTIONS:
        answers.append(answer(client, system, question))
        print(f"Q: {question}\nA: {answers[-1]}", flush=True)
        snapshot(f"answered {len(answers)}")
    return len(answers)


if __name__ == "__main__":
    print(main())
