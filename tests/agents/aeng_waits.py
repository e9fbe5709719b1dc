"""Two asyncio tasks, each awaiting an async effect and a long sleep(): the job
hibernates when both wait, and resumes both when due."""

import asyncio

from snapstate import effect, sleep, snapshot


@effect(kind="read")
async def fetch(x):
    await asyncio.sleep(0.001)
    return x * 2


async def sleeper(n):
    await sleep(0.01)  # short: slept in the process
    value = await fetch(n)
    print("sleeper", n, value, flush=True)
    await sleep(3600)  # long: the job hibernates once both tasks wait
    print("woke", n, flush=True)
    return value


async def main():
    print("a", await fetch(1), flush=True)
    await snapshot("one")
    results = await asyncio.gather(sleeper(2), sleeper(3))
    print("results", results, flush=True)
    return results
