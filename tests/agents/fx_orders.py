"""Places orders through the effect ledger with shop.py's three effects, shaped for
crash sweeps by the environment of the first run:

    PROVIDER_MODE  keyed | lookup | plain (which of shop's effects)
    ORDERS         how many orders (default 3)
    EVERY          a snapshot after every EVERY orders, and after the last (default 1)
    VALUES         recorded snapstate.uuid4() values taken before each order (default 1)

and one variable read again each time an order is placed:

    AMOUNT_BIAS    added to every amount; changing it between a killed run and its
                   resume makes the re-executed calls diverge from the ledger

Ledger ordinals: order i (from 0) is effect (i + 1) * (VALUES + 1); the VALUES uuid4()
records before it take the ordinals just below. Prints "placed I ID" after each order
and "all placed N" at the end; returns the list of order ids."""

import os

from shop import order_keyed, order_lookup, order_plain

import snapstate
from snapstate import snapshot

EFFECTS = {"keyed": order_keyed, "lookup": order_lookup, "plain": order_plain}


def main():
    place = EFFECTS[os.environ.get("PROVIDER_MODE", "keyed")]
    orders = int(os.environ.get("ORDERS", "3"))
    every = int(os.environ.get("EVERY", "1"))
    values = int(os.environ.get("VALUES", "1"))
    placed = []
    for i in range(orders):
        for _ in range(values):
            snapstate.uuid4()
        po = place(f"action-{i}", 100 + i + int(os.environ.get("AMOUNT_BIAS", "0")))
        placed.append(po["id"])
        print("placed", i, po["id"], flush=True)
        if (i + 1) % every == 0 or i == orders - 1:
            snapshot(f"after-{i}")
    print("all placed", len(placed), flush=True)
    return placed
