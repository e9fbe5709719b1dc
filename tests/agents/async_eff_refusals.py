"""Snapshots an async job cannot take (tests/test_async_effects.py). REFUSE selects
what another task is doing when main awaits snapshot("busy"):

    socket  reading from a TCP connection (asyncio.open_connection to SILENT_ADDR,
            host:port of a server that accepts and never answers)
    thread  running asyncio.to_thread(time.sleep, THREAD_SECONDS)
    timer   awaiting a future a call_later(60, ...) timer completes (an asyncio.sleep()
            is frozen with the job; a timer of another callback is not)

main takes snapshot 1 ("first") and places an order through an async keyed effect
(tests/providers.py at PROVIDER_URL), starts the busy task, awaits snapshot("busy")
(refused after SNAPSTATE_ASYNC_SETTLE seconds), prints the refusal and whether the busy
task was still running then, ends the busy task
and carries on: snapshot 2 ("after"), prints "done". UNCAUGHT=1 lets the refusal
propagate out of main. KILL_AFTER_REFUSAL=1 makes the process SIGKILL itself right
after the refusal is printed (on the first run only: a marker file in the working
directory says it did), so the job resumes from snapshot 1."""

import asyncio
import os
import signal
import time

import httpx

from snapstate import SnapshotError, effect, snapshot

URL = os.environ.get("PROVIDER_URL", "")


@effect(idempotency="key")
async def order(action, amount, *, idempotency_key):
    async with httpx.AsyncClient(base_url=URL, timeout=10) as client:
        response = await client.post(
            "/keyed",
            json={"action": action, "amount": amount},
            headers={"Idempotency-Key": idempotency_key},
        )
        return response.json()


async def read_silent(host, port):
    reader, writer = await asyncio.open_connection(host, port)
    try:
        return await reader.read(1)
    finally:
        writer.close()


async def sleep_in_thread(seconds):
    await asyncio.to_thread(time.sleep, seconds)
    return "thread done"


async def wait_timer():
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    handle = loop.call_later(60, fut.set_result, None)  # a timer of the agent's callback
    try:
        await fut
    finally:
        handle.cancel()


async def busy(kind):
    if kind == "socket":
        host, port = os.environ["SILENT_ADDR"].split(":")
        return await read_silent(host, int(port))
    if kind == "thread":
        return await sleep_in_thread(float(os.environ.get("THREAD_SECONDS", "5")))
    return await wait_timer()


async def main():
    kind = os.environ["REFUSE"]
    await snapshot("first")
    po = await order("before", 1)
    print("placed", po["id"], flush=True)
    task = asyncio.create_task(busy(kind), name=f"busy-{kind}")
    await asyncio.sleep(0)  # the task starts its I/O
    if os.environ.get("UNCAUGHT"):
        await snapshot("busy")
    try:
        await snapshot("busy")
        print("snapshot taken?!", flush=True)
    except SnapshotError as exc:
        print("refused:", exc, flush=True)
        print("busy task still running:", not task.done(), flush=True)
    if os.environ.get("KILL_AFTER_REFUSAL") and not os.path.exists("killed.marker"):
        open("killed.marker", "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "thread":
        print("busy:", await task, flush=True)
    else:
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            print("busy: cancelled", flush=True)
    info = await snapshot("after")
    print("snapshot", info.seq, flush=True)
    po = await order("after", 2)
    print("placed", po["id"], flush=True)
    print("done", flush=True)
    return "done"
