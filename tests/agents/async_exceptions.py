"""Exceptions in flight at a snapshot in coroutines: a snapshot in a finally block
while an exception propagates through it (re-raised after the resume); a snapshot in
an except block, then sys.exception() and a bare `raise` after the resume; a new
exception raised in an except block after the resume, chained to the handled one."""

import sys

from snapstate import snapshot


async def cleanup_in_finally():
    try:
        raise ValueError("propagating")
    finally:
        await snapshot("in-finally-with-exception")
        print("finally ran", flush=True)


async def reraise():
    try:
        raise KeyError("handled")
    except KeyError:
        await snapshot("in-except")
        print("sys.exception", repr(sys.exception()), flush=True)
        raise


async def main():
    seen = []
    try:
        await cleanup_in_finally()
    except ValueError as exc:
        seen.append(repr(exc))
        print("caught", exc, flush=True)
    try:
        await reraise()
    except KeyError as exc:
        seen.append(repr(exc))
        print("caught again", repr(exc), exc.__context__, flush=True)
    try:
        try:
            1 / 0
        except ZeroDivisionError:
            await snapshot("chained")
            raise RuntimeError("chained")  # noqa: B904 (implicit chaining is the point)
    except RuntimeError as exc:
        seen.append(repr(exc.__context__))
        print("context", repr(exc.__context__), flush=True)
    print("outside any handler", sys.exception(), flush=True)
    return repr(seen)
