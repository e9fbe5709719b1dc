"""A SQLite database in a subfolder of the working directory (tests/test_crashtest_adversarial.py).

`upsert` (correct): each step writes its row with INSERT OR REPLACE, so a step re-executed
after a kill leaves the same rows; the file's bytes still differ (SQLite's change
counter), and main() returns an object whose repr names its memory address.
`append` (broken): each step INSERTs, so a re-executed step adds its row again."""

import sqlite3
import sys

from snapstate import snapshot


class Summary:
    pass


def main():
    mode = sys.argv[1]
    for step in range(2):
        con = sqlite3.connect("data/state.db")
        con.execute("create table if not exists t (k integer, v text)")
        if mode == "upsert":
            con.execute("create unique index if not exists tk on t (k)")
            con.execute("insert or replace into t values (?, ?)", (step, f"step {step}"))
        else:
            con.execute("insert into t values (?, ?)", (step, f"step {step}"))
        con.commit()
        con.close()
        snapshot(f"step-{step}")
    return Summary()
