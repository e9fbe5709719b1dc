"""Correct with `snapstate`: prints snapstate.now(), random() and uuid4() (in main() and in
a spawned task), which differ from one run to another by design and are recorded, so a
resumed job prints what it printed before the kill. Broken with `python`: prints
Python's own uuid.uuid4(), which a restore re-executes with another value
(tests/test_crashtest_adversarial.py)."""

import sys
import uuid

from snapstate import gather, now, random, snapshot, spawn, uuid4


def worker(name):
    drawn = random()
    snapshot(f"{name}-drawn")
    print(name, drawn, uuid4())
    return drawn


def main():
    snapshot("start")
    print("started at", now().isoformat())
    print("order", uuid4() if sys.argv[1] == "snapstate" else uuid.uuid4())
    snapshot("ordered")
    return gather(spawn(worker, "a"))
