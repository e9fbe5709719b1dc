"""The library matrix agent: the SDK clients agents hold, used before and after each of
its snapshots, against the stub provider at LLM_URL.

  - `plain`: an openai.OpenAI client in a local, its key from OPENAI_API_KEY;
  - `agent.client`: an openai.OpenAI client on an agent object, with custom default
    headers and query, a timeout and max_retries=4 (a "flaky-3" message needs 3 retries);
  - `aoai`: an openai.AsyncOpenAI client used through asyncio.run in this sync agent;
  - `claude`: an anthropic.Anthropic client whose key is passed literally (read from the
    file KEY_FILE by a helper, so no local of the agent holds it);
  - `aclaude`: an anthropic.AsyncAnthropic client, its key from ANTHROPIC_API_KEY;
  - `raw` / `mraw`: with_raw_response results held across snapshots and parsed after.
"""

import asyncio
import os

import anthropic
import openai

from snapstate import snapshot

URL = os.environ["LLM_URL"]


class Agent:
    def __init__(self):
        self.client = openai.OpenAI(
            base_url=URL + "/v1",
            default_headers={"X-Team": "blue"},
            default_query={"tenant": "t1"},
            timeout=7.5,
            max_retries=4,
        )
        self.answers = []

    def ask(self, text):
        reply = self.client.chat.completions.create(
            model="gpt-stub", messages=[{"role": "user", "content": text}]
        )
        self.answers.append(reply)
        return reply.choices[0].message.content


def chat(client, text):
    reply = client.chat.completions.create(
        model="gpt-stub", messages=[{"role": "user", "content": text}]
    )
    return reply.choices[0].message.content


def literal_key():
    with open(os.environ["KEY_FILE"]) as f:
        return f.read().strip()


async def ask_async(client, text):
    reply = await client.chat.completions.create(
        model="gpt-stub", messages=[{"role": "user", "content": text}]
    )
    return reply.choices[0].message.content


async def ask_claude_async(client, text):
    reply = await client.messages.create(
        model="claude-stub", max_tokens=32, messages=[{"role": "user", "content": text}]
    )
    return reply.content[0].text


def ask_claude(client, text):
    return (
        client.messages.create(
            model="claude-stub", max_tokens=32, messages=[{"role": "user", "content": text}]
        )
        .content[0]
        .text
    )


def describe(agent):
    c = agent.client
    return (
        f"timeout={c.timeout} retries={c.max_retries} headers={c._custom_headers} "
        f"query={c._custom_query} base={c.base_url}"
    )


def main():
    plain = openai.OpenAI(base_url=URL + "/v1")
    agent = Agent()
    aoai = openai.AsyncOpenAI(base_url=URL + "/v1")
    claude = anthropic.Anthropic(api_key=literal_key(), base_url=URL)
    aclaude = anthropic.AsyncAnthropic(base_url=URL)
    first = plain.chat.completions.create(
        model="gpt-stub", messages=[{"role": "user", "content": "one"}]
    )
    print("plain:", first.choices[0].message.content, first.id)
    print("agent:", agent.ask("two"), describe(agent))
    print("async openai:", asyncio.run(ask_async(aoai, "three")))
    print("anthropic:", ask_claude(claude, "four"))
    print("async anthropic:", asyncio.run(ask_claude_async(aclaude, "five")))
    raw = plain.chat.completions.with_raw_response.create(
        model="gpt-stub", messages=[{"role": "user", "content": "raw six"}]
    )
    mraw = claude.messages.with_raw_response.create(
        model="claude-stub", max_tokens=32, messages=[{"role": "user", "content": "raw seven"}]
    )
    print("raw before:", raw.status_code, raw.headers["x-request-id"])
    snapshot("clients-held")
    print(
        "raw after:",
        raw.parse().choices[0].message.content,
        raw.http_request.url,
        mraw.parse().content[0].text,
        mraw.status_code,
    )
    print("plain:", chat(plain, "eight"))
    print("agent:", agent.ask("flaky-3 nine"), describe(agent), len(agent.answers))
    print("first kept:", first.choices[0].message.content, first.usage.total_tokens)
    snapshot("after-second-round")
    print("async openai:", asyncio.run(ask_async(aoai, "ten")))
    print("anthropic:", ask_claude(claude, "eleven"))
    print("async anthropic:", asyncio.run(ask_claude_async(aclaude, "twelve")))
    print("agent:", agent.ask("thirteen"), [a.id for a in agent.answers])
    print("raw again:", raw.parse() is raw.parse(), mraw.request_id)
    print("plain:", chat(plain, "fourteen"))
    plain.close()
    agent.client.close()
    claude.close()

    async def close_async():
        await aoai.close()
        await aclaude.close()

    asyncio.run(close_async())
    return "done"
