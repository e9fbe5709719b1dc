"""`await snapshot()` and an async effect under plain Python (asyncio.run, no snaprun):
the snapshot is a no-op that returns a SnapshotInfo with seq None; the effect runs
once, without a ledger (its idempotency key is made up per call). Prints what it saw;
tests/test_async_effects.py runs it with `python async_eff_plain.py`."""

import asyncio
import os

import httpx

import snapstate
from snapstate import effect, snapshot

URL = os.environ["PROVIDER_URL"]


@effect(idempotency="key")
async def order(action, amount, *, idempotency_key):
    async with httpx.AsyncClient(base_url=URL, timeout=10) as client:
        response = await client.post(
            "/keyed",
            json={"action": action, "amount": amount},
            headers={"Idempotency-Key": idempotency_key},
        )
        return {**response.json(), "key": idempotency_key}


async def child(name):
    info = await snapshot(f"in-{name}")
    return f"{name}:{info.seq}:{info.resumed}"


async def main():
    info = await snapshot("start", meta={"step": 1})
    print(
        "snapshot",
        type(info).__name__,
        isinstance(info, snapstate.SnapshotInfo),
        info.seq,
        info.resumed,
        info.label,
        info.meta,
        flush=True,
    )
    first = await order("plain-0", 5)
    second = await order("plain-1", 6)
    print("placed", first["id"], second["id"], flush=True)
    keys = (first["key"], second["key"])
    print("keys", [k.startswith("adhoc-") for k in keys], keys[0] != keys[1], flush=True)
    print("tasks", await asyncio.gather(child("a"), child("b")), flush=True)
    return "plain done"


if __name__ == "__main__":
    print("returned", asyncio.run(main()))
