"""A job that stops at a gate: snapshot 1; then, in whichever process runs it, create
the file waiting-<pid> in the directory $LEASE_GATE, wait for the file `go` there,
take snapshot 2 and return [1, 2, whether it was resumed from snapshot 1]."""

import os
import time

from snapstate import snapshot


def main():
    first = snapshot("before-gate")
    gate = os.environ["LEASE_GATE"]
    with open(os.path.join(gate, f"waiting-{os.getpid()}"), "w"):
        pass
    deadline = time.monotonic() + 120
    while not os.path.exists(os.path.join(gate, "go")):
        if time.monotonic() > deadline:
            raise TimeoutError(f"nobody opened the gate {gate}")
        time.sleep(0.002)
    second = snapshot("after-gate")
    return [first.seq, second.seq, first.resumed]
