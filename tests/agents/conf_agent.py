"""Leaves distinctive strings everywhere an agent can leave data: argv (sys.argv[1]),
a local held across snapshots, a snapshot label, an effect argument sent to the HTTP
provider (its result echoes it), an in-process effect's result, a failing effect's
error text, a Secret passed to an effect, and (when CONF_FAIL is set) the error the
agent raises after its effects, before its second snapshot. Each string comes from the
environment."""

import os
import sys

from fx_http import post

from snapstate import Secret, effect, snapshot


@effect(idempotency="key")
def place(action, token, *, idempotency_key):
    return post("/keyed", {"action": action, "amount": 1, "token": token}, idempotency_key)


@effect
def compute(tag):
    return f"computed {os.environ['CONF_RESULT']}"


@effect(kind="read")
def probe():
    raise ValueError(f"probe failed {os.environ['CONF_NOTE']}")


def main():
    local = f"local {os.environ['CONF_LOCAL']}"
    argument = sys.argv[1]
    snapshot(f"label {os.environ['CONF_LABEL']}")
    placed = place(os.environ["CONF_ARG"], Secret(os.environ["CONF_SECRET"], name="api"))
    made = compute("tag")
    try:
        probe()
    except ValueError:
        pass
    if os.environ.get("CONF_FAIL"):  # resumed from snapshot 1: the effects re-execute
        raise RuntimeError(f"agent failed {os.environ['CONF_ERROR']}")
    snapshot("second")
    return [placed["id"], len(local), len(argument), len(made)]
