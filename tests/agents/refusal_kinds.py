"""Objects snapstate cannot save, each held in a local at a snapshot: the refusal must
name the local, what it is as the user wrote it, and the fix for that kind of object.
Each refusal is caught and printed; the agent carries on."""

import asyncio
import concurrent.futures
import csv
import logging.handlers
import os
import queue
import socket
import sqlite3
import sys
import threading

from snapstate import SnapshotError, snapshot


def attempt(case):
    try:
        snapshot(case)
    except SnapshotError as exc:
        print(f"REFUSED {case}: {exc}", flush=True)
        return
    print(f"TAKEN {case}", flush=True)


class ApiClient:
    def __init__(self):
        self.sock = socket.socket()


def main():
    conn = sqlite3.connect(os.path.join(sys.argv[1], "kinds.db"))
    conn.execute("CREATE TABLE t (n INTEGER)")
    conn.executemany("INSERT INTO t VALUES (?)", [(1,), (2,), (3,)])
    conn.commit()
    rows = conn.execute("SELECT n FROM t ORDER BY n")
    rows.fetchone()
    attempt("cursor-mid-result-set")
    print("rest", rows.fetchall(), flush=True)
    attempt("cursor-fetched")
    rows.close()
    conn.close()
    del rows, conn

    loop = asyncio.new_event_loop()
    attempt("event-loop-idle")  # saved: a new loop of the same class comes back
    loop.call_later(3600, print, "never")
    attempt("event-loop")  # refused: a timer is scheduled on it
    loop.close()
    del loop

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)
    print("pool", pool.submit(pow, 2, 5).result(), flush=True)
    attempt("thread-pool-idle")  # saved: nothing runs in it
    release = threading.Event()
    waiting = pool.submit(release.wait)
    attempt("thread-pool")
    release.set()
    print("waited", waiting.result(), flush=True)
    pool.shutdown()
    del pool, waiting
    fut = concurrent.futures.Future()  # set by a callback later
    attempt("pending-future")
    fut.set_result(7)
    attempt("done-future")  # saved: a done future is a value
    del fut
    with concurrent.futures.ThreadPoolExecutor() as pool:
        print("mapped", list(pool.map(abs, [-1, -2])), flush=True)
    attempt("after-with-pool")  # saved as a shut-down executor
    del pool

    client = ApiClient()
    attempt("socket-in-object")
    client.sock.close()
    del client

    handler = logging.handlers.QueueHandler(queue.SimpleQueue())
    attempt("queue-handler")
    del handler

    reader = csv.reader(["a,b", "c,d"])
    print("first", next(reader), flush=True)
    attempt("csv-reader")
    del reader
    attempt("good-after")
    return "carried on"
