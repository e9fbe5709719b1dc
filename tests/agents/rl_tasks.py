"""Two spawned tasks place an order each with the rate-limited provider
(tests/rate_provider.py) through rl_orders.place: each is refused with a 429 first."""

from rl_orders import place

import snapstate


def order(action, amount):
    placed = place(action, amount)
    print("placed", placed["action"], placed["id"], flush=True)
    return placed["id"]


def main():
    print("start", flush=True)
    tasks = [snapstate.spawn(order, "order-1", 10), snapstate.spawn(order, "order-2", 20)]
    ids = snapstate.gather(*tasks)
    print("done", flush=True)
    return sorted(ids)
