"""A ~10 MB state with one small change per step (issue 20): what a step's durable
snapshot costs against the job's first, full one.

    python benchmarks/bench_bigstate.py [--steps 50] [--rounds 3] [--records 10000] [--dir DIR]
                                        [--json FILE]

A job (`snapstate.Store.start`, `growth_agents.bigstate_main`) builds a state of about
10 MB pickled (a dict of 10,000 records of ~0.6 KB, a list of 200,000 floats, a list of
40,000 short strings) and takes a durable snapshot() at step 1 (the whole state: the
store holds nothing of it yet) and after each small change at steps 2..N (even steps
append one record, odd steps change one field of a record). Each snapshot() call is
timed inside the agent. Each round is a new job in a new store in a fresh temporary
folder (`--dir` chooses where; the output says which file system and whether it is
tmpfs); a small warm-up job runs first, so one-time costs of the process (lazy imports,
caches) do not land on a round's first snapshot.

Printed per round and over the rounds (median, min-max): the first snapshot, the
per-step median (steps 2..N) with its 10th-90th percentile spread, their ratio (target:
<= 0.1x), and the store's bytes on disk after step 1 and after step N with what each step
added on average. Speed is printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import growth_agents as agents  # noqa: E402

from snapstate import JobStatus, Store  # noqa: E402

SEED = 20


def run_job(base: str, name: str, steps: int, records: int) -> dict[str, object]:
    """One job in a new store under `base`: its snapshot() times and store sizes."""
    store_dir = os.path.join(base, f"{name}-store")
    timings = os.path.join(base, f"{name}.timings")
    result = Store(store_dir).start(
        agents.bigstate_main, str(steps), timings, store_dir, str(SEED), str(records),
        job_id=name,
    )  # fmt: skip
    if result.status != JobStatus.DONE or result.result != records + steps // 2:
        raise SystemExit(f"bench_bigstate: job {name} ended {result.status}: {result.error!r}")
    times: dict[int, float] = {}
    probes: dict[int, tuple[int, int, int]] = {}
    with open(timings) as f:
        for line in f:
            kind, *fields = line.split()
            if kind == "step":
                times[int(fields[0])] = float(fields[1]) * 1e3
            else:
                probes[int(fields[0])] = (int(fields[1]), int(fields[2]), int(fields[3]))
    if sorted(times) != list(range(1, steps + 1)):
        raise SystemExit(f"bench_bigstate: job {name} timed {len(times)} of {steps} steps")
    apparent, allocated, files = agents.disk_usage(store_dir)
    return {
        "first": times[1],
        "steps": [times[s] for s in range(2, steps + 1)],
        "after_first": probes[1][0],
        "after_last": apparent,
        "allocated": allocated,
        "files": files,
        "layout": agents.top_level_usage(store_dir),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=50, help="snapshots per job (default 50)")
    parser.add_argument("--rounds", type=int, default=3, help="jobs, each in a new store")
    parser.add_argument("--records", type=int, default=10_000, help="records in the state")
    parser.add_argument("--dir", help="where the temporary folder goes (default: $TMPDIR)")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args()
    if args.steps < 3 or args.rounds < 1:
        parser.error("--steps must be at least 3 and --rounds at least 1")
    state_bytes = len(pickle.dumps(agents.big_state(SEED, args.records), protocol=5))
    base = tempfile.mkdtemp(prefix="snapstate-bigstate-", dir=args.dir)
    print(
        f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load "
        f"{' '.join(open('/proc/loadavg').read().split()[:3]) if os.path.exists('/proc/loadavg') else '?'}; "
        f"state {state_bytes / 1e6:.2f} MB pickled ({args.records} records, "
        f"{20 * args.records} floats, {4 * args.records} strings); {args.steps} snapshots per job, {args.rounds} round(s)"
    )
    print(f"stores under {agents.where(base)}")
    runs = []
    try:
        run_job(base, "warmup", 3, 100)
        for round_no in range(args.rounds):
            runs.append(run_job(base, f"bigstate{round_no}", args.steps, args.records))
    finally:
        shutil.rmtree(base, ignore_errors=True)

    print(
        f"\nmilliseconds; a step = median [10th-90th percentile] of steps 2-{args.steps}; "
        "bytes on disk: apparent"
    )
    print(
        f"{'round':<6} {'first':>9} {'a step':>24} {'step/first':>11} {'after 1':>10} {'after N':>10} {'per step':>10}"
    )
    ratios = []
    for round_no, run in enumerate(runs):
        median, low, high = agents.spread(run["steps"])
        ratio = median / run["first"]
        ratios.append(ratio)
        per_step = (run["after_last"] - run["after_first"]) / (args.steps - 1)
        print(
            f"{round_no + 1:<6} {run['first']:9.2f} {median:9.2f} [{low:.2f}-{high:.2f}] "
            f"{ratio:10.3f}x {agents.megabytes(run['after_first']):>10} "
            f"{agents.megabytes(run['after_last']):>10} {agents.megabytes(per_step):>10}"
        )
    firsts = [run["first"] for run in runs]
    steps = [statistics.median(run["steps"]) for run in runs]
    print(
        f"\nfirst snapshot: {_over(firsts, ' ms')}; a step: {_over(steps, ' ms')}; "
        f"step / first: {_over(ratios, 'x', 3)}   (target <= 0.1x)"
    )
    last = runs[-1]
    print(
        f"store after {args.steps} snapshots: {agents.megabytes(last['after_last'])} apparent, "
        f"{agents.megabytes(last['allocated'])} allocated, {last['files']} files:"
    )
    for entry, size, files in last["layout"]:
        print(f"  {entry:<24} {agents.megabytes(size):>10} {files:>6} files")
    if args.json:
        rounds = []
        for run in runs:
            median, low, high = agents.spread(run["steps"])
            rounds.append(
                {"first_ms": run["first"], "step_ms": median, "step_p10": low, "step_p90": high,
                 "after_first": run["after_first"], "after_last": run["after_last"]}
            )  # fmt: skip
        with open(args.json, "w") as f:
            json.dump({"steps": args.steps, "records": args.records, "state_bytes": state_bytes,
                       "rounds": rounds}, f, indent=1)  # fmt: skip


def _over(values: list[float], unit: str, digits: int = 2) -> str:
    if len(values) == 1:
        return f"{values[0]:.{digits}f}{unit}"
    return (
        f"{statistics.median(values):.{digits}f}{unit} "
        f"({min(values):.{digits}f}-{max(values):.{digits}f})"
    )


if __name__ == "__main__":
    started = time.monotonic()
    main()
    print(f"\n({time.monotonic() - started:.0f} s)")
