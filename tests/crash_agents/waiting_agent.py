"""A correct agent that waits: an approval, then an hour's timer (tests/test_crashtest.py:
crashtest decides the approval and fast-forwards the timer)."""

from snapstate import request_approval, sleep, snapshot


def main():
    snapshot("start")
    grant = request_approval("publish", scope={"post": 1})
    print("approved by", grant.by if hasattr(grant, "by") else "someone")
    sleep(3600)
    print("an hour later")
    return "published"
