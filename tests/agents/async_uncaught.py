"""An exception raised in a nested coroutine after a resume, caught and re-raised as
another (`raise ... from`), escapes main(): the printed traceback (frames of the
restored coroutines, the cause chain) is the uninterrupted run's."""

import asyncio

from snapstate import snapshot


async def inner(n):
    await snapshot(f"inner-{n}")
    if n == 2:
        raise KeyError("missing")
    return n


async def main():
    first = await inner(1)
    print("first", first, flush=True)
    try:
        await asyncio.gather(inner(2))
    except KeyError as exc:
        print("caught", repr(exc), flush=True)
        raise ValueError("wrapped") from exc
