"""An agent that places two orders with a rate-limited provider (tests/rate_provider.py)
through an effect with an idempotency key. From the environment, read at each call:
PROVIDER_URL; RL_CLIENT (urllib | httpx | requests | raise) picks how the effect sends:
a 429 is raised by the client (raise_for_status()), or, with `raise`, the effect
function raises snapstate.RateLimited itself from the 429's Retry-After; AMOUNT_BIAS
(default 0) is added to the amounts (a resume with another bias diverges)."""

import json
import os
import urllib.error
import urllib.request

import httpx
import requests

import snapstate
from snapstate import effect, snapshot


def _post(body, key):
    url = os.environ["PROVIDER_URL"]
    client = os.environ.get("RL_CLIENT", "urllib")
    headers = {"Content-Type": "application/json", "Idempotency-Key": key}
    if client == "httpx":
        response = httpx.post(url + "/orders", json=body, headers=headers, timeout=10)
        response.raise_for_status()
        return response.json()
    if client == "requests":
        response = requests.post(url + "/orders", json=body, headers=headers, timeout=10)
        response.raise_for_status()
        return response.json()
    request = urllib.request.Request(
        url + "/orders", data=json.dumps(body).encode(), method="POST", headers=headers
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        if client == "raise" and exc.code == 429:
            raise snapstate.RateLimited(float(exc.headers["Retry-After"]), "orders") from None
        raise


@effect(idempotency="key")
def place(action, amount, *, idempotency_key):
    return _post({"action": action, "amount": amount}, idempotency_key)


def main():
    print("start", flush=True)
    snapshot("before")
    bias = int(os.environ.get("AMOUNT_BIAS", "0"))
    first = place("order-1", 10 + bias)
    print("placed", first["action"], first["id"], flush=True)
    second = place("order-2", 20 + bias)
    print("placed", second["action"], second["id"], flush=True)
    snapshot("after")
    print("done", flush=True)
    return [first["id"], second["id"]]
