"""One order through a lookup effect (the provider keeps no keys, but an order can be
found by its reference) to /flaky-lookup, which answers 503 to its first requests. No
Retry: a 503 fails the job, and resuming the job dispatches the failed effect again."""

import json
import os
import urllib.error
import urllib.request

from fx_http import post

from snapstate import effect, snapshot


def find(idempotency_key):
    try:
        with urllib.request.urlopen(
            f"{os.environ['PROVIDER_URL']}/lookup/{idempotency_key}", timeout=10
        ) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        exc.close()
        if exc.code == 404:
            return None
        raise


@effect(lookup=find)
def order(action, *, idempotency_key):
    return post("/flaky-lookup", {"action": action, "amount": 1, "ref": idempotency_key})


def main():
    snapshot("start")
    po = order("recover-1")
    print("ordered", po["id"], flush=True)
    snapshot("ordered")
    return po["id"]
