"""An agent for tests/test_debug_sandbox.py: snapshots 1 ("one"), 2 and 3 (both
labelled "again"); with DBG_EXIT set (read at the call) it calls sys.exit(5) after
snapshot 3."""

import os
import sys

from snapstate import snapshot


def main():
    x = 1
    snapshot("one")
    x += 1
    snapshot("again")
    x += 1
    snapshot("again")
    if os.environ.get("DBG_EXIT"):
        sys.exit(5)
    print("x is", x, flush=True)
    return x
