"""A recorded side effect against a DBOS step: the per-call latency, in the same run.

    python benchmarks/bench_effect.py [--calls 300] [--rounds 1] [--dir DIR] [--json FILE]

The same trivial function (it returns its argument plus one: nothing outside the
process, so what is timed is each system's own recording) is called `--calls` times in
one job, each call timed where the agent makes it:

  snapstate  a plain `@effect` (growth_agents._bump) in a job (`snapstate.Store.start`,
             the embedded SQLite store with its defaults): the ledger commits a row
             before the call is sent and the outcome after it, so a crash never sends
             it twice
  dbos       a `@DBOS.step()` in a `@DBOS.workflow()`, on a SQLite system database:
             DBOS looks the step up (a read), runs it and commits its outcome after it;
             a crash during a step runs it again on recovery

Each system runs in a fresh interpreter of its own, in a fresh folder under a new
temporary directory (`--dir` chooses where); the first 20 calls are a warm-up and left
out. Printed per system: the median per call with its 10th-90th percentile spread, the
SQLite settings its connections used (read from them), and for DBOS the write
transactions committed per step (counted through SQLAlchemy's events: a commit after an
INSERT, UPDATE or DELETE). A DBOS that
is not installed (`pip install -e ".[bench]"`) is reported as such and skipped. Speed is
printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import comparators  # noqa: E402

SYSTEMS = ("snapstate", "dbos")
WARMUP = 20


def run_snapstate(calls: int, folder: str, timings: str) -> dict[str, object]:
    import growth_agents as agents

    from snapstate import JobStatus, Store

    store_dir = os.path.join(folder, "store")
    result = Store(store_dir).start(
        agents.effect_timing_main, str(calls), timings, job_id="effects"
    )
    if result.status != JobStatus.DONE:
        raise SystemExit(f"bench_effect: the snapstate job ended {result.status}: {result.error!r}")
    from snapstate.serializers._sqlite import SqliteCatalog

    with sqlite3.connect(os.path.join(store_dir, "catalog.db")) as db:
        journal = db.execute("PRAGMA journal_mode").fetchone()[0]
    settings = {"journal_mode": journal, "synchronous": SqliteCatalog(store_dir).synchronous}
    return {"settings": settings, "commits_per_call": None}


def run_dbos(calls: int, folder: str, timings: str) -> dict[str, object]:
    from dbos import DBOS
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    commits = [0]
    samples: list[float] = []

    @DBOS.step()
    def bump(n: int) -> int:
        return n + 1

    @DBOS.workflow()
    def effects(n: int) -> int:
        total = 0
        for k in range(n):
            if k == WARMUP:
                commits[0] = 0
            t0 = time.perf_counter()
            total += bump(k)
            samples.append(time.perf_counter() - t0)
        return total

    wrote = [False]

    def statement(_conn: object, _cursor: object, sql: str, *_args: object) -> None:
        if sql.lstrip().split(None, 1)[0].upper() in ("INSERT", "UPDATE", "DELETE", "REPLACE"):
            wrote[0] = True

    def commit(_conn: object) -> None:
        if wrote[0]:
            commits[0] += 1
        wrote[0] = False

    comparators.unixepoch_shim()
    DBOS(config=comparators.dbos_config("bench-effect", os.path.join(folder, "dbos.sqlite")))
    DBOS.launch()
    event.listen(Engine, "before_cursor_execute", statement)
    event.listen(Engine, "commit", commit)
    try:
        effects(calls)
        counted = commits[0]
        settings = comparators.dbos_sqlite_settings()
    finally:
        event.remove(Engine, "commit", commit)
        event.remove(Engine, "before_cursor_execute", statement)
        DBOS.destroy()
    with open(timings, "w") as f:
        f.write("\n".join(f"call {n} {s:.9f}" for n, s in enumerate(samples)) + "\n")
    return {"settings": settings, "commits_per_call": counted / max(1, calls - WARMUP)}


def child(system: str, calls: int, folder: str, out: str) -> None:
    os.makedirs(folder)
    timings = folder + ".timings"
    runner = run_snapstate if system == "snapstate" else run_dbos
    extra = runner(calls, folder, timings)
    with open(out, "w") as f:
        json.dump({"timings": timings, **extra}, f)


def measure(system: str, calls: int, base: str, round_no: int) -> dict[str, object]:
    _, info = comparators.run_child(__file__, system, ("--calls", calls), base, round_no)
    samples = {}
    with open(info["timings"]) as f:
        for line in f:
            _, n, seconds = line.split()
            samples[int(n)] = float(seconds) * 1e3
    if sorted(samples) != list(range(calls)):
        raise SystemExit(f"bench_effect: {system} timed {len(samples)} of {calls} calls")
    timed = [samples[n] for n in range(WARMUP, calls)]
    deciles = statistics.quantiles(timed, n=10, method="inclusive")
    return {
        "call_ms": statistics.median(timed),
        "call_p10": deciles[0],
        "call_p90": deciles[-1],
        "settings": info["settings"],
        "commits_per_call": info["commits_per_call"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300, help="calls per job (default 300)")
    parser.add_argument("--rounds", type=int, default=1, help="jobs of every system")
    parser.add_argument("--dir", help="where the temporary folder goes (default: $TMPDIR)")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--child", choices=SYSTEMS, help=argparse.SUPPRESS)
    parser.add_argument("--child-folder", help=argparse.SUPPRESS)
    parser.add_argument("--child-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.calls, args.child_folder, args.child_out)
        return
    if args.calls < WARMUP + 3 or args.rounds < 1:
        parser.error(f"--calls must be at least {WARMUP + 3} and --rounds at least 1")
    present = [s for s in SYSTEMS if comparators.versions(s)]
    missing = {s: "not installed (pip install -e .[bench])" for s in SYSTEMS if s not in present}
    base = tempfile.mkdtemp(prefix="snapstate-effect-", dir=args.dir)
    print(
        f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; "
        f"{args.calls} calls per job ({WARMUP} warm-up), {args.rounds} round(s)"
    )
    results: dict[str, list[dict[str, object]]] = {s: [] for s in present}
    try:
        for round_no in range(args.rounds):
            order = present[round_no % len(present) :] + present[: round_no % len(present)]
            for system in order:
                results[system].append(measure(system, args.calls, base, round_no))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print("\nper call, milliseconds: median [10th-90th percentile]")
    for system, runs in results.items():
        for run in runs:
            commits = run["commits_per_call"]
            print(
                f"{system:<10} {run['call_ms']:8.3f} [{run['call_p10']:.3f}-{run['call_p90']:.3f}]"
                f"   SQLite {run['settings']}"
                + (f", {commits:.2f} write transactions per call" if commits is not None else "")
            )
    for system, why in missing.items():
        print(f"{system}: {why}")
    if "dbos" in results:
        ratios = [
            float(a["call_ms"]) / float(b["call_ms"])  # type: ignore[arg-type]
            for a, b in zip(results["snapstate"], results["dbos"])
        ]
        print(f"snapstate / dbos per call: {statistics.median(ratios):.2f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"calls": args.calls, "systems": results, "missing": missing,
                 "versions": {s: comparators.versions(s) for s in present}},
                f, indent=1,
            )  # fmt: skip


if __name__ == "__main__":
    started = time.monotonic()
    main()
    print(f"\n({time.monotonic() - started:.0f} s)")
