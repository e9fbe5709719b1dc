"""Snapshot and restore of an async job, as ratios to the same state in a sync job.

    python benchmarks/bench_async.py [--reps N] [--rounds R] [--json FILE]

Two versions of one workload, each run in-process as a real snapstate job (a Job on a
real store in a temporary directory), with 1, 10 and 100 tasks:

    async   `async def amain()` (runtime/_async.py): main gathers N asyncio tasks;
            each task is a chain of 3 coroutines (top -> middle -> leaf) holding a few
            locals (a 20-int list, a label, a 5-string list, a small dict, a sum),
            and every leaf awaits snapshot(): one snapshot freezes main, awaiting the
            gather, and the N chains
    sync    `def smain()` (runtime/_tasks.py, greenlet tasks): main spawns N tasks
            with snapstate.spawn and waits for each in Task.result() (not in
            gather(*tasks): on CPython 3.11 a job whose main is paused inside a star
            call segfaults after a few snapshots, an engine bug); each task is the
            same chain of 3 plain functions with the same locals, and every leaf
            calls snapshot()

The job's first snapshot is taken when every chain is paused at its leaf (checked:
3N + 1 frames in both versions). While it is paused there, the hub's Job._freeze
(capture of every task's frames, one-pass pickle, header: what precedes the file
write) is timed repeatedly on the live job; the snapshot's payload size is recorded.
After the job finishes, its first snapshot is restored in the same process,
repeatedly:

    restore   Job.restore (version and code checks, unpickling with the rebuilt frames
              and coroutine chains) and, for the async job, AsyncRunner.restore
              (fresh event loop, tasks re-created around the rebuilt chains, gathers,
              first steps scheduled): everything before the agent's code runs again

then one restored copy of each job is run to its end and must return what the
uninterrupted run returned. The file itself (zstd, signature, write, fsync, catalog
commit) is the same code for both versions and is left out (benchmarks/bench_durable.py).

Each version runs ROUNDS times per task count (a new job each time), the two versions
in turn and the first of them alternating, all in one process; each job's freeze and
restore are timed REPS times after 3 warm-ups (a third of REPS for 100 tasks), with
the cyclic GC paused. Printed: the median and the spread (min-max) of all samples of
a version; the ratio: the median of the rounds' ratios (each round's async median
over its sync median, measured next to each other), their spread (min-max), and the
ratio of the medians of all samples. Speed is printed, never asserted.
"""

# Only functions and classes at module level (and the imports): this file is also the
# agents' module (imported by the jobs as `bench_async`), whose globals every snapshot
# saves with the job.
import argparse
import asyncio
import gc
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import zlib

from snapstate import snapshot, spawn


# --------------------------------------------------------------------- the workloads
def _locals_of(i):
    data = list(range(i, i + 20))
    label = f"task-{i}"
    return data, label


async def leaf(i, data):
    notes = [f"note {i}.{k}" for k in range(5)]
    total = sum(data)
    info = await snapshot("leaves")
    return (total, len(notes), info.resumed)


async def middle(i, data):
    scratch = {"i": i, "square": i * i, "tag": f"m{i}"}
    total, count, resumed = await leaf(i, data)
    return (total + scratch["square"], count, resumed)


async def top(i):
    data, label = _locals_of(i)
    result = await middle(i, data)
    return (label, *result)


async def amain():
    n = int(sys.argv[1])
    results = await asyncio.gather(*(top(i) for i in range(n)))
    return {"digest": zlib.crc32(repr([r[:3] for r in results]).encode()), "resumed": results[0][3]}


def sleaf(i, data):
    notes = [f"note {i}.{k}" for k in range(5)]
    total = sum(data)
    info = snapshot("leaves")
    return (total, len(notes), info.resumed)


def smiddle(i, data):
    scratch = {"i": i, "square": i * i, "tag": f"m{i}"}
    total, count, resumed = sleaf(i, data)
    return (total + scratch["square"], count, resumed)


def stop(i):
    data, label = _locals_of(i)
    result = smiddle(i, data)
    return (label, *result)


def smain():
    n = int(sys.argv[1])
    tasks = [spawn(stop, i) for i in range(n)]
    results = []
    for task in tasks:  # not gather(*tasks): main paused in a star call segfaults on 3.11
        results.append(task.result())
    return {"digest": zlib.crc32(repr([r[:3] for r in results]).encode()), "resumed": results[0][3]}


# --------------------------------------------------------------------- measuring
def timed_ms(fn, after=None) -> float:
    """Wall time of one call of fn(), in ms, with the cyclic GC paused; after(result)
    (cleanup) runs once the clock stopped."""
    gc.disable()
    try:
        start = time.perf_counter_ns()
        result = fn()
        elapsed = (time.perf_counter_ns() - start) / 1e6
    finally:
        gc.enable()
    if after is not None:
        after(result)
    del result
    return elapsed


def summary(samples: list[float]) -> dict:
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples)}


def _job_class():
    from snapstate.runtime import _job

    class TimedJob(_job.Job):
        """A Job that keeps the request and seq of its first freeze, and the frame count,
        so the freeze can be timed again while the agent is still paused there."""

        freeze_samples: list
        reps = 0
        warmup = 3
        frames = 0
        payload_bytes = 0

        def _freeze(self, request, seq):
            header, payload = super()._freeze(request, seq)
            if seq == 1:
                self.frames = len(header["frames"]) + sum(
                    len(t.get("frames") or ()) for t in (header.get("tasks") or [None])[1:]
                )
                self.payload_bytes = len(payload)
                self.freeze_samples = []
                for i in range(self.warmup + self.reps):
                    ms = timed_ms(lambda: _job.Job._freeze(self, request, seq))
                    if i >= self.warmup:
                        self.freeze_samples.append(ms)
            return header, payload

    return TimedJob


def run_job(directory: str, function: str, n: int, reps: int) -> dict:
    """Run the job to its end (timing the first freeze), then time restores of its
    first snapshot and run one restored copy to the end."""
    from snapstate.runtime import _agent, _async, _async_loop, _job
    from snapstate.serializers._home import Home

    entry = _agent.EntryPoint("bench_async", function, os.path.abspath(__file__))
    home = Home(directory)
    job_id = f"{function}-{n}"
    home.catalog.create_job(job_id, entry.as_dict(), [str(n)])
    job = _job_class()(home, job_id, entry, [str(n)])
    job.reps = reps
    first = job.run()
    assert not first["resumed"], first
    row = home.catalog.snapshot(job_id, 1)
    header, body = home.read_row(row)
    restored = _job.Job.open(home, job_id)
    where = f"snapshot 1 of {job_id}"
    is_async = function == "amain"

    def restore():
        run = restored.restore(header, body, where)
        if is_async:  # the tasks around the rebuilt chains, on a fresh loop
            cells = dict(zip(run.__code__.co_freevars, (c.cell_contents for c in run.__closure__)))
            runner = _async.AsyncRunner(cells["job"], cells["restored"].loop)
            runner.restore(cells["restored"], cells["state"], cells["created_at"], cells["seq"])
            return cells["restored"]
        return run

    def discard(restored_state):
        if is_async:  # never run: kept (never collected, as a stopped run's), loop closed
            _async_loop.PARKED.append(restored_state)
            restored_state.loop.close()

    samples = []
    for i in range(3 + reps):
        ms = timed_ms(restore, discard)
        if i >= 3:
            samples.append(ms)
    again = restored._loop(restored.restore(header, body, where), (), {})
    if again["digest"] != first["digest"] or not again["resumed"]:
        raise SystemExit(
            f"{function} n={n}: the restored run ended differently: {again} != {first}"
        )
    home.close()
    return {
        "frames": job.frames,
        "payload_bytes": job.payload_bytes,
        "freeze": job.freeze_samples,
        "restore": samples,
    }


def machine() -> dict:
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            model = next(
                (line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "?"
            )
    except OSError:
        pass
    import cloudpickle
    import greenlet

    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    return {
        "python": sys.version.split()[0],
        "nproc": os.cpu_count(),
        "cpu": model,
        "platform": platform.platform(),
        "greenlet": greenlet.__version__,
        "cloudpickle": cloudpickle.__version__,
        "loadavg": " ".join(load),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=30, help="timed repetitions (default 30)")
    parser.add_argument("--rounds", type=int, default=4, help="jobs of each kind (default 4)")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args()
    facts = machine()
    print(
        f"Python {facts['python']} | {facts['nproc']} CPUs, {facts['cpu']} | greenlet "
        f"{facts['greenlet']}, cloudpickle {facts['cloudpickle']} | load {facts['loadavg']}"
    )
    argv = list(sys.argv)
    started = time.perf_counter()
    results: dict = {"machine": facts, "reps": args.reps, "rounds": args.rounds, "tasks": {}}
    with tempfile.TemporaryDirectory(prefix="snapstate-bench-async-") as tmp:
        for n in (1, 10, 100):
            reps = args.reps if n < 100 else max(5, args.reps // 3)
            runs: dict = {"smain": [], "amain": []}
            ratios: dict = {"freeze": [], "restore": []}
            for r in range(args.rounds):  # the two jobs in turn, the first one alternating
                order = ("smain", "amain") if r % 2 == 0 else ("amain", "smain")
                got = {}
                for function in order:
                    directory = os.path.join(tmp, f"{function}-{n}-{r}")
                    got[function] = run_job(directory, function, n, reps)
                    sys.argv = argv  # Job.run / Job.restore set sys.argv for the agent
                    runs[function].append(got[function])
                for k in ratios:
                    ratios[k].append(
                        statistics.median(got["amain"][k]) / statistics.median(got["smain"][k])
                    )
            row = {}
            for function, done in runs.items():
                first = done[0]
                row[function] = {
                    "frames": first["frames"],
                    "payload_bytes": first["payload_bytes"],
                    **{k: summary([x for d in done for x in d[k]]) for k in ("freeze", "restore")},
                }
            a, s = row["amain"], row["smain"]
            assert a["frames"] == s["frames"] == 3 * n + 1, (a, s)
            row["ratio"] = {
                k: {
                    "of_medians": a[k]["median"] / s[k]["median"],
                    "rounds_median": statistics.median(ratios[k]),
                    "rounds_min": min(ratios[k]),
                    "rounds_max": max(ratios[k]),
                }
                for k in ratios
            }
            results["tasks"][n] = row
            print(
                f"\n{n} task(s), {a['frames']} frames; payload async {a['payload_bytes']:,} B, "
                f"sync {s['payload_bytes']:,} B ({args.rounds} rounds x {reps} reps)"
            )
            for k in ("freeze", "restore"):
                q = row["ratio"][k]
                print(
                    f"  {k:<8} async {a[k]['median']:8.3f} ms ({a[k]['min']:.3f}-{a[k]['max']:.3f})"
                    f"   sync {s[k]['median']:8.3f} ms ({s[k]['min']:.3f}-{s[k]['max']:.3f})"
                    f"   ratio {q['rounds_median']:5.2f}x (rounds {q['rounds_min']:.2f}-"
                    f"{q['rounds_max']:.2f}; of all samples' medians {q['of_medians']:.2f}x)"
                )
    with open("/proc/loadavg") as f:
        results["loadavg_after"] = " ".join(f.read().split()[:3])
    print(f"\n({time.perf_counter() - started:.1f} s; load after {results['loadavg_after']})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
