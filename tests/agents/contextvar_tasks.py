"""Greenlet tasks' context variables across snapshots: main and a spawned task each set
their own value of one module-level ContextVar and of an instance-level one; the task
snapshots while it holds them, main snapshots after joining; each reads its own values
after every snapshot."""

import contextvars

from snapstate import gather, snapshot, spawn

USER = contextvars.ContextVar("user", default="nobody")


class Trace:
    def __init__(self):
        self.span = contextvars.ContextVar("span", default="-")


TRACE = Trace()


def worker(name):
    USER.set(f"{name}-user")
    TRACE.span.set(f"{name}-span")
    snapshot("in the task")
    print("task", USER.get(), TRACE.span.get(), flush=True)
    return USER.get()


def main():
    USER.set("main-user")
    TRACE.span.set("main-span")
    task = spawn(worker, "w")
    [got] = gather(task)
    print("main", USER.get(), TRACE.span.get(), got, flush=True)
    snapshot("after the task")
    print("main again", USER.get(), TRACE.span.get(), flush=True)
    return got
