"""An agent for tests/test_debug_sandbox.py that hibernates at an approval after
snapshot 1: its latest snapshot (2) is taken at the wait."""

from snapstate import request_approval, snapshot


def main():
    plan = ["buy", 3]
    snapshot("planned")
    granted = request_approval("purchase", scope={"n": 3})  # WAITS HERE
    print("approved by", granted.by, flush=True)
    return plan
