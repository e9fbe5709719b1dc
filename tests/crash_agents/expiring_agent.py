"""Correct: requests an approval that expires after 5 s (tests/test_crashtest_adversarial.py),
then works 3 s in real time. A trial decides the approval long after the uninterrupted
run requested its own: the request time must be the trial's, not the one the first run
recorded, or the approval would have expired."""

import time

from snapstate import request_approval, snapshot


def main():
    snapshot("start")
    request_approval("publish", {"post": 1}, expires_in=5)
    print("approved")
    time.sleep(3)
    return "published"
