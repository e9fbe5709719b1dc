"""Reports a timestamp through a keyed effect, after a snapshot. With FX_CLOCK=wall the
timestamp is time.time(), so code re-executed after a restore calls the effect with
another argument than the ledger recorded (DivergenceError); with FX_CLOCK=recorded it
is snapstate.now(), which a re-execution gets back from the ledger."""

import os
import time

from fx_http import post

import snapstate
from snapstate import effect, snapshot


@effect(idempotency="key")
def report(name, stamp, *, idempotency_key):
    return post("/keyed", {"action": name, "amount": stamp}, idempotency_key)


def main():
    snapshot("start")
    if os.environ.get("FX_CLOCK", "wall") == "recorded":
        stamp = snapstate.now().timestamp()
    else:
        stamp = time.time()
    result = report("report", stamp)  # FX-CALL
    print("reported", result["id"], repr(stamp), flush=True)
    snapshot("reported")
    return result["id"]
