"""Calls a bare-write effect from a worker thread of the job (a thread pool, as agents
do to parallelise calls), then snapshots. FX_ACTION names the order."""

import os
from concurrent.futures import ThreadPoolExecutor

from fx_http import post

from snapstate import SnapstateError, effect, snapshot


@effect
def order(action):
    return post("/plain", {"action": action, "amount": 1})


def in_a_thread(action):
    with ThreadPoolExecutor(max_workers=1) as pool:
        try:
            return pool.submit(order, action).result()["id"]
        except SnapstateError as exc:
            return f"refused: {type(exc).__name__}"


def main():
    snapshot("start")
    outcome = in_a_thread(os.environ.get("FX_ACTION", "threaded"))
    print("order", outcome, flush=True)
    snapshot("after")
    return outcome
