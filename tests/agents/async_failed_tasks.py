"""Tasks that failed before a snapshot and are held across it: one whose exception the
agent retrieved before the snapshot (asyncio logs nothing for it, in the uninterrupted
run or after a resume), one whose exception it reads after the resume; both dropped
and collected at the end."""

import asyncio
import gc

from snapstate import snapshot


async def fails(name):
    raise KeyError(f"{name} lost")


async def main():
    seen = asyncio.create_task(fails("seen"), name="seen")
    later = asyncio.create_task(fails("later"), name="later")
    await asyncio.sleep(0)
    print("seen before", seen.done(), repr(seen.exception()), flush=True)
    await snapshot("failed-tasks-held")
    print("later after", later.done(), repr(later.exception()), flush=True)
    await snapshot("after-reading")
    del seen, later
    gc.collect()
    print("collected", flush=True)
    return "ok"
