"""An agent whose effect goes through a scripted sequence of outcomes, for rate-limit
tests in process. RL_SCRIPT is a comma-separated list, one item per call of the
effect: `conn` raises ConnectionError, `limited:S` raises snapstate.RateLimited(S),
`ok` returns "ok". Each call appends its idempotency key to the file RL_LOG (which
also says which call comes next). RL_ATTEMPTS (2 or 3) picks the Retry policy."""

import os

import snapstate
from snapstate import Retry, effect


def _step(key):
    with open(os.environ["RL_LOG"], "a+") as log:
        log.seek(0)
        n = len(log.read().splitlines())
        log.write(key + "\n")
    return os.environ["RL_SCRIPT"].split(",")[n]


def _scripted(idempotency_key):
    step = _step(idempotency_key)
    if step == "conn":
        raise ConnectionError("connection dropped")
    if step.startswith("limited:"):
        raise snapstate.RateLimited(float(step.split(":")[1]), "scripted")
    return step


@effect(idempotency="key", retry=Retry(attempts=2, backoff=0.0, on=(ConnectionError,)))
def twice(what, *, idempotency_key):
    return _scripted(idempotency_key)


@effect(idempotency="key", retry=Retry(attempts=3, backoff=0.0, on=(ConnectionError,)))
def thrice(what, *, idempotency_key):
    return _scripted(idempotency_key)


def main():
    send = {"2": twice, "3": thrice}[os.environ.get("RL_ATTEMPTS", "3")]
    return send("x")


def stuck_main():
    """A long rate limit while a local holds what no snapshot can save (a socket): the
    job cannot hibernate; the effect call raises SnapshotError, and the agent goes on."""
    import socket

    held = socket.socket()
    try:
        thrice("x")
    except snapstate.SnapshotError as exc:
        held.close()
        return ["refused", str(exc), thrice("y")]
    return ["sent"]
