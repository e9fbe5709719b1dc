"""A gather awaited across a snapshot whose child raises after the resume: the awaiting
coroutine catches the error (so asyncio logs nothing: the gather's exception was
retrieved), the sibling is left running and awaited after."""

import asyncio

from snapstate import snapshot


async def fails(name):
    await snapshot(f"fails-{name}")
    raise KeyError(f"{name} missing")


async def slow(event):
    await event.wait()
    return "slow done"


async def main():
    event = asyncio.Event()
    sibling = asyncio.create_task(slow(event))
    try:
        await asyncio.gather(fails("a"), sibling)
    except KeyError as exc:
        print("caught", repr(exc), flush=True)
    await snapshot("after-catch")
    event.set()
    print("sibling", await sibling, flush=True)
    return "ok"
