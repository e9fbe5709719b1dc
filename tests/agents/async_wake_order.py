"""Tasks frozen waiting (on Events, a Queue) wake after a resume in the order their
waits end, as in the uninterrupted run: the events are set, and the queue filled, in
the reverse of the order the tasks were created in."""

import asyncio

from snapstate import snapshot


async def waiter(name, event, log):
    await event.wait()
    log.append(name)
    print("woke", name, flush=True)


async def getter(name, queue, log):
    item = await queue.get()
    log.append(f"{name}:{item}")
    print("got", name, item, flush=True)


async def main():
    log = []
    events = [asyncio.Event() for _ in range(3)]
    waiters = [asyncio.create_task(waiter(f"w{i}", events[i], log)) for i in range(3)]
    await asyncio.sleep(0)
    await snapshot("waiters-frozen")
    for event in reversed(events):
        event.set()
    await asyncio.gather(*waiters)

    queues = [asyncio.Queue() for _ in range(2)]
    getters = [asyncio.create_task(getter(f"g{i}", queues[i], log)) for i in range(2)]
    await asyncio.sleep(0)
    await snapshot("getters-frozen")
    queues[1].put_nowait("late")
    queues[0].put_nowait("early")
    await asyncio.gather(*getters)
    print("log", log, flush=True)
    return repr(log)
