"""Two call_effect calls naming the same logical action with an explicit key=
("charge-1"). The second call's amount is FX_SECOND_AMOUNT (default: the same as the
first); FX_PATH is /keyed (the provider honours the key) or /plain (it does not)."""

import os

from fx_http import post

from snapstate import call_effect


def charge(action, amount, *, idempotency_key):
    path = os.environ.get("FX_PATH", "/keyed")
    return post(
        path, {"action": action, "amount": amount}, idempotency_key if path == "/keyed" else None
    )


def main():
    first = call_effect(charge, "charge", 10, key="charge-1", idempotency="key")
    print("first", first["id"], first["amount"], flush=True)
    amount = int(os.environ.get("FX_SECOND_AMOUNT", "10"))
    second = call_effect(charge, "charge", amount, key="charge-1", idempotency="key")  # FX-SECOND
    print("second", second["id"], second["amount"], flush=True)
    return [first["id"], second["id"]]
