"""Broken: reads the clock without snapstate.now() (tests/test_crashtest.py)."""

import time

from snapstate import snapshot


def main():
    started = time.time()
    snapshot("started")
    print("started at", repr(started))
    return "ok"
