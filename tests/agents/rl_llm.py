"""An @effect asking an LLM SDK client, rate limited, for the rate-limit tests:
LLM=openai|anthropic, PROVIDER_URL (tests/rate_provider.py) from the environment. The
client has max_retries=0, so the SDK raises its RateLimitError at the first 429."""

import os

import anthropic
import openai

from snapstate import effect, snapshot

CLIENT = None


def _client():
    url = os.environ["PROVIDER_URL"]
    if os.environ.get("LLM") == "anthropic":
        return anthropic.Anthropic(base_url=url, api_key="k-test", max_retries=0)
    return openai.OpenAI(base_url=url + "/v1", api_key="k-test", max_retries=0)


@effect(idempotency="key")
def ask(text, *, idempotency_key):
    headers = {"Idempotency-Key": idempotency_key}
    messages = [{"role": "user", "content": text}]
    if os.environ.get("LLM") == "anthropic":
        reply = CLIENT.messages.create(
            model="m", max_tokens=10, messages=messages, extra_headers=headers
        )
        return reply.content[0].text
    reply = CLIENT.chat.completions.create(model="m", messages=messages, extra_headers=headers)
    return reply.choices[0].message.content


def main():
    global CLIENT
    CLIENT = _client()  # a module global: saved by its configuration, credentials sealed
    print("asking", flush=True)
    snapshot("before")
    answer = ask("hello")
    print("answer", answer, flush=True)
    return answer
