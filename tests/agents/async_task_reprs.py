"""Tasks held across a snapshot look the same after the resume: repr() of a task that
finished (its coroutine named, as asyncio's "Task exception was never retrieved" log
names it) and of one that failed, and their names."""

import asyncio

from snapstate import snapshot


async def finishes():
    return 42


async def fails():
    raise KeyError("lost")


async def main():
    done = asyncio.create_task(finishes(), name="finisher")
    failed = asyncio.create_task(fails(), name="failer")
    await asyncio.sleep(0)
    print("before", repr(done), flush=True)
    await snapshot("done-tasks-held")
    print("after", repr(done), flush=True)
    print("after", repr(failed), flush=True)
    failed.exception()
    await snapshot("end")
    return done.result()
