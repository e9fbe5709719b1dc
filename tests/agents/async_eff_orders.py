"""Async effects through the ledger (tests/test_async_effects.py): orders placed with a
provider on 127.0.0.1 (tests/providers.py) by `async def` effects that POST with one
httpx.AsyncClient per call.

    PROVIDER_URL   the provider
    PROVIDER_MODE  keyed (idempotency="key") | lookup (lookup= an async def) | plain
    SHAPE          main: main places ORDERS orders, `await snapshot()` after each;
                   tasks: two tasks (asyncio.gather: ids 1 and 2) place their orders at
                   once, each snapshotting after each order; main prints the results
                   late: main snapshots, places an order, then creates a task that
                   places one (httpx's AsyncClient starts a task of its own while it
                   sends: an effect's own tasks take no id, so the late task is task 1
                   whether main's order was sent or served from the ledger)
    DELAYS         JSON {"a": [...], "b": [...]}: how long the provider holds each order
                   of the tasks (tests/test_async_effects.py's SlowProvider)

Prints "placed I ID KEY-KIND" (main) or "task NAME [ACTION:AMOUNT:KEY-KIND, ...]"
(tasks, after the gather: the order the provider numbers them in is a race),
"snapshot SEQ" after each snapshot of main, and "all placed N" at the end; returns
the order ids. KEY-KIND is "ledger" for a key the job's ledger derived, "adhoc" for one
made up in plain Python (no ledger). Runs under plain Python too (asyncio.run)."""

import asyncio
import json
import os

import httpx

from snapstate import effect, snapshot

URL = os.environ.get("PROVIDER_URL", "")
MODE = os.environ.get("PROVIDER_MODE", "keyed")


def _kind(key):
    return "adhoc" if key.startswith("adhoc-") else "ledger"


async def _post(path, body, headers=None):
    async with httpx.AsyncClient(base_url=URL, timeout=10) as client:
        response = await client.post(path, json=body, headers=headers or {})
        response.raise_for_status()
        return response.json()


@effect(idempotency="key")
async def order_keyed(action, amount, delay=0, *, idempotency_key):
    body = {"action": action, "amount": amount, "delay": delay}
    placed = await _post("/keyed", body, {"Idempotency-Key": idempotency_key})
    return {**placed, "key": _kind(idempotency_key)}


async def find_order(idempotency_key):
    async with httpx.AsyncClient(base_url=URL, timeout=10) as client:
        response = await client.get(f"/lookup/{idempotency_key}")
    if response.status_code == 404:
        return None
    response.raise_for_status()
    return {**response.json(), "key": _kind(idempotency_key)}


@effect(lookup=find_order)
async def order_lookup(action, amount, delay=0, *, idempotency_key):
    body = {"action": action, "amount": amount, "delay": delay, "ref": idempotency_key}
    return {**await _post("/lookup", body), "key": _kind(idempotency_key)}


@effect
async def order_plain(action, amount, delay=0):
    body = {"action": action, "amount": amount, "delay": delay}
    return {**await _post("/plain", body), "key": "none"}


PLACE = {"keyed": order_keyed, "lookup": order_lookup, "plain": order_plain}[MODE]


async def in_main(orders):
    placed = []
    for i in range(orders):
        po = await PLACE(f"action-{i}", 100 + i)
        placed.append(po["id"])
        print("placed", i, po["id"], po["key"], flush=True)
        info = await snapshot(f"after-{i}")
        print("snapshot", info.seq, flush=True)
    return placed


async def worker(name, delays):
    placed = []
    for i, delay in enumerate(delays):
        po = await PLACE(f"{name}-{i}", 10 * i + len(name), delay)
        placed.append(f"{po['action']}:{po['amount']}:{po['key']}")
        await snapshot(f"{name}-{i}")
    return placed


async def in_tasks():
    delays = json.loads(os.environ.get("DELAYS", '{"a": [0, 0], "b": [0.4, 0]}'))
    results = await asyncio.gather(*(worker(name, delays[name]) for name in sorted(delays)))
    for name, placed in zip(sorted(delays), results):
        print("task", name, placed, flush=True)
    await snapshot("gathered")
    return [po for placed in results for po in placed]


async def late():
    await snapshot("first")
    po = await PLACE("main-0", 1)
    task = asyncio.create_task(worker("late", [0]))
    placed = [po["id"], *await task]
    print("late", placed[1:], flush=True)
    return placed


async def main():
    shape = os.environ.get("SHAPE", "main")
    if shape == "tasks":
        placed = await in_tasks()
    elif shape == "late":
        placed = await late()
    else:
        placed = await in_main(int(os.environ.get("ORDERS", "2")))
    print("all placed", len(placed), flush=True)
    return placed


if __name__ == "__main__":
    print("returned", asyncio.run(main()))
