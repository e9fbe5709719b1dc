"""An example agent that waits for a person: it compares vendors, asks for approval to
buy within a budget, hibernates (no process is kept while it waits), and places the
order exactly once after someone approves.

    snaprun run --job po examples/purchase_agent.py     # exits 3: waiting for approval
    snaprun approvals                                   # what it asks for, exactly
    snaprun approve po <ID> --by alice                  # the ID `approvals` shows
    snaprun worker --once                               # continues it: orders once

The "order" is a line appended to purchase_orders.txt beside this file (an effect:
recorded in the ledger, never sent twice, and only within the granted scope).
"""

import os

import snapstate
from snapstate import effect, request_approval, snapshot

ORDERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "purchase_orders.txt")
VENDORS = {"acme": 4200, "globex": 4650, "initech": 5100}


@effect(requires="purchase", within=lambda scope, vendor, amount, **_: amount <= scope["max_usd"])
def create_purchase_order(vendor, amount):
    with open(ORDERS, "a") as f:
        f.write(f"{vendor} {amount}\n")
    return f"PO-{vendor}-{amount}"


def main():
    quotes = sorted(VENDORS.items(), key=lambda item: item[1])
    snapshot("researched")
    vendor, price = quotes[0]
    print(f"best quote: {vendor} at {price} USD", flush=True)
    ok = request_approval(
        "purchase", scope={"vendor": vendor, "max_usd": 5000}, expires_in=2 * 86400
    )
    print(f"approved by {ok.by}; ordering", flush=True)
    po = create_purchase_order(vendor, price)
    snapshot("ordered")
    print(f"ordered: {po}", flush=True)
    return po


if __name__ == "__main__":
    # Under plain Python nobody can be asked: request_approval() refuses.
    try:
        print(main())
    except snapstate.ApprovalError as exc:
        print(f"not run: {exc}")
