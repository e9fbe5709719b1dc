"""An async keyed effect with retry=Retry(attempts=3, backoff=BACKOFF) whose first
attempt fails with a transient ConnectionError, while another task ticks every 50 ms
(asyncio.sleep).
Prints the order the provider (PROVIDER_URL, tests/providers.py) placed, how many
attempts the effect took, and how many ticks the other task made between the first
attempt and the second: a retry's backoff must not stop the event loop (a tick due
50 ms after the failure comes before a backoff due BACKOFF later, whatever the load).
BACKOFF (default 0.6 s) is the wait before the second attempt."""

import asyncio
import os

import httpx

from snapstate import Retry, effect, snapshot

URL = os.environ.get("PROVIDER_URL", "")
BACKOFF = float(os.environ.get("BACKOFF", "0.6"))
ATTEMPTS = []
TICKS = [0]


@effect(idempotency="key", retry=Retry(attempts=3, backoff=BACKOFF, on=(ConnectionError,)))
async def order(action, amount, *, idempotency_key):
    ATTEMPTS.append((idempotency_key, TICKS[0]))
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
    while not stop.is_set():
        await asyncio.sleep(0.05)
        TICKS[0] += 1


async def main():
    stop = asyncio.Event()
    ticks = asyncio.create_task(ticker(stop))
    await asyncio.sleep(0.2)  # the ticker ticks
    po = await order("retried", 7)
    stop.set()
    await ticks
    keys = {key for key, _ in ATTEMPTS}
    print("placed", po["id"], "attempts", len(ATTEMPTS), len(keys), flush=True)
    print("ticks during the backoff", ATTEMPTS[1][1] - ATTEMPTS[0][1], flush=True)
    await snapshot("done")
    return po["id"]
