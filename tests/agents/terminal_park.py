"""tests/test_cli_terminal.py's agent for task effect numbering: one spawned task whose
one plain effect (no idempotency key, no lookup) appends a line to ORDERS_FILE."""

import os

from snapstate import effect, gather, spawn


@effect
def order(item: str) -> str:
    with open(os.environ["ORDERS_FILE"], "a") as out:
        out.write(item + "\n")
    return f"ordered {item}"


def task() -> str:
    return order("paper")


def main() -> list:
    return gather(spawn(task))
