"""`snaprun ls` on a store of many jobs (issue 22): seconds per listing.

    python benchmarks/bench_cli.py [--jobs 5000] [--reps 3] [--dir DIR] [--json FILE]

Setup (not measured): one real job runs through the public API
(`snapstate.Store.start`, `growth_cli_agent.label_wait_main`): it pins a value, takes a
labelled snapshot with meta, and hibernates on a timer an hour away (status waiting,
a wait row, a chunked snapshot with a signed manifest). It is then forked
(`snaprun fork`'s code, runtime/_admin.py) until the store holds `--jobs` jobs, each
fork a job of its own with its own snapshot rows, its header verified by `ls` like
any other job's; the forks are committed without waiting for the disk (SQLite's
synchronous=NORMAL) to keep the setup short.

Measured: `snaprun ls` (the default listing: the newest 50 jobs and a line saying how
many more), `snaprun ls --all` and `snaprun ls --json --all`, each run `--reps` times as
a subprocess with stdout to a pipe; the medians and the spread are printed with the
load average. Target: the default listing of 5,000 jobs under a second. Speed is
printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import cli_agent  # noqa: E402

from snapstate import JobStatus, Store  # noqa: E402


def snaprun() -> str:
    """The `snaprun` of this interpreter's environment (else the one on PATH)."""
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    found = shutil.which("snaprun", path=path)
    if found is None:
        raise SystemExit("bench_cli: no `snaprun` beside this Python or on PATH")
    return found


def build(store_dir: str, jobs: int) -> None:
    """A store of `jobs` jobs: one real waiting job and its forks (see the docstring)."""
    from snapstate.runtime import _admin
    from snapstate.serializers._home import open_store

    result = Store(store_dir).start(cli_agent.label_wait_main, job_id="base")
    if result.status != JobStatus.WAITING:
        raise SystemExit(f"bench_cli: the base job ended {result.status}: {result.error}")
    home = open_store(store_dir, create=False, writable=True)
    try:
        with home.catalog._unsynced():
            for i in range(1, jobs):
                _admin.fork(home, "base", 1, f"job-{i:05d}")
    finally:
        home.close()


def timed(argv: list[str], reps: int) -> list[float]:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, text=True)
        times.append(time.perf_counter() - start)
        if proc.returncode != 0:
            raise SystemExit(f"bench_cli: {' '.join(argv)} exited {proc.returncode}: {proc.stderr}")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where the temporary store goes")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args()
    results: dict[str, list[float]] = {}
    root = tempfile.mkdtemp(prefix="bench-cli-", dir=args.dir)
    try:
        store = os.path.join(root, "store")
        start = time.perf_counter()
        build(store, args.jobs)
        print(f"store of {args.jobs} jobs built in {time.perf_counter() - start:.1f}s")
        exe = snaprun()
        for label, extra in (
            ("ls", []),
            ("ls --all", ["--all"]),
            ("ls --json --all", ["--json", "--all"]),
        ):
            times = timed([exe, "ls", "--store", store, *extra], args.reps)
            results[label] = times
            print(
                f"{label:<18} median {statistics.median(times):.3f}s "
                f"(min {min(times):.3f}s, max {max(times):.3f}s, {args.reps} runs)"
            )
        load = os.getloadavg()
        print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {os.cpu_count()} CPUs")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"jobs": args.jobs, "seconds": results}, f)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
