"""The same async code run by plain Python (no snaprun): the await points pass."""

import asyncio

from snapstate import effect, sleep, snapshot


@effect(idempotency="key")
async def send(x, *, idempotency_key):
    return f"{x}:{idempotency_key.startswith('adhoc-')}"


async def main():
    info = await snapshot("plain")
    await sleep(0.001)
    print("seq", info.seq, "resumed", info.resumed, flush=True)
    print("sent", await send("x"), flush=True)
    return "ok"


if __name__ == "__main__":
    print(asyncio.run(main()))
