"""Timeouts and cancellation that happen after a resume: asyncio.timeout() around a
sleep that times out (TimeoutError caught) and one that does not; asyncio.wait_for()
timing out and succeeding; a task awaiting asyncio.sleep(10) cancelled (its except
and finally print); a task frozen while waiting on an asyncio.Event, cancelled after
the resume; an Event waited for with wait_for() that times out after the resume; an
asyncio.timeout(None) entered before a snapshot, rescheduled after the resume, firing."""

import asyncio

from snapstate import snapshot


async def sleeper(name, seconds):
    print("sleeper start", name, flush=True)
    try:
        await asyncio.sleep(seconds)
        print("sleeper woke", name, flush=True)  # never: it is cancelled first
        return "slept"
    except asyncio.CancelledError:
        print("sleeper cancelled", name, flush=True)
        raise
    finally:
        print("sleeper finally", name, flush=True)


async def waiter(event, name):
    state = {"name": name, "phase": "waiting"}
    try:
        await event.wait()
        state["phase"] = "set"
        return state
    finally:
        print("waiter finally", name, state, flush=True)


async def quick(value):
    await asyncio.sleep(0)
    return value * 2


async def main():
    never = asyncio.Event()
    frozen = asyncio.create_task(waiter(never, "frozen"), name="frozen-waiter")
    await asyncio.sleep(0)  # the waiter starts and blocks on the event
    info = await snapshot("start")
    print("after", info.label, flush=True)

    outcomes = []
    try:
        async with asyncio.timeout(0.01):
            await asyncio.sleep(5)
        outcomes.append("no timeout?")
    except TimeoutError:
        outcomes.append("timeout fired")
    async with asyncio.timeout(5) as cm:
        value = await quick(21)
    outcomes.append(("in time", value, cm.expired()))
    print("timeouts", outcomes, flush=True)

    await snapshot("after-timeouts")
    try:
        await asyncio.wait_for(asyncio.sleep(5), timeout=0.01)
    except TimeoutError:
        outcomes.append("wait_for timed out")
    outcomes.append(("wait_for", await asyncio.wait_for(quick(4), timeout=5)))
    try:
        await asyncio.wait_for(never.wait(), timeout=0.01)
    except TimeoutError:
        outcomes.append("event wait timed out")
    print("wait_for", outcomes[2:], flush=True)

    await snapshot("before-cancel")
    task = asyncio.create_task(sleeper("s1", 10))
    await asyncio.sleep(0)
    task.cancel("stop now")
    try:
        await task
    except asyncio.CancelledError as exc:
        outcomes.append(("cancelled", task.cancelled(), exc.args))
    print("cancel", outcomes[-1], flush=True)

    await snapshot("before-cancel-frozen")
    print("frozen task done?", frozen.done(), frozen.get_name(), flush=True)
    frozen.cancel()
    try:
        await frozen
    except asyncio.CancelledError:
        outcomes.append(("frozen cancelled", frozen.cancelled()))
    print("frozen", outcomes[-1], flush=True)

    try:
        async with asyncio.timeout(None) as deadline:  # no timer: frozen with the task
            await snapshot("in-timeout-none")
            deadline.reschedule(asyncio.get_running_loop().time() + 0.01)
            try:
                await asyncio.sleep(5)
            except asyncio.CancelledError:
                print("cancelled by the rescheduled timeout", flush=True)
                raise
    except TimeoutError:
        outcomes.append(("rescheduled timeout", deadline.expired()))
    print("rescheduled", outcomes[-1], flush=True)

    current = asyncio.current_task()
    print("uncancel count", current.cancelling(), flush=True)
    last = await snapshot("end")
    print("end", last.label, flush=True)
    return repr(outcomes)
