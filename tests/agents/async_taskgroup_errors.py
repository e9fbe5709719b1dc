"""Snapshots after a TaskGroup whose task failed (caught with except* and with a
plain except ExceptionGroup), and after a task was cancelled and uncancelled by
asyncio.timeout(): the job goes on snapshotting as an uninterrupted run goes on.

On Python 3.11 and 3.12 the failed group leaves its parent task's cancelling() count
at 1 (CPython's TaskGroup cancels the parent and does not uncancel it when the
parent was waiting in __aexit__; 3.13 uncancels): no cancellation is in flight, the
next await runs normally."""

import asyncio

from snapstate import snapshot


async def boom(name):
    await snapshot(f"boom-{name}")
    raise RuntimeError(f"{name} failed")


async def main():
    caught = []
    try:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(boom("a"))
    except* RuntimeError as group:
        caught.append([str(e) for e in group.exceptions])
    print("caught", caught[-1], flush=True)
    await snapshot("after-except-star")
    try:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(boom("b"))
    except ExceptionGroup as group:
        caught.append([str(e) for e in group.exceptions])
    print("caught", caught[-1], flush=True)
    await snapshot("after-except-group")
    try:
        async with asyncio.timeout(0.01):
            await asyncio.sleep(5)
    except TimeoutError:
        caught.append("timeout")
    await snapshot("after-timeout")
    print("end", caught, flush=True)
    return repr(caught)
