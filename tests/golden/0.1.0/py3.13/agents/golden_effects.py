"""Golden agent: the effect ledger across a restore. charge() appends to provider.log
(the provider's record of what really happened) and returns a receipt.

scripts/make_golden.py runs it with SNAPSTATE_FAULT=effect-after-send:3: charges 1 and 2
are committed (1 before snapshot 1, 2 after it), charge 3 was sent but the runner was
killed before its outcome was recorded (an ambiguous effect). Resumed from snapshot 1,
charge 2 returns its recorded receipt without a second call and the job parks on charge
3 (exit 4), so provider.log keeps one line per charge. Never edit a copy under
tests/golden/<version>/: the snapshots there identify this code by digest."""

import os

from snapstate import effect, snapshot


@effect
def charge(amount):
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "provider.log"), "a") as log:
        log.write(f"charged {amount}\n")
    return {"id": f"po-{amount}", "amount": amount}


def main():
    first = charge(1)
    print("charged", first["id"], flush=True)
    snapshot("after-charge-1")
    second = charge(2)
    print("charged", second["id"], flush=True)
    third = charge(3)
    print("charged", third["id"], flush=True)
    return [first["id"], second["id"], third["id"]]
