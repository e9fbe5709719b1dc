"""A task that fails before a snapshot, whose exception the agent never retrieves: it is
dropped and collected after the snapshot, and asyncio logs "Task exception was never
retrieved" as it does for the same program under plain asyncio.run()."""

import asyncio
import gc

from snapstate import snapshot


async def fails(name):
    raise KeyError(f"{name} lost")


async def main():
    dropped = asyncio.create_task(fails("dropped"), name="dropped")
    await asyncio.sleep(0)
    await snapshot("failed-task-held")
    del dropped
    gc.collect()
    print("collected", flush=True)
    await snapshot("end")
    return "ok"
