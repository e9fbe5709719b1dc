"""A correct agent: two orders through a provider that honours idempotency keys, a
snapshot after each, an output line per order (tests/test_crashtest.py)."""

import json
import os
import urllib.request

from snapstate import effect, snapshot


def _post(path, body, headers):
    request = urllib.request.Request(
        os.environ["PROVIDER_URL"] + path,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", **headers},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


@effect(idempotency="key")
def order(action, *, idempotency_key):
    return _post("/keyed", {"action": action}, {"Idempotency-Key": idempotency_key})


def main():
    ids = []
    for action in ("paper", "ink"):
        placed = order(action)
        ids.append(placed["id"])
        print("ordered", action, placed["id"])
        snapshot(f"ordered-{action}")
    print("done", len(ids))
    return ids
