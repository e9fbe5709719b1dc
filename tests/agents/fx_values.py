"""Takes snapstate.now(), random() and uuid4() after a snapshot (ledger ordinals 1, 2,
3), prints them, then tags the uuid with a keyed effect (ordinal 4) and snapshots."""

from fx_http import post

import snapstate
from snapstate import effect, snapshot


@effect(idempotency="key")
def tag(label, *, idempotency_key):
    return post("/keyed", {"action": label, "amount": 0}, idempotency_key)


def main():
    snapshot("start")
    when, number, ident = snapstate.now(), snapstate.random(), snapstate.uuid4()
    print("values", when.isoformat(), repr(number), ident, flush=True)
    po = tag(f"tag-{ident}")
    print("tagged", po["id"], flush=True)
    snapshot("tagged")
    return str(ident)
