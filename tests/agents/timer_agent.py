"""An agent that sleeps: SLEEP seconds (default 7200) between two steps, with a
snapshot before. Prints what it sees of the time through snapstate.now()."""

import os

import snapstate
from snapstate import sleep, snapshot


def main():
    print("step 1", flush=True)
    snapshot("before-sleep")
    seconds = float(os.environ.get("SLEEP", "7200"))
    start = snapstate.now()
    sleep(seconds)
    slept = (snapstate.now() - start).total_seconds()
    print("step 2 slept enough:", slept >= seconds, flush=True)
    snapshot("after-sleep")
    print("done", flush=True)
    return "woke"


def until_main():
    """sleep_until(UNTIL), an ISO datetime with a time zone (or a POSIX timestamp)."""
    import datetime

    text = os.environ["UNTIL"]
    try:
        when = float(text)
    except ValueError:
        when = datetime.datetime.fromisoformat(text)
    before = snapstate.now()
    snapstate.sleep_until(when)
    after = snapstate.now()
    print("woke at", after.isoformat(), flush=True)
    return (after - before).total_seconds()


def bad_main():
    """sleep() with the value of BAD (a string): a clear error at the call."""
    sleep(os.environ.get("BAD", "soon"))
