"""Async SDK clients held across snapshots (tests/test_async_effects.py), used inside
async @effects against the stub provider at LLM_URL (tests/llm_stub.py):

  - `bot.oai`: an openai.AsyncOpenAI on an object, with default headers and query, a
    timeout and max_retries=4 ("flaky-3 ..." needs 3 retries);
  - `bot.http`: an httpx.AsyncClient on the same object: base_url, headers, a
    httpx.Timeout with its own connect value;
  - `bot.claude`: an anthropic.AsyncAnthropic (key from ANTHROPIC_API_KEY), timeout 6;
  - `plain`: an httpx.AsyncClient in a local of main, passed to an effect.

Each client is used before the first snapshot, so it holds open connections when a
snapshot is taken. After each snapshot the configuration each client carries is
printed; the answers are printed as they come."""

import asyncio
import os

import anthropic
import httpx
import openai

from snapstate import effect, snapshot

URL = os.environ["LLM_URL"]


class Bot:
    def __init__(self):
        self.oai = openai.AsyncOpenAI(
            base_url=URL + "/v1",
            default_headers={"X-Team": "blue"},
            default_query={"tenant": "t1"},
            timeout=7.5,
            max_retries=4,
        )
        self.http = httpx.AsyncClient(
            base_url=URL + "/v1",
            headers={"X-Team": "green"},
            timeout=httpx.Timeout(4.0, connect=2.0),
        )
        self.claude = anthropic.AsyncAnthropic(base_url=URL, timeout=6.0, max_retries=2)
        self.answers = []

    @effect(kind="read")
    async def chat(self, text):
        reply = await self.oai.chat.completions.create(
            model="gpt-stub", messages=[{"role": "user", "content": text}]
        )
        self.answers.append(reply.id)
        return reply.choices[0].message.content

    @effect(kind="read")
    async def raw(self, text):
        response = await self.http.post(
            "/chat/completions",
            json={"model": "raw", "messages": [{"role": "user", "content": text}]},
        )
        return response.json()["choices"][0]["message"]["content"]

    @effect(kind="read")
    async def message(self, text):
        reply = await self.claude.messages.create(
            model="claude-stub", max_tokens=32, messages=[{"role": "user", "content": text}]
        )
        return reply.content[0].text

    def config(self):
        return (
            f"oai {self.oai.base_url} {self.oai.timeout} {self.oai.max_retries} "
            f"{self.oai.default_headers.get('X-Team')} {dict(self.oai.default_query)}; "
            f"http {self.http.base_url} {self.http.headers.get('x-team')} {self.http.timeout}; "
            f"claude {self.claude.base_url} {self.claude.timeout} {self.claude.max_retries}"
        )


@effect(kind="read")
async def ask_plain(client, text):
    response = await client.post(
        "/chat/completions",
        json={"model": "plain", "messages": [{"role": "user", "content": text}]},
    )
    return response.json()["choices"][0]["message"]["content"]


async def round_of(bot, plain, n):
    answers = await asyncio.gather(
        bot.chat(f"chat {n}"), bot.raw(f"raw {n}"), bot.message(f"message {n}")
    )
    answers.append(await ask_plain(plain, f"plain {n}"))
    print(n, answers, flush=True)


async def main():
    bot = Bot()
    plain = httpx.AsyncClient(base_url=URL + "/v1", headers={"X-Local": "yes"}, timeout=3.0)
    await round_of(bot, plain, 1)
    print(await bot.chat("flaky-3 before"), flush=True)
    for n in (2, 3):
        await snapshot(f"round-{n}")
        print("config", bot.config(), f"plain {plain.base_url} {plain.timeout}", flush=True)
        await round_of(bot, plain, n)
        print(await bot.chat(f"flaky-3 after {n}"), flush=True)
    await plain.aclose()
    await bot.http.aclose()
    await bot.oai.close()
    await bot.claude.close()
    return bot.answers
