"""One order through an endpoint that fails transiently (/flaky answers 503 to its
first requests), with Retry(attempts=4). FX_RETRY=keyed (default): the effect sends an
idempotency key, so retries are safe and reuse it; FX_RETRY=plain: no key, no lookup,
a write: the Retry policy must not repeat it."""

import os

from fx_http import post

from snapstate import Retry, effect, snapshot

POLICY = Retry(attempts=4, backoff=0.01)


@effect(idempotency="key", retry=POLICY)
def order_keyed(action, *, idempotency_key):
    return post("/flaky", {"action": action, "amount": 1}, idempotency_key)


@effect(retry=POLICY)
def order_plain(action):
    return post("/flaky", {"action": action, "amount": 1})


def main():
    snapshot("start")
    place = order_keyed if os.environ.get("FX_RETRY", "keyed") == "keyed" else order_plain
    po = place("retry-1")
    print("ordered", po["id"], flush=True)
    snapshot("ordered")
    return po["id"]
