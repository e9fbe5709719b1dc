"""Default task names (Task-N, from asyncio's process-wide counter) of tasks created
before and after a snapshot: a resumed run names new tasks as the uninterrupted run
does (not Task-1 again, the restored main task's name)."""

import asyncio

from snapstate import snapshot


async def child(n):
    await snapshot(f"child-{n}")
    return asyncio.current_task().get_name()


async def main():
    first = asyncio.create_task(child(1))
    await snapshot("first")
    print("main", asyncio.current_task().get_name(), "first", await first, flush=True)
    second = asyncio.create_task(child(2))
    print("second", second.get_name(), flush=True)
    await second
    third = asyncio.create_task(child(3))
    print("third", await third, flush=True)
    return repr([first.get_name(), second.get_name(), third.get_name()])
