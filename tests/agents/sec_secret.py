"""Holds a distinctive secret (from the SEC_SECRET environment variable, so it is in
the snapshot body only, never in the header) in a local and in a module global."""

import os

from snapstate import snapshot

VAULT = {}


def main():
    secret = os.environ["SEC_SECRET"]
    VAULT["token"] = secret
    snapshot("holding")
    print("still holding", len(VAULT["token"]), flush=True)
    snapshot("again")
    return len(secret)
