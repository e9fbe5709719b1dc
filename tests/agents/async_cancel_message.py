"""A task cancelled with a message before a snapshot and awaited only after it: the
CancelledError it raises carries the same message after a restore."""

import asyncio

from snapstate import snapshot


async def w():
    await asyncio.Event().wait()


async def main():
    t = asyncio.create_task(w())
    await asyncio.sleep(0)
    t.cancel("stop it")
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    print("done", t.cancelled(), flush=True)
    await snapshot("s")
    try:
        await t
    except asyncio.CancelledError as e:
        print("after", e.args, flush=True)
    await snapshot("end")
    return 1
