"""asyncio.TaskGroup with three tasks that snapshot; a nested TaskGroup inside one of
them; a task spawning its own subtask (create_task) and awaiting it; results collected
after the groups end; then a group where one task raises after a resume, cancelling
its frozen siblings (their except and finally blocks run), caught with except*."""

import asyncio

from snapstate import snapshot


async def step(name, times):
    done = []
    for i in range(times):
        info = await snapshot(f"{name}-{i}")
        done.append(info.label)
        print("step", name, i, flush=True)
    return f"{name}:{len(done)}"


async def with_nested_group(name):
    await snapshot(f"{name}-outer")
    async with asyncio.TaskGroup() as inner:
        a = inner.create_task(step(f"{name}.a", 2))
        b = inner.create_task(step(f"{name}.b", 1))
    print("nested group done", name, flush=True)
    return [a.result(), b.result()]


async def spawner(name):
    child = asyncio.create_task(step(f"{name}.child", 2))
    mine = await step(name, 1)
    got = await child
    print("spawner", name, mine, got, flush=True)
    return mine, got


async def group_in_gather(name):
    async with asyncio.TaskGroup() as tg:
        tasks = [tg.create_task(step(f"{name}.{i}", i + 1)) for i in range(2)]
    return [t.result() for t in tasks]


async def at_barrier(barrier, name):
    await snapshot(f"barrier-{name}")
    await barrier.wait()
    return name


async def gather_in_group(name):
    return await asyncio.gather(step(f"{name}.x", 1), group_in_gather(f"{name}.g"))


async def victim(name, gate, log):
    # TaskGroup cancels its tasks in the order of a set (of tasks, hashed by address):
    # arbitrary in any run, so the victims log and main prints the log sorted.
    try:
        await gate.wait()
        return "never"
    except asyncio.CancelledError:
        log.append(f"cancelled {name}")
        raise
    finally:
        log.append(f"finally {name}")


async def breaker(gate):
    await snapshot("breaker")
    await asyncio.sleep(0)
    raise RuntimeError("breaker failed after the snapshot")


async def main():
    async with asyncio.TaskGroup() as tg:
        t1 = tg.create_task(step("t1", 1))
        t2 = tg.create_task(with_nested_group("t2"))
        t3 = tg.create_task(spawner("t3"))
        print("group started", flush=True)
        await snapshot("in-group-body")  # main too, with the group's tasks
        print("group body after snapshot", flush=True)
    collected = [t1.result(), t2.result(), t3.result()]
    print("collected", collected, flush=True)

    barrier = asyncio.Barrier(2)
    mixed = await asyncio.gather(
        group_in_gather("g"), at_barrier(barrier, "p"), at_barrier(barrier, "q")
    )
    async with asyncio.TaskGroup() as tg:
        outer = tg.create_task(gather_in_group("o"))
        async with asyncio.TaskGroup() as tg2:
            inner = tg2.create_task(step("inner", 2))
            await snapshot("main-in-nested-groups")
    mixed += [outer.result(), inner.result()]
    print("mixed", mixed, flush=True)

    gate = asyncio.Event()
    caught, log = [], []
    try:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(victim("v1", gate, log))
            tg.create_task(victim("v2", gate, log))
            tg.create_task(breaker(gate))
    except* RuntimeError as group:
        caught = [str(e) for e in group.exceptions]
    print("caught", caught, sorted(log), flush=True)
    # No snapshot after a failed group here: see async_taskgroup_errors.py.
    return repr((collected, mixed, caught, sorted(log)))
