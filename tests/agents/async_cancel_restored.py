"""Cancelling, right after a resume, tasks and gathers that were frozen waiting: a task
awaiting a gather of two children (cancelling the task cancels the gather, which
cancels the children); an outer gather whose child awaits an inner gather; a frozen
task given to wait_for() that times out. Every child's except block runs, as in the
uninterrupted run."""

import asyncio

from snapstate import snapshot


async def child(name, event, log):
    try:
        await event.wait()
        return name
    except asyncio.CancelledError:
        log.append(f"{name} cancelled")
        raise


async def pair(prefix, event, log):
    return await asyncio.gather(child(f"{prefix}1", event, log), child(f"{prefix}2", event, log))


async def main():
    event, log = asyncio.Event(), []
    task = asyncio.create_task(pair("t", event, log))
    await snapshot("task-frozen")
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        print("task cancelled", task.cancelled(), sorted(log), flush=True)

    outer = asyncio.gather(pair("g", event, log), child("g3", event, log))
    await snapshot("gather-frozen")
    outer.cancel()
    try:
        await outer
    except asyncio.CancelledError:
        print("gather cancelled", sorted(log), flush=True)

    waited = asyncio.create_task(pair("w", event, log))
    await snapshot("wait-for-frozen")
    try:
        await asyncio.wait_for(waited, timeout=0.01)
    except TimeoutError:
        print("wait_for timed out", waited.cancelled(), sorted(log), flush=True)
    return repr(sorted(log))
