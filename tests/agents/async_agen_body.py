"""Tasks suspended inside the body of an async generator at a snapshot: `async for`
over a generator that itself awaits snapshot(); an @asynccontextmanager whose setup
and teardown await snapshot(); a consumer task waiting in queue.get() inside an async
generator (`async for item in stream(queue)`) while main snapshots; an async
comprehension over a generator iterating another, both snapshotting in their bodies;
asend() and anext() into a generator that snapshots in its body. A snapshot freezes
the coroutine chain of every task, whatever async generator it is running in."""

import asyncio
import contextlib

from snapstate import snapshot


async def numbers(n):
    try:
        for i in range(n):
            info = await snapshot(f"in-generator-{i}")
            print("generator", i, info.label, flush=True)
            yield i * 3
    finally:
        print("numbers finally", flush=True)


@contextlib.asynccontextmanager
async def session(name):
    await snapshot(f"setup-{name}")
    print("setup", name, flush=True)
    try:
        yield name.upper()
    finally:
        await snapshot(f"teardown-{name}")
        print("teardown", name, flush=True)


async def stream(queue):
    while (item := await queue.get()) is not None:
        yield item


async def consume(queue):
    got = []
    async for item in stream(queue):
        got.append(item)
        print("consumed", item, flush=True)
    return got


async def doubled(n):
    async for value in numbers(n):  # a generator iterating one that snapshots
        await snapshot(f"doubled-{value}")
        yield value * 2


async def talk():
    got = yield "ready"
    while True:
        await snapshot(f"talk-{got}")
        got = yield f"echo {got}"


async def main():
    seen = []
    async for value in numbers(2):
        seen.append(value)
    async with session("s") as s:
        print("in session", s, flush=True)
    queue = asyncio.Queue()
    task = asyncio.create_task(consume(queue))
    await queue.put("a")
    await snapshot("consumer-in-generator")
    await queue.put("b")
    await queue.put(None)
    got = await task
    nested = [v async for v in doubled(2)]
    talker = talk()
    replies = [await talker.asend(None), await talker.asend("x"), await anext(talker)]
    await talker.aclose()
    print("end", seen, got, nested, replies, flush=True)
    return repr((seen, got, nested, replies))
