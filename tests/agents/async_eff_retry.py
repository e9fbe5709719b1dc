"""An async keyed effect with retry=Retry(attempts=3, backoff=BACKOFF) whose first
attempt fails with a transient ConnectionError, while another task ticks every 50 ms
(asyncio.sleep).
Prints the order the provider (PROVIDER_URL, tests/providers.py) placed, how many
attempts the effect took, and the longest gap between two ticks, in tenths of a
second: a retry's backoff must not stop the event loop (the other task keeps ticking).
BACKOFF (default 0.6 s) is the wait before the second attempt."""

import asyncio
import os

import httpx

from snapstate import Retry, effect, snapshot

URL = os.environ.get("PROVIDER_URL", "")
BACKOFF = float(os.environ.get("BACKOFF", "0.6"))
ATTEMPTS = []


@effect(idempotency="key", retry=Retry(attempts=3, backoff=BACKOFF, on=(ConnectionError,)))
async def order(action, amount, *, idempotency_key):
    ATTEMPTS.append(idempotency_key)
    if len(ATTEMPTS) < 2:
        raise ConnectionError(f"transient failure {len(ATTEMPTS)}")
    async with httpx.AsyncClient(base_url=URL, timeout=10) as client:
        response = await client.post(
            "/keyed",
            json={"action": action, "amount": amount},
            headers={"Idempotency-Key": idempotency_key},
        )
        return response.json()


async def ticker(stop):
    loop = asyncio.get_running_loop()
    last, gap = loop.time(), 0.0
    while not stop.is_set():
        await asyncio.sleep(0.05)
        now = loop.time()
        gap, last = max(gap, now - last), now
    return gap


async def main():
    stop = asyncio.Event()
    ticks = asyncio.create_task(ticker(stop))
    await asyncio.sleep(0.2)  # the ticker ticks
    po = await order("retried", 7)
    stop.set()
    gap = await ticks
    print("placed", po["id"], "attempts", len(ATTEMPTS), len(set(ATTEMPTS)), flush=True)
    print("longest gap", round(gap, 1), flush=True)
    await snapshot("done")
    return po["id"]
