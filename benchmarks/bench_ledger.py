"""Effect-ledger overhead per effect call, against one fsync'd SQLite insert.

    python benchmarks/bench_ledger.py [--json FILE]

A real job in a real store calls a trivial effect (it returns a small dict at once)
many times; each call makes all of its durable transitions: the row committed in
state "dispatched" before the call is sent, and the confirmed result (signed pickle)
right after. The per-call cost, minus the function itself, is compared with one
insert of a similar row in its own transaction in a plain SQLite database in the same
directory (WAL), measured interleaved in the same run. Target from the issue: <= 2.5x
that insert with synchronous=FULL; synchronous=NORMAL is reported too. Speed is
printed, never asserted.
"""

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time

from snapstate import effect
from snapstate.runtime import _agent, _job
from snapstate.serializers._home import Home

try:
    from snapstate.serializers._sqlite import SqliteCatalog
except ImportError:  # a release before the catalog's split (A/B runs against it)
    from snapstate.serializers._sqlite import SqliteStore as SqliteCatalog  # type: ignore

CALLS, WARMUP = 300, 20


@effect(idempotency="key")
def place(n, *, idempotency_key):
    return {"id": n, "key": idempotency_key[:8]}


def baseline_insert(db):
    db.execute("BEGIN IMMEDIATE")
    db.execute(
        "INSERT INTO t (job, n, payload) VALUES (?, ?, ?)",
        ("job", time.perf_counter_ns(), b"x" * 200),
    )
    db.execute("COMMIT")


def agent(db, samples):
    for i in range(WARMUP + CALLS):
        c0, t0 = time.process_time(), time.perf_counter()
        place(i)
        c1, t1 = time.process_time(), time.perf_counter()
        place.__wrapped__(i, idempotency_key="k" * 40)  # the function alone
        t2 = time.perf_counter()
        baseline_insert(db)
        t3 = time.perf_counter()
        if i >= WARMUP:
            samples["effect"].append((t1 - t0) - (t2 - t1))
            samples["insert"].append(t3 - t2)
            samples["cpu"].append(c1 - c0)


def measure(synchronous: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="snapstate-ledger-", dir=os.getcwd()) as tmp:
        home = Home(tmp, catalog=SqliteCatalog(tmp, synchronous=synchronous))
        db = sqlite3.connect(os.path.join(tmp, "baseline.db"), isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(f"PRAGMA synchronous={synchronous}")
        db.execute("CREATE TABLE t (job TEXT, n INTEGER, payload BLOB, PRIMARY KEY (job, n))")
        samples = {"effect": [], "insert": [], "cpu": []}
        module = sys.modules[__name__]
        module.bench_main = lambda: agent(db, samples)
        entry = _agent.EntryPoint(__name__, "bench_main", None, None)
        home.catalog.create_job("ledger", entry.as_dict(), [])
        argv = list(sys.argv)
        _job.Job(home, "ledger", entry, []).run()
        sys.argv = argv
        db.close()
        home.close()
    return {k: statistics.median(v) * 1e6 for k, v in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args()
    results = {}
    print(
        f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, store on {os.getcwd()}; "
        f"{CALLS} calls, medians"
    )
    for synchronous in ("FULL", "NORMAL"):
        r = measure(synchronous)
        results[synchronous] = r
        ratio = r["effect"] / r["insert"]
        verdict = (
            f"   target <= 1.5x: {'met' if ratio <= 1.5 else 'missed'}"
            if synchronous == "FULL"
            else ""
        )
        print(
            f"synchronous={synchronous:6}  one insert {r['insert']:8.1f} us   ledger per effect "
            f"{r['effect']:8.1f} us   {ratio:5.2f}x{verdict}   CPU per effect {r['cpu']:6.1f} us"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
