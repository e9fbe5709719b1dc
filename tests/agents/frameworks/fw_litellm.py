"""litellm: litellm.completion(model="openai/gpt-stub", api_base=..., api_key=...) with
the call's keyword arguments (the API key among them, read from OPENAI_API_KEY) kept in
a dict local across snapshots; the conversation grows turn by turn."""

import os

import litellm

from snapstate import snapshot

litellm.telemetry = False
litellm.suppress_debug_info = True


def main():
    call = {
        "model": "openai/gpt-stub",
        "api_base": os.environ["LLM_URL"] + "/v1",
        "api_key": os.environ["OPENAI_API_KEY"],
        "temperature": 0,
        "num_retries": 0,
        "messages": [{"role": "system", "content": "Reply briefly."}],
    }
    for turn, text in enumerate(["hello there", "what is 2+2", "goodbye"], 1):
        call["messages"].append({"role": "user", "content": text})
        reply = litellm.completion(**call)
        message = reply.choices[0].message
        call["messages"].append({"role": "assistant", "content": message.content})
        print(turn, message.content, reply.usage.total_tokens, len(call["messages"]))
        snapshot(f"turn-{turn}")
    print("done", [m["role"] for m in call["messages"]])
