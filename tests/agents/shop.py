"""An agent that places orders with a provider through the effect ledger, with a
snapshot between orders. PROVIDER_URL and PROVIDER_MODE (keyed | lookup | plain)
come from the environment; ORDERS (default 3) orders are placed."""

import json
import os
import urllib.error
import urllib.request

import snapstate
from snapstate import effect, snapshot

URL = os.environ.get("PROVIDER_URL", "")
MODE = os.environ.get("PROVIDER_MODE", "keyed")


def _post(path, body, timeout, headers=None):
    request = urllib.request.Request(
        URL + path,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


# timeout_param: each request gets the time left before the runner's lease deadline.
@effect(idempotency="key", timeout_param="timeout")
def order_keyed(action, amount, *, idempotency_key, timeout=10):
    return _post(
        "/keyed",
        {"action": action, "amount": amount},
        timeout,
        {"Idempotency-Key": idempotency_key},
    )


def find_order(idempotency_key):
    try:
        with urllib.request.urlopen(f"{URL}/lookup/{idempotency_key}", timeout=10) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise


@effect(lookup=find_order, timeout_param="timeout")
def order_lookup(action, amount, *, idempotency_key, timeout=10):
    # The provider knows no idempotency keys: the key travels as the order's reference.
    return _post("/lookup", {"action": action, "amount": amount, "ref": idempotency_key}, timeout)


@effect(timeout_param="timeout")
def order_plain(action, amount, *, timeout=10):
    return _post("/plain", {"action": action, "amount": amount}, timeout)


ORDER = {"keyed": order_keyed, "lookup": order_lookup, "plain": order_plain}[MODE]


def main():
    placed = []
    for i in range(int(os.environ.get("ORDERS", "3"))):
        stamp = snapstate.uuid4()
        po = ORDER(f"action-{i}", 100 + i)
        placed.append(po["id"])
        print("placed", i, po["action"], str(stamp)[:8] == str(stamp)[:8], flush=True)
        snapshot(f"after-{i}")
    print("all placed", len(placed), flush=True)
    return placed
