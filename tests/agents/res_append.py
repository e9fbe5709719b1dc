"""Appends to a file across many snapshots; KILL_AFTER_WRITE=k makes the process
SIGKILL itself right after writing the line that follows snapshot k (a crash between
snapshots, after the file moved on)."""

import os
import signal

from snapstate import snapshot

STEPS = int(os.environ.get("STEPS", "100"))


def main():
    journal = open("journal.txt", "a", encoding="utf-8")
    blob = open("blob.bin", "wb")
    for i in range(1, STEPS + 1):
        journal.write(f"step {i}: {'x' * (i % 7)}\n")
        blob.write(bytes([i % 256]) * (i % 5 + 1))
        snapshot(f"step-{i}")
        journal.write(f"after {i}\n")
        if i == int(os.environ.get("KILL_AFTER_WRITE", "0")):  # read now: restored locals
            # keep the values of the run that took the snapshot
            journal.flush()
            os.kill(os.getpid(), signal.SIGKILL)
    journal.close()
    blob.close()
    return STEPS
