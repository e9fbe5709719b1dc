"""Tasks outside groups and the asyncio primitives tasks wait on: create_task() and
the task awaited later; a done task held in a local across a snapshot (its result()
read after); named tasks (current_task().get_name() survives); an asyncio.Queue with a
producer that snapshots while the consumer waits in queue.get(); a bounded queue's
putter waiting in put() at a snapshot; an asyncio.Event set after a snapshot, waking
two tasks frozen in event.wait(); an asyncio.Lock (and a Semaphore(2) among three
tasks) held across a snapshot while another task waits for it; a Future completed by
another task; a task frozen inside a custom awaitable whose __await__ is a generator."""

import asyncio

from snapstate import snapshot


async def compute(name, x):
    me = asyncio.current_task().get_name()
    await snapshot(f"compute-{name}")
    print("compute", name, "in task", me, asyncio.current_task().get_name(), flush=True)
    return x * x


class Ticket:
    """An awaitable whose __await__ is a generator (yield from a future's __await__)."""

    def __init__(self, future):
        self.future = future
        self.awaits = 0

    def __await__(self):
        self.awaits += 1
        value = yield from self.future.__await__()
        return value, self.awaits


async def holder(ticket):
    got = await ticket
    print("holder got", got, flush=True)
    return got


async def producer(queue, items):
    for i, item in enumerate(items):
        await queue.put(item)
        info = await snapshot(f"produced-{i}")
        print("produced", item, info.label, flush=True)
    await queue.put(None)


async def consumer(queue, name):
    got = []
    while True:
        item = await queue.get()
        queue.task_done()
        if item is None:
            break
        got.append(item)
        print("consumed", name, item, flush=True)
    return got


async def on_event(event, name, record):
    await event.wait()
    record.append(name)
    print("event seen by", name, asyncio.current_task().get_name(), flush=True)
    return name


async def locker(lock, name, log):
    async with lock:
        log.append(f"{name}+")
        await snapshot(f"holding-{name}")
        log.append(f"{name}-")
    print("lock released by", name, flush=True)


async def putter(queue, items):
    for item in items:
        await queue.put(item)
    return "put all"


async def fulfil(future, value):
    await snapshot("before-fulfil")
    future.set_result(value)


async def main():
    later = asyncio.create_task(compute("later", 7), name="later-task")
    quick = asyncio.create_task(asyncio.sleep(0, result="early"), name="quick-task")
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    print("quick done before snapshot", quick.done(), flush=True)
    info = await snapshot("tasks-started")
    print("after", info.label, "quick result", quick.result(), quick.get_name(), flush=True)
    print("later", await later, later.get_name(), flush=True)

    queue = asyncio.Queue()
    cons = asyncio.create_task(consumer(queue, "c1"), name="consumer")
    await producer(queue, ["x", "y", "z"])
    print("consumer got", await cons, flush=True)

    bounded = asyncio.Queue(maxsize=1)
    filler = asyncio.create_task(putter(bounded, [1, 2, 3]), name="putter")
    await asyncio.sleep(0)
    await snapshot("queue-full")  # the putter waits in put() on a full queue
    drained = [await bounded.get() for _ in range(3)]
    print("drained", drained, await filler, flush=True)

    event = asyncio.Event()
    record = []
    watchers = [
        asyncio.create_task(on_event(event, f"w{i}", record), name=f"watcher-{i}") for i in range(2)
    ]
    paid = asyncio.get_running_loop().create_future()
    ticket_task = asyncio.create_task(holder(Ticket(paid)), name="ticket")
    await asyncio.sleep(0)
    await snapshot("watchers-waiting")
    event.set()
    print("watchers", await asyncio.gather(*watchers), record, flush=True)
    paid.set_result("paid")
    print("ticket", await ticket_task, flush=True)

    lock = asyncio.Lock()
    log = []
    await asyncio.gather(locker(lock, "l1", log), locker(lock, "l2", log))
    sem = asyncio.Semaphore(2)
    await asyncio.gather(*(locker(sem, f"s{i}", log) for i in range(3)))
    print("lock log", log, lock.locked(), flush=True)

    future = asyncio.get_running_loop().create_future()
    helper = asyncio.create_task(fulfil(future, {"v": 1}), name="fulfiller")
    value = await future
    await helper
    print("future", value, flush=True)

    print("main task", asyncio.current_task().get_name(), flush=True)
    return repr((quick.result(), record, log, value))
