"""asyncio.gather of three coroutines, each snapshotting at different points and a
different number of times (a task waits on an asyncio.Event another sets between its
snapshots, so the snapshots land at different sequence numbers; snapshots of tasks
reached together are one snapshot); then a gather with return_exceptions=True where
one child raises after a snapshot and another returns after one; asyncio.wait()
(FIRST_COMPLETED), as_completed() and shield() over tasks that snapshot; an
as_completed() iterator held across snapshots mid-iteration."""

import asyncio

from snapstate import snapshot


async def worker(name, count, wait_for, then_set):
    log = []
    if wait_for is not None:
        await wait_for.wait()
        print("worker", name, "woken", flush=True)
    for i in range(count):
        info = await snapshot(f"{name}-{i}")
        log.append(f"{name}{i}")
        print("worker", name, i, info.label, flush=True)
        if i == 0 and then_set is not None:
            then_set.set()
        await asyncio.sleep(0)
    return name, log


async def flaky(name, fail):
    value = len(name)
    await snapshot(f"flaky-{name}")
    print("flaky after snapshot", name, flush=True)
    if fail:
        raise LookupError(f"{name} failed with {value}")
    return value * 2


async def released(event, n):
    await event.wait()
    return n


async def completion_order():
    """An as_completed() iterator held across snapshots, mid-iteration."""
    events = [asyncio.Event() for _ in range(3)]
    tasks = [asyncio.create_task(released(events[i], i)) for i in range(3)]
    events[2].set()
    order = []
    for next_done in asyncio.as_completed(tasks):
        order.append(await next_done)
        await snapshot(f"as-completed-{len(order)}")
        print("completed", order[-1], flush=True)
        if len(order) < 3:
            events[len(order) - 1].set()
    return order


async def main():
    a_done, b_done = asyncio.Event(), asyncio.Event()
    results = await asyncio.gather(
        worker("a", 1, None, a_done),
        worker("b", 3, a_done, b_done),
        worker("c", 2, b_done, None),
    )
    print("gather 1", results, flush=True)
    mixed = await asyncio.gather(
        flaky("x", False), flaky("yy", True), worker("d", 1, None, None), return_exceptions=True
    )
    shown = [type(r).__name__ + ":" + str(r) if isinstance(r, BaseException) else r for r in mixed]
    print("gather 2", shown, flush=True)
    racers = [asyncio.create_task(worker(f"r{i}", i + 1, None, None)) for i in range(3)]
    done, pending = await asyncio.wait(racers, return_when=asyncio.FIRST_COMPLETED)
    print("first done", [t.result()[0] for t in done], len(pending), flush=True)
    rest = [(await fut)[0] for fut in asyncio.as_completed(pending)]
    print("as_completed", rest, flush=True)
    order = await completion_order()
    shielded = await asyncio.shield(flaky("shielded", False))
    print("shield", shielded, flush=True)
    last = await snapshot("end")
    print("end", last.label, flush=True)
    return repr((results, shown, rest, order, shielded))
