"""The agent `snaprun debug` is tested with (tests/test_debug.py): main() holds a local
`budget` and calls work(), which keeps a journal file open, takes snapshot 1
("before-orders"), places order action-0 (effect 1), takes snapshot 2 ("after-first"),
then places order action-1 (effect 2) and catches EffectRefused (only a debug session
raises it: a sandbox sends nothing the job did not record). shop.py's keyed effect,
PROVIDER_URL from the environment; AMOUNT_BIAS (read at the call) makes effect 1 diverge
from the ledger."""

import os

from shop import order_keyed

import snapstate
from snapstate import snapshot


def main():
    budget = 42
    notes = ["begun"]
    first, second = work(notes)
    print("done", first, second, budget, flush=True)
    return [first, second]


def work(notes):
    count = len(notes)
    journal = open("journal.txt", "a")  # a tracked file: a scratch copy in a debug session
    journal.write("working\n")
    snapshot("before-orders")
    first = order_keyed("action-0", 100 + int(os.environ.get("AMOUNT_BIAS", "0")))["id"]
    journal.write(f"first {first}\n")
    print("first", first, flush=True)
    snapshot("after-first")
    try:
        second = order_keyed("action-1", 101)["id"]
    except snapstate.EffectRefused as exc:
        second = None
        print("refused:", exc, flush=True)
    journal.write(f"second {second}\n")  # BREAK HERE
    journal.close()
    notes.append(count)
    return first, second
