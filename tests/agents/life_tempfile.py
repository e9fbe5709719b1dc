"""Holds a NamedTemporaryFile across a snapshot: writes before and after it, then
reads the whole file back and closes it (which deletes it)."""

import sys
import tempfile

from snapstate import snapshot


def main():
    t = tempfile.NamedTemporaryFile("w+", dir=sys.argv[1], suffix=".tmp")
    print(t.name, flush=True)
    t.write("before;")
    snapshot("holding")
    t.write("after;")
    t.seek(0)
    text = t.read()
    t.close()
    return text
