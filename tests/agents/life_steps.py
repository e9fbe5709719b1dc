"""Three steps with a snapshot after each; after snapshot 1 it waits for a `go` file in
its directory argument (the test sends SIGTERM meanwhile). A `finally` block logs to
`finally` there: it must run once, at the real end, never at a SIGTERM."""

import os
import sys
import time

from snapstate import snapshot


def main():
    where = sys.argv[1]
    total = 0
    try:
        for i in range(1, 4):
            total += i * 10
            print(f"step {i} total {total}", flush=True)
            snapshot(f"step {i}")
            if i == 1:
                open(os.path.join(where, "ready"), "w").close()
                while not os.path.exists(os.path.join(where, "go")):
                    time.sleep(0.02)
    finally:
        with open(os.path.join(where, "finally"), "a") as f:
            f.write("finally\n")
    return total
