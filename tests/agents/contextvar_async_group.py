"""An async job whose main task sets a ContextVar, then waits in a TaskGroup for a child
that snapshots: the group's done-callback on the child was added in a context holding
that value, and every task reads its value after the restore."""

import asyncio
import contextvars

from snapstate import snapshot

USER = contextvars.ContextVar("user", default="anon")


async def child(n):
    await snapshot(f"in child {n}")
    return f"{n}:{USER.get()}"


async def main():
    USER.set("alice")
    async with asyncio.TaskGroup() as tg:
        first = tg.create_task(child(1))
        second = tg.create_task(child(2))
    print("after", USER.get(), first.result(), second.result(), flush=True)
    return USER.get()
