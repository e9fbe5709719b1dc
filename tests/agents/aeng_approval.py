"""An async agent waits for an approval, then spends it on an async effect."""

from snapstate import effect, request_approval, snapshot


@effect(requires="buy", idempotency="key")
async def buy(item, *, idempotency_key):
    print("BUY", item, flush=True)
    return f"order-{item}"


async def main():
    await snapshot("start")
    grant = await request_approval("buy", {"item": "pen"})
    print("granted", grant.name, flush=True)
    order = await buy("pen")
    print(order, flush=True)
    return order
