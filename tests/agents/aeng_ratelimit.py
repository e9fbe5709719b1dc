"""An async effect refused by a rate limit waits in its task (0.3 s) while another
task snapshots: the wait holds no snapshot back; after a kill at that snapshot the
resumed effect is sent again with the same key."""

import asyncio

from snapstate import RateLimited, effect, snapshot

N = [0]


@effect(idempotency="key")
async def limited(x, *, idempotency_key):
    N[0] += 1
    if N[0] == 1:
        raise RateLimited(0.3)
    return x


async def other():
    await asyncio.sleep(0.1)
    info = await snapshot("during refusal wait")
    return info.seq


async def main():
    r = await asyncio.gather(limited(5), other())
    print(r, flush=True)
    return r
