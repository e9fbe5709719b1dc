"""The dashboard tests' agent (tests/test_ui.py, tests/test_ui_browser.py):
`snaprun run ui_agent.py LABEL`.

Keeps a Notebook whose title is LABEL (any text: the tests give one holding
`<script>`), takes snapshot LABEL, publishes once through a plain effect (ordinal 1:
a kill after its send leaves it ambiguous, so the resume parks), takes snapshot
"drafted", then asks for approval "publish" with scope {"channel": "blog",
"max_posts": 1} (expires in an hour) and waits there; once granted, takes snapshot
"approved" and returns how many pages it wrote (3)."""

import sys

from snapstate import effect, request_approval, snapshot


class Notebook:
    def __init__(self, title):
        self.title = title
        self.pages = []


@effect
def publish(text):
    return {"published": text}


def main():
    label = sys.argv[1]
    notes = Notebook(label)
    notes.pages.append("draft one")
    snapshot(label)
    publish("first")
    notes.pages.append("draft two")
    snapshot("drafted")
    request_approval("publish", {"channel": "blog", "max_posts": 1}, expires_in=3600)
    notes.pages.append("approved")
    snapshot("approved")
    return len(notes.pages)
