"""Broken, and only in its return value: it counts its attempts in a file it deletes at
its end, so a step re-executed after a kill returns another count, while stdout and the
files left are the same. The value's repr takes two lines; the count is on the second
(tests/test_crashtest_adversarial.py)."""

import os

from snapstate import snapshot


class Report:
    def __init__(self, attempts):
        self.attempts = attempts

    def __repr__(self):
        return f"Report\n  attempts: {self.attempts}"


def main():
    snapshot("start")
    attempts = int(open("attempts").read()) if os.path.exists("attempts") else 0
    with open("attempts", "w") as f:
        f.write(str(attempts + 1))
    snapshot("counted")
    os.remove("attempts")
    return Report(attempts)
