"""A bare write (no key, no lookup) to /drop, where the provider carries the order out
and then drops the connection: the agent sees ConnectionError although the order
happened. The agent notes the failure and carries on to snapshot 2."""

from fx_http import post

from snapstate import effect, snapshot


@effect
def order(action):
    return post("/drop", {"action": action, "amount": 1})


def main():
    snapshot("start")
    try:
        outcome = order("drop-1")["id"]
    except ConnectionError as exc:
        outcome = f"failed: {type(exc).__name__}"
    print("order", outcome, flush=True)
    snapshot("after")
    return outcome
