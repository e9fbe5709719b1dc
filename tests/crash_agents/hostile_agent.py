"""Broken, with hostile text: appends a line holding an escape sequence, rich markup and
a bidi override to a file outside a tracked handle, so a kill while the snapshot after
it is written makes the resume append it again (tests/test_crashtest_adversarial.py)."""

from snapstate import snapshot

LINE = "\x1b]0;pwned\x07 [/] [link=http://x]y[/link] \u202eevil\n"


def main():
    snapshot("start")
    with open("journal.txt", "a") as journal:
        journal.write(LINE)
    snapshot("written")
    return "ok"
