"""Coroutines and async generators for tests/test_async_engine.py's in-process
round trips (the pickler saves their code by reference to this module)."""

from __future__ import annotations

import contextlib


class Gate:
    """A bare awaitable standing for an await point: the first send pauses, the
    second returns what it was sent."""

    def __init__(self):
        self.sent = 0

    def __await__(self):
        return self

    def __next__(self):
        return self.send(None)

    def send(self, value):
        self.sent += 1
        if self.sent == 1:
            return None
        raise StopIteration(("gate", value))

    def throw(self, typ, val=None, tb=None):
        raise typ if isinstance(typ, BaseException) else typ()


class Log:
    def __init__(self):
        self.lines = []


async def innermost(gate, log, n):
    try:
        got = await gate
        log.lines.append(f"innermost got {got}")
        return n * 2
    finally:
        log.lines.append("innermost finally")


async def middle(gate, log):
    acc = []
    for i in range(2):
        if i == 0:
            acc.append(await innermost(gate, log, 21))
        else:
            acc.append(i)
    return acc


class Ctx:
    def __init__(self, log):
        self.log = log

    async def __aenter__(self):
        self.log.lines.append("enter")
        return self

    async def __aexit__(self, *exc):
        self.log.lines.append(f"exit {exc[0].__name__ if exc[0] else None}")
        return False


async def outer(gate, log):
    async with Ctx(log):
        try:
            result = await middle(gate, log)
            raise KeyError(result[0])
        except KeyError as exc:
            log.lines.append(f"caught {exc}")
            return result


async def numbers(log, limit):
    try:
        for i in range(limit):
            yield i
    finally:
        log.lines.append("numbers finally")


@contextlib.asynccontextmanager
async def managed(log):
    log.lines.append("managed in")
    try:
        yield "resource"
    finally:
        log.lines.append("managed out")


async def inside_await(gate):
    yield await gate


async def closing_await(gate):
    try:
        yield 1
    finally:
        await gate


def fail(key):
    raise KeyError(key)


def caught(key):
    try:
        fail(key)
    except KeyError as exc:
        return exc
