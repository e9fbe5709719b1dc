"""Broken: an effect whose lookup= never finds what the provider did, so after a kill
between its request and its recorded answer the resume sends it again: an ambiguous
effect that did not park (tests/test_crashtest.py)."""

import json
import os
import urllib.request

from snapstate import effect, snapshot


def find(idempotency_key):
    return None  # wrong: the provider offers no lookup, and this says "not done"


@effect(lookup=find)
def notify(action, *, idempotency_key):
    request = urllib.request.Request(
        os.environ["PROVIDER_URL"] + "/plain",
        data=json.dumps({"action": action}).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def main():
    sent = notify("hello")
    snapshot("notified")
    return sent["id"]
