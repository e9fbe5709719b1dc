"""A rate-limited call of a function the agent does not declare as an effect:
call_effect(post_order, ..., key="first-order", idempotency="key", retry=Retry(...))
against tests/rate_provider.py's /orders (httpx). PROVIDER_URL from the environment."""

import os

import httpx

from snapstate import Retry, call_effect, snapshot


def post_order(url, body, *, idempotency_key):
    response = httpx.post(
        url + "/orders", json=body, headers={"Idempotency-Key": idempotency_key}, timeout=10
    )
    response.raise_for_status()
    return response.json()


def main():
    url = os.environ["PROVIDER_URL"]
    print("start", flush=True)
    snapshot("before")
    placed = call_effect(
        post_order,
        url,
        {"action": "order-1", "amount": 10},
        key="first-order",
        idempotency="key",
        retry=Retry(attempts=2, backoff=0.0),
    )
    print("placed", placed["id"], flush=True)
    return placed["id"]
