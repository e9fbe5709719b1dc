"""Misuses in an async agent, each refused with a message that names the fix."""

import sys

from snapstate import SnapshotError, snapshot, spawn


def helper():
    return snapshot("from a plain function")


def work():
    return 1


async def main():
    what = sys.argv[1]
    if what == "plain-snapshot":
        try:
            helper()
        except SnapshotError as exc:
            print("refused:", exc, flush=True)
    elif what == "spawn":
        try:
            spawn(work)
        except TypeError as exc:
            print("refused:", exc, flush=True)
    info = await snapshot("after")
    print("seq", info.seq, flush=True)
    return "ok"
