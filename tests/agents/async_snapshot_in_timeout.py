"""`await snapshot()` inside an asyncio.timeout() scope whose deadline is not reached by
the code itself: the snapshot is taken and the code goes on, as under plain asyncio
(where snapshot() returns at once), instead of waiting for the deadline's timer and
being cancelled by it."""

import asyncio

from snapstate import snapshot


async def main():
    await snapshot("before")
    outcome = "no timeout"
    try:
        async with asyncio.timeout(0.2):
            info = await snapshot("inside-timeout")
            print("inside", info.label, flush=True)
    except TimeoutError:
        outcome = "timed out"
    print("outcome", outcome, flush=True)
    await snapshot("after")
    return outcome
