"""Snapshot 1, then wait for `go` in the directory argument (the test breaks the store
meanwhile), then take snapshot 2 (mode "snapshot"), record an effect (mode "effect")
or just return (mode "return").
Deliveries of the effect are appended to `deliveries`; a `finally` block logs to
`finally`: it must never run when the store fails under the agent."""

import os
import sys
import time

from snapstate import effect, snapshot


@effect
def deliver(where, n):
    with open(os.path.join(where, "deliveries"), "a") as f:
        f.write(f"{n}\n")
    return n * 100


def main():
    where, mode = sys.argv[1], sys.argv[2]
    print("first", flush=True)
    snapshot("one")
    open(os.path.join(where, "ready"), "w").close()
    while not os.path.exists(os.path.join(where, "go")):
        time.sleep(0.02)
    try:
        if mode == "snapshot":
            snapshot("two")
        value = deliver(where, 7) if mode == "effect" else 0
        print(f"second {value}", flush=True)
    finally:
        with open(os.path.join(where, "finally"), "a") as f:
            f.write("finally\n")
    return value
