"""A snapshot awaited inside an asyncio.timeout() block of its own task: refused at
once (the deadline cannot end while the task waits for the snapshot); the job goes
on, and a snapshot after the block is taken."""

import asyncio

from snapstate import SnapshotError, snapshot


async def main():
    try:
        async with asyncio.timeout(3600):
            await snapshot("inside")
    except SnapshotError as exc:
        print("refused:", exc, flush=True)
    info = await snapshot("outside")
    print("seq", info.seq, flush=True)
    return "ok"
