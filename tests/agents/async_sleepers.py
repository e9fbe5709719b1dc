"""A heartbeat task looping on asyncio.sleep() while main snapshots: the sleep in
progress is frozen with the job (its timer comes back due at the same wall clock time)
instead of keeping every snapshot waiting."""

import asyncio

from snapstate import snapshot


async def heartbeat(stop, beats):
    n = 0
    while not stop.is_set():
        await asyncio.sleep(0.3)
        n += 1
        beats.append(n)
    return n


async def main():
    stop, beats = asyncio.Event(), []
    hb = asyncio.create_task(heartbeat(stop, beats))
    await asyncio.sleep(0.1)
    info = await snapshot("one")
    print("snap", info.seq, flush=True)
    await asyncio.sleep(1.0)
    await snapshot("two")
    stop.set()
    n = await hb
    print("beats >= 3", n >= 3, flush=True)
    return "ok"
