"""As tests/agents/life_store.py in mode "snapshot", except that snapshot 2 holds a
300 KB incompressible blob: it adds more than 64 KiB of chunks, so it writes a pack
file before its catalog commit (the store breaks under that write). Snapshot 1, then
wait for `go` in the directory argument, then snapshot 2; a `finally` block logs to
`finally`: it must never run when the store fails under the agent."""

import os
import random
import sys
import time

from snapstate import snapshot


def main():
    where = sys.argv[1]
    print("first", flush=True)
    snapshot("one")
    open(os.path.join(where, "ready"), "w").close()
    while not os.path.exists(os.path.join(where, "go")):
        time.sleep(0.02)
    try:
        blob = random.Random(2).randbytes(300_000)
        snapshot("two")
        value = len(blob) - 300_000
        print(f"second {value}", flush=True)
    finally:
        with open(os.path.join(where, "finally"), "a") as f:
            f.write("finally\n")
    return value
