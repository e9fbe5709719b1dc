"""Broken: a plain effect (no idempotency key, no lookup) whose provider cannot be
queried. A kill after its request leaves its outcome unknown; the resume re-executes
the branch that sends it (tests/test_crashtest.py)."""

import json
import os
import urllib.request

from snapstate import effect, snapshot


@effect
def notify(action):
    request = urllib.request.Request(
        os.environ["PROVIDER_URL"] + "/plain",
        data=json.dumps({"action": action}).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def main():
    snapshot("start")
    sent = notify("hello")
    print("notified", sent["id"])
    snapshot("notified")
    return sent["id"]
