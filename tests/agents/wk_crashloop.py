"""An agent that dies right after each snapshot it writes (issue 21's crash loop):
each run resumes after the latest snapshot, takes one more step, snapshots and is
SIGKILLed as soon as snapshot() returns; a restored snapshot() returns normally. With
argv[1] == "two" it writes two snapshots per run before it dies (progress). Prints the
step each run reached."""

import os
import signal
import sys

from snapstate import snapshot


def main():
    per_run = 2 if sys.argv[1:] == ["two"] else 1
    written = 0
    for step in range(1, 1000):
        record = snapshot(f"step {step}")
        if record.resumed:  # a new run: it counts its own snapshots
            written = 0
            continue
        written += 1
        print("step", step, flush=True)
        if written >= per_run:
            os.kill(os.getpid(), signal.SIGKILL)
    return "done"
