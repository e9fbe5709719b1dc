"""Snapshot points the engine must refuse. Each refusal is caught by the agent, which
prints it and carries on; a good snapshot before and after proves the job continues."""

import functools
import os
import socket
import threading

from snapstate import SnapshotError, snapshot


def attempt(case):
    try:
        snapshot(case)
    except SnapshotError as exc:
        print(f"REFUSED {case}: {exc}", flush=True)
        return False
    print(f"TAKEN {case}", flush=True)
    return True


class Counter:
    def __init__(self):
        self.n = 0

    def __iter__(self):
        return self

    def __next__(self):
        self.n += 1
        if self.n > 1:
            raise StopIteration
        attempt("next")
        return self.n


def produce():
    attempt("generator-body")
    yield 1


async def coroutine_body():
    attempt("coroutine-body")
    return 1


class Holder:
    def __init__(self, conn):
        self.conn = conn


LOCK_AT_MODULE_LEVEL = None


def main():
    snapshot("good-before")
    print("sorted", sorted([1], key=lambda v: attempt("sorted-key") and v), flush=True)
    print("map", list(map(lambda v: attempt("map") and v, [1])), flush=True)
    print("partial", functools.partial(attempt, "partial")(), flush=True)
    seen = []
    for x in Counter():
        seen.append(x)
    print("next", seen, flush=True)
    print("generator", list(produce()), flush=True)
    coro = coroutine_body()
    try:
        coro.send(None)
    except StopIteration as stop:
        print("coroutine", stop.value, flush=True)

    lock = threading.Lock()
    lock.acquire()  # an unheld lock is saved; a held one is refused
    attempt("lock-local")
    lock.release()
    del lock

    holder = {"client": Holder(socket.socket())}
    attempt("nested-socket")
    holder["client"].conn.close()
    del holder

    with os.fdopen(os.open(__file__, os.O_RDONLY)) as source:
        attempt("fd-file")

    namespace = {"attempt": attempt}
    exec("def from_exec():\n    return attempt('exec-code')\n", namespace)
    print("exec", namespace["from_exec"](), flush=True)
    del namespace

    global LOCK_AT_MODULE_LEVEL
    LOCK_AT_MODULE_LEVEL = threading.RLock()
    with LOCK_AT_MODULE_LEVEL:
        attempt("global-lock")
    LOCK_AT_MODULE_LEVEL = None

    snapshot("good-after")
    print("carried on", flush=True)
    return "survived"
