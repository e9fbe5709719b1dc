"""An async job's context variables across snapshots: the main task and a task made
with asyncio.create_task each set a ContextVar global of the agent's module and an
instance-level ContextVar (one variable object shared by both tasks and the session
object); the task has set its values and waits when the main task snapshots, and reads
them after the snapshot. Each task sees its own values (the task's context is a copy
of main's at create_task)."""

import asyncio
import contextvars

from snapstate import snapshot

USER = contextvars.ContextVar("user", default="anon")


class Session:
    def __init__(self):
        self.trace = contextvars.ContextVar("trace")


async def worker(session, ready, go):
    inherited = USER.get()
    USER.set("worker-user")
    session.trace.set("worker-trace")
    ready.set()
    await go.wait()
    return f"inherited={inherited} user={USER.get()} trace={session.trace.get('<unset>')}"


async def main():
    session = Session()
    USER.set("main-user")
    session.trace.set("main-trace")
    ready, go = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(worker(session, ready, go))
    await ready.wait()
    await snapshot("x")
    print("main", USER.get(), session.trace.get("<unset>"), flush=True)
    go.set()
    print("task", await task, flush=True)
    USER.set("main-again")
    await snapshot("y")
    print("main", USER.get(), session.trace.get("<unset>"), flush=True)
    return USER.get()
