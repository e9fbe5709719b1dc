"""Broken: fails before its first snapshot when PROVIDER_URL is not set (no --setup),
or, with `quiet`, reaches no snapshot at all (tests/test_crashtest_adversarial.py)."""

import os
import sys

from snapstate import snapshot


def main():
    if sys.argv[1:2] == ["quiet"]:
        print("nothing durable here", sys.argv[2:])
        return 0
    url = os.environ["PROVIDER_URL"]
    snapshot("started")
    return url
