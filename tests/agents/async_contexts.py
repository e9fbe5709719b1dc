"""`async with` a class async context manager and an @contextlib.asynccontextmanager
across a snapshot (one swallowing an exception raised after the resume, one thrown an
exception into its restored generator); `async for` over an async generator with a
snapshot in the loop body; an async generator object held in a local, advanced partly
before a snapshot and finished after it (its finally runs after the resume); values sent with asend() and
an exception thrown with athrow() into a restored async generator whose finally
awaits."""

import asyncio
import contextlib

from snapstate import snapshot


class Session:
    def __init__(self, name):
        self.name = name
        self.events = []

    async def __aenter__(self):
        await snapshot(f"aenter-{self.name}")
        print("aenter", self.name, flush=True)
        return self

    async def __aexit__(self, exc_type, exc, tb):
        self.events.append("exit")
        del tb  # a traceback cannot be saved (as in a sync agent): drop it first
        await snapshot(f"aexit-{self.name}")
        print("aexit", self.name, exc_type.__name__ if exc_type else None, flush=True)
        return exc_type is KeyError  # swallow KeyError only


@contextlib.asynccontextmanager
async def guarded(name):
    print("acm-start", name, flush=True)
    try:
        yield name.upper()
    except ValueError as exc:
        print("acm-caught", name, exc, flush=True)
    finally:
        print("acm-finally", name, flush=True)


async def ticker(n, label):
    try:
        for i in range(n):
            print("tick", label, i, flush=True)
            yield i * i
    finally:
        print("ticker finally", label, flush=True)


async def echo():
    try:
        received = yield "ready"
        while True:
            received = yield f"echo {received}"
    except KeyError as exc:
        print("echo caught", exc, flush=True)
        yield "after KeyError"
    finally:
        await asyncio.sleep(0)
        print("echo finally", flush=True)


async def main():
    async with Session("a") as s:
        await snapshot("in-class-acm")
        print("body", s.name, flush=True)
    async with Session("b") as s2:
        await snapshot("before-keyerror")
        raise KeyError("swallowed")
    print("after b", s.events, s2.events, flush=True)

    async with guarded("g") as g:
        await snapshot("in-asynccontextmanager")
        print("acm-body", g, flush=True)
    async with guarded("h"):
        await snapshot("before-valueerror")
        raise ValueError("thrown into the generator")

    squares = []
    async for value in ticker(3, "for"):
        info = await snapshot(f"async-for-{value}")
        squares.append(value)
        print("loop body", value, info.label, flush=True)
    print("squares", squares, flush=True)

    held = ticker(4, "held")
    first = await held.__anext__()
    second = await anext(held)
    await snapshot("generator-held")
    print("held got", first, second, flush=True)
    rest = [v async for v in held]
    print("held rest", rest, flush=True)

    partial = ticker(5, "closed")
    got = await anext(partial)
    await snapshot("before-aclose")
    await partial.aclose()
    print("closed after", got, flush=True)

    talker = echo()
    replies = [await talker.asend(None), await talker.asend("one")]
    await snapshot("echo-held")
    replies.append(await talker.asend("two"))
    replies.append(await talker.athrow(KeyError("thrown")))
    await talker.aclose()
    print("echo replies", replies, flush=True)
    return repr((squares, first, second, rest, got, replies))
