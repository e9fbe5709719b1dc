"""Broken: appends to a file outside a tracked handle, so the lines written between a
snapshot and a kill are written again by the resume (tests/test_crashtest.py)."""

from snapstate import snapshot


def main():
    for step in range(2):
        with open("journal.txt", "a") as journal:
            journal.write(f"step {step}\n")
        snapshot(f"step-{step}")
    print("journal written")
    return 2
