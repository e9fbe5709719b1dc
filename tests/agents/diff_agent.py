"""A job whose locals, globals, object attributes and stack all change between its
snapshots (tests/test_diff.py): snapshot 1 ("one") in main; then main's locals, two
globals, an object's attributes, a list and a long string change, an effect is
recorded (appending to $DIFF_OUT), and snapshot 2 ("two") is taken one call deeper
(in step()); snapshot 3 ("three") is taken back in main with one more change. A
hostile label string ($DIFF_HOSTILE) is stored in a local before snapshot 2. Note's
__setstate__ writes $DIFF_MARKER when it runs (a resume), which diff must never do."""

import os

from snapstate import effect, snapshot

COUNTER = 0
SETTINGS = {"mode": "draft", "retries": 3}
UNCHANGED = ["same", 1]


class Note:
    def __init__(self, title):
        self.title = title
        self.tags = ["a"]

    def __setstate__(self, state):
        # Runs when a Note is unpickled for real (a resume): never in diff or inspect.
        if os.environ.get("DIFF_MARKER"):
            with open(os.environ["DIFF_MARKER"], "w") as f:
                f.write("ran")
        self.__dict__.update(state)


@effect
def send(text):
    with open(os.environ["DIFF_OUT"], "a") as f:
        f.write(text + "\n")
    return len(text)


def step(notes, label):
    depth = len(notes)
    snapshot(label)
    return depth


def main():
    global COUNTER
    notes = [Note("first")]
    text = "line\n" * 50
    count = 1
    fixed = "never changes"
    snapshot("one")
    COUNTER += 1
    SETTINGS["mode"] = "final"
    SETTINGS["owner"] = "ann"
    del SETTINGS["retries"]
    notes[0].title = "renamed"
    notes[0].tags.append("b")
    notes.append(Note("second"))
    text = text.replace("line\n", "LINE\n", 1)
    count = 2
    extra = os.environ.get("DIFF_HOSTILE", "plain")
    send("hello")
    step(notes, "two")
    count = 3
    snapshot("three")
    print("done", count, fixed, extra, len(text), flush=True)
