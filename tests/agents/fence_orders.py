"""One order placed through the effect ledger, for the takeover tests of
tests/test_fencing.py: snapshot "start", the order (effect 1), print "ordered ID",
snapshot "ordered", return the order id.

PROVIDER_MODE picks the effect: keyed (Idempotency-Key), lookup (found by reference),
plain (neither), or lookup-token (a lookup effect that also sends its fencing token,
so the provider refuses a stale runner's late request). Every request uses the time
left before the runner's lease deadline as its timeout (timeout_param="timeout").
"""

import json
import os
import urllib.error
import urllib.request

from snapstate import effect, snapshot


def _post(path, body, timeout, headers=None):
    request = urllib.request.Request(
        os.environ["PROVIDER_URL"] + path,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def find(idempotency_key, fencing_token=None):
    query = "" if fencing_token is None else f"?fencing_token={fencing_token}"
    try:
        with urllib.request.urlopen(
            f"{os.environ['PROVIDER_URL']}/lookup/{idempotency_key}{query}", timeout=10
        ) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        exc.close()
        if exc.code == 404:
            return None
        raise


@effect(idempotency="key", timeout_param="timeout")
def order_keyed(action, *, idempotency_key, timeout=10):
    return _post(
        "/keyed", {"action": action, "amount": 1}, timeout, {"Idempotency-Key": idempotency_key}
    )


@effect(lookup=find, timeout_param="timeout")
def order_lookup(action, *, idempotency_key, timeout=10):
    return _post("/lookup", {"action": action, "amount": 1, "ref": idempotency_key}, timeout)


@effect(lookup=find, timeout_param="timeout", fencing_token=True)
def order_lookup_token(action, *, idempotency_key, fencing_token, timeout=10):
    return _post(
        "/lookup",
        {"action": action, "amount": 1, "ref": idempotency_key, "fencing_token": fencing_token},
        timeout,
    )


@effect(timeout_param="timeout")
def order_plain(action, *, timeout=10):
    return _post("/plain", {"action": action, "amount": 1}, timeout)


ORDERS = {
    "keyed": order_keyed,
    "lookup": order_lookup,
    "lookup-token": order_lookup_token,
    "plain": order_plain,
}


def main():
    snapshot("start")
    po = ORDERS[os.environ["PROVIDER_MODE"]]("fence-1")
    print("ordered", po["id"], flush=True)
    snapshot("ordered")
    return po["id"]
