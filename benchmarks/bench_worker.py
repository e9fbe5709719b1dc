"""A long-running worker draining many short jobs (issue 20): jobs per second.

    python benchmarks/bench_worker.py [--jobs 200] [--concurrency 2] [--poll SECONDS]
                                      [--rounds 1] [--dir DIR] [--json FILE]

Submitting: `--jobs` jobs are started through the public API (`snapstate.Store.start`,
`growth_agents.worker_main`) with SNAPSTATE_HIBERNATE_AFTER=0, so each one's first act,
`sleep(0.2)`, hibernates it at once (status waiting, a timer due 0.2 s later; its
hibernation snapshot is written then, outside the measurement). Once every timer is due,
one `snaprun worker --concurrency 2` starts (long-running, not `--once`; `--poll` is
passed on only when given, so the worker's default applies). Each job, resumed by the
worker in a child process, takes two snapshots and ends. The driver watches a side file
the jobs append to as they end (no load on the store), then reads the store once through
the public API: every job must be done (one without its three snapshots after one resume
is pointed out); the last one's end is the latest `JobView.updated`. The worker is then stopped with SIGTERM (exit 143 expected).

Printed: jobs per second from the worker's launch to the last job done (target: >= 5 on an
idle 2-core machine), and from the first snapshot a worker's child took to the last job
done (without the worker's own start-up). Each round is a new store in a fresh temporary
folder (`--dir` chooses where). Speed is printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import growth_agents as agents  # noqa: E402

from snapstate import JobStatus, Store  # noqa: E402

WAIT = 0.2  # each job's sleep(): it hibernates, and is due this long after it was submitted


def snaprun() -> str:
    """The `snaprun` of this interpreter's environment (else the one on PATH)."""
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    found = shutil.which("snaprun", path=path)
    if found is None:
        raise SystemExit("bench_worker: no `snaprun` beside this Python or on PATH")
    return found


def submit(store_dir: str, done_file: str, jobs: int) -> float:
    """Start `jobs` jobs that hibernate at once; returns when the last one is due."""
    store = Store(store_dir)
    last_due = 0.0
    saved = os.environ.get("SNAPSTATE_HIBERNATE_AFTER")
    os.environ["SNAPSTATE_HIBERNATE_AFTER"] = "0"
    try:
        for n in range(jobs):
            result = store.start(agents.worker_main, str(WAIT), done_file, job_id=f"job{n:04d}")
            if result.status != JobStatus.WAITING or result.wait is None:
                raise SystemExit(
                    f"bench_worker: job{n:04d} should wait at its sleep(), it ended "
                    f"{result.status}: {result.error!r}"
                )
            last_due = max(last_due, result.wait.due or 0.0)
    finally:
        if saved is None:
            del os.environ["SNAPSTATE_HIBERNATE_AFTER"]
        else:
            os.environ["SNAPSTATE_HIBERNATE_AFTER"] = saved
    return last_due


def drain(base: str, jobs: int, concurrency: int, poll: float | None) -> dict[str, float]:
    store_dir = os.path.join(base, "store")
    done_file = os.path.join(base, "done")
    t0 = time.monotonic()
    last_due = submit(store_dir, done_file, jobs)
    submitted = time.monotonic() - t0
    while time.time() < last_due + 0.05:
        time.sleep(0.05)
    command = [snaprun(), "worker", "--store", store_dir, "--concurrency", str(concurrency)]
    if poll is not None:
        command += ["--poll", str(poll)]
    env = {k: v for k, v in os.environ.items() if k != "SNAPSTATE_HIBERNATE_AFTER"}
    log = os.path.join(base, "worker.log")
    deadline = time.monotonic() + max(120.0, 2.0 * jobs)
    with open(log, "wb") as out:
        launched = time.time()
        worker = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        while _lines(done_file) < jobs:
            if worker.poll() is not None:
                raise SystemExit(_failure(f"the worker exited {worker.returncode} early", log))
            if time.monotonic() > deadline:
                raise SystemExit(_failure(f"{_lines(done_file)} of {jobs} jobs done in time", log))
            time.sleep(0.05)
        views = Store(store_dir).jobs()
        while any(v.status != JobStatus.DONE for v in views):  # the last commits
            if time.monotonic() > deadline:
                raise SystemExit(_failure("the jobs' ends were not all committed", log))
            time.sleep(0.05)
            views = Store(store_dir).jobs()
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            code = worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
            code = None
    if code != 143:
        raise SystemExit(_failure(f"the worker ended {code} on SIGTERM, not 143", log))
    if len(views) != jobs:
        raise SystemExit(f"bench_worker: the store lists {len(views)} jobs, not {jobs}")
    odd = [v.job_id for v in views if len(v.snapshots) != 3 or v.resumes != 1]
    if odd:
        print(
            f"NOTE: {len(odd)} job(s) did not end with 3 snapshots after 1 resume "
            f"(e.g. {odd[0]}): the rate below counts them all the same"
        )
    last_done = max(v.updated for v in views)
    first_snapshot = min(v.snapshots[1].created for v in views if len(v.snapshots) > 1)
    return {
        "submitted": submitted,
        "from_launch": jobs / (last_done - launched),
        "from_first": jobs / (last_done - first_snapshot),
        "seconds": last_done - launched,
    }


def _lines(path: str) -> int:
    try:
        with open(path) as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


def _failure(what: str, log: str) -> str:
    with open(log, errors="replace") as f:
        tail = f.read()[-3000:]
    return f"bench_worker: {what}; the worker's log ends:\n{tail}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200, help="jobs to drain (default 200)")
    parser.add_argument("--concurrency", type=int, default=2, help="the worker's slots")
    parser.add_argument("--poll", type=float, help="the worker's --poll (default: its own)")
    parser.add_argument("--rounds", type=int, default=1, help="runs, each on a new store")
    parser.add_argument("--dir", help="where the temporary folder goes (default: $TMPDIR)")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args()
    if args.jobs < 1 or args.rounds < 1:
        parser.error("--jobs and --rounds must be at least 1")
    print(
        f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load "
        f"{' '.join(open('/proc/loadavg').read().split()[:3]) if os.path.exists('/proc/loadavg') else '?'}; "
        f"{args.jobs} jobs of two snapshots, `snaprun worker --concurrency {args.concurrency}"
        f"{f' --poll {args.poll}' if args.poll is not None else ''}`, {args.rounds} round(s)"
    )
    runs = []
    for round_no in range(args.rounds):
        base = tempfile.mkdtemp(prefix="snapstate-worker-", dir=args.dir)
        if round_no == 0:
            print(f"stores under {agents.where(base)}")
        try:
            run = drain(base, args.jobs, args.concurrency, args.poll)
        finally:
            shutil.rmtree(base, ignore_errors=True)
        runs.append(run)
        print(
            f"round {round_no + 1}: submitted in {run['submitted']:.1f} s; drained in "
            f"{run['seconds']:.2f} s: {run['from_launch']:.2f} jobs/s from the worker's launch, "
            f"{run['from_first']:.2f} jobs/s from its first job's first snapshot"
        )
    if len(runs) > 1:
        for key, what in (
            ("from_launch", "the worker's launch"),
            ("from_first", "its first snapshot"),
        ):
            values = [run[key] for run in runs]
            print(
                f"from {what}: {statistics.median(values):.2f} jobs/s "
                f"({min(values):.2f}-{max(values):.2f})"
            )
    print("target: >= 5 jobs/s with --concurrency 2 on an idle 2-core machine")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"jobs": args.jobs, "concurrency": args.concurrency, "rounds": runs}, f)


if __name__ == "__main__":
    started = time.monotonic()
    main()
    print(f"\n({time.monotonic() - started:.0f} s)")
