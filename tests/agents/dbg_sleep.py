"""An agent for tests/test_debug_sandbox.py: after its snapshot it says "running" and
sleeps a minute (a debug session is stopped by Ctrl-C meanwhile)."""

import time

from snapstate import snapshot


def main():
    snapshot("before-sleep")
    print("running", flush=True)
    time.sleep(60)
    return "slept"
