"""Holds standard-library objects across snapshots: a FileHandler and a StreamHandler
(attached at run time, kept in module globals), a fully fetched sqlite3 cursor, and a
csv.writer and csv.DictWriter over open files, a csv.writer on sys.stdout, a ThreadPoolExecutor idle at each snapshot
and one shut down by its `with` block. Every step logs, inserts, queries and
writes a row, then snapshots; after each snapshot it checks the objects kept their
configuration and identity."""

import concurrent.futures
import csv
import logging
import os
import sqlite3
import sys

from snapstate import snapshot

LOG = logging.getLogger("stdlib_objects")
FILE_HANDLER = None
STREAM_HANDLER = None


def no_secrets(record):
    return "secret" not in record.getMessage()


def setup_logging(out):
    global FILE_HANDLER, STREAM_HANDLER
    FILE_HANDLER = logging.FileHandler(os.path.join(out, "agent.log"), encoding="utf-8")
    FILE_HANDLER.setLevel(logging.DEBUG)
    FILE_HANDLER.setFormatter(logging.Formatter("%(levelname)s:%(name)s:%(message)s"))
    FILE_HANDLER.addFilter(no_secrets)
    STREAM_HANDLER = logging.StreamHandler(sys.stdout)
    STREAM_HANDLER.setLevel(logging.INFO)
    STREAM_HANDLER.setFormatter(logging.Formatter("log> %(message)s"))
    LOG.addHandler(FILE_HANDLER)
    LOG.addHandler(STREAM_HANDLER)
    LOG.setLevel(logging.DEBUG)
    LOG.propagate = False


def main():
    out = sys.argv[1]
    setup_logging(out)
    conn = sqlite3.connect(os.path.join(out, "agent.db"))
    conn.execute("CREATE TABLE steps (n INTEGER, square INTEGER)")
    conn.commit()
    cur = conn.cursor()
    cur.row_factory = sqlite3.Row
    cur.arraysize = 3
    table = open(os.path.join(out, "steps.csv"), "w", newline="", encoding="utf-8")
    writer = csv.writer(table, delimiter=";", quoting=csv.QUOTE_NONNUMERIC)
    writer.writerow(["n", "square"])
    named = open(os.path.join(out, "named.csv"), "w", newline="", encoding="utf-8")
    dict_writer = csv.DictWriter(named, fieldnames=["n", "label"], extrasaction="ignore")
    dict_writer.writeheader()
    report = csv.writer(sys.stdout, delimiter="|", lineterminator="\n")
    workers = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="agent-worker")
    with concurrent.futures.ThreadPoolExecutor() as finished:
        finished.submit(print, "pool warmed", flush=True).result()
    for n in range(4):
        LOG.debug("step %d starts", n)
        LOG.info("step %d", n)
        LOG.warning("secret %d", n)  # on stdout; kept out of the file by the filter
        with conn:
            conn.execute("INSERT INTO steps VALUES (?, ?)", (n, n * n))
        cur.execute("SELECT n, square FROM steps ORDER BY n")
        rows = [tuple(row) for row in cur.fetchall()]
        writer.writerow([n, n * n])
        dict_writer.writerow({"n": n, "label": f"step {n}", "extra": "dropped"})
        print("step", n, rows, flush=True)
        snapshot(f"step {n}")
        LOG.info("after snapshot %d", n)
        report.writerow(["report", n, n * n])
        cube = workers.submit(pow, n, 3)
        print("cube", cube.result(), workers._thread_name_prefix, flush=True)
        print(
            "checks",
            LOG.handlers == [FILE_HANDLER, STREAM_HANDLER],
            LOG.level,
            LOG.propagate,
            FILE_HANDLER.level,
            FILE_HANDLER.formatter._fmt,
            FILE_HANDLER.filters == [no_secrets],
            FILE_HANDLER.encoding,
            STREAM_HANDLER.stream is sys.stdout,
            STREAM_HANDLER.level,
            cur.connection is conn,
            cur.row_factory is sqlite3.Row,
            cur.arraysize,
            writer.dialect.delimiter,
            writer.dialect.quoting,
            dict_writer.extrasaction,
            flush=True,
        )
    workers.shutdown()
    try:
        finished.submit(print)
    except RuntimeError as exc:
        print("finished pool:", exc, flush=True)
    table.close()
    named.close()
    cur.close()
    conn.close()
    FILE_HANDLER.close()
    return cur.arraysize
