"""Holds a distinctive secret (from the SEC_PAYLOAD environment variable, so it is in
the snapshot body only, never in the header) in a local and in a module global. The
variable's name does not look secret on purpose: a value of a KEY/TOKEN/SECRET...
variable would be saved as a reference to it (serializers/_envsecrets.py), and this
agent stands for data the agent produced itself."""

import os

from snapstate import snapshot

VAULT = {}


def main():
    secret = os.environ["SEC_PAYLOAD"]
    VAULT["token"] = secret
    snapshot("holding")
    print("still holding", len(VAULT["token"]), flush=True)
    snapshot("again")
    return len(secret)
