"""An agent for tests/test_debug_sandbox.py whose files are not held in its snapshot as
open files: a log and a database held through resource() (reopened by their factories
after a restore), and a file it opens itself after the snapshot (open() and pathlib).
Prints what it reads back, so a debug session shows what its scratch copies hold."""

import sqlite3
from pathlib import Path

from snapstate import resource, snapshot


def main():
    log = resource(lambda: open("res-log.txt", "a"))
    db = resource(lambda: sqlite3.connect("res.db"))
    log.write("before\n")
    db.execute("create table if not exists t(x)")
    db.execute("insert into t values (1)")
    db.commit()
    snapshot("files")
    log.write("after\n")
    log.flush()
    db.execute("insert into t values (2)")
    db.commit()
    with open("fresh.txt", "a") as f:
        f.write("fresh\n")
    Path("path.txt").write_text("written by pathlib\n")
    rows = [r[0] for r in sqlite3.connect("res.db").execute("select x from t")]
    print("log", open("res-log.txt").read().split(), flush=True)
    print("rows", rows, "fresh", Path("fresh.txt").read_text().split(), flush=True)
    return "end"
