"""An agent for the read-only tests: it prints and (with RO_SENTINEL set) creates a
sentinel file at import, so running its module-level code shows; it holds an
append-mode journal, a sqlite3 database and (with RO_TEMPFILE=1) a
NamedTemporaryFile across its first snapshot, and writes to all of them after it.
RO_KILL=1 makes it SIGKILL itself after those writes (a killed, resumable job)."""

import os
import signal
import sqlite3
import tempfile

from snapstate import snapshot

print("ro_agent module imported")
if os.environ.get("RO_SENTINEL"):
    open(os.environ["RO_SENTINEL"], "a").close()


class Notebook:
    def __init__(self, title):
        self.title = title
        self.pages = []


def main():
    notebook = Notebook("draft")
    notebook.pages.append("intro")
    journal = open("journal.txt", "a", encoding="utf-8")
    journal.write("before the snapshot\n")
    db = sqlite3.connect("data.db")
    db.execute("CREATE TABLE IF NOT EXISTS t (x)")
    db.commit()
    held = None
    if os.environ.get("RO_TEMPFILE"):
        held = tempfile.NamedTemporaryFile(dir=".", prefix="held-", suffix=".tmp")
        held.write(b"temporary data")
        held.flush()
    snapshot("held")
    journal.write("after the snapshot\n")
    journal.flush()
    db.execute("INSERT INTO t VALUES (1)")
    db.commit()
    notebook.pages.append("more")
    if os.environ.get("RO_KILL"):
        os.kill(os.getpid(), signal.SIGKILL)
    snapshot("second")
    journal.write("the end\n")
    journal.close()
    return len(notebook.pages) + (held is not None)
