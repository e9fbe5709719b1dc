"""`snaprun inspect` and `snaprun diff` of a large state (issue 23): peak memory and time.

    python benchmarks/bench_inspect.py [--mb 500] [--objects-mb 50]
                                       [--shapes strings,objects,mixed] [--dir DIR]
                                       [--json FILE]

Setup (not measured, in a child process): for each shape, one job
(inspect_agent.big_main, through `snapstate.Store`) takes two snapshots of a state (inspect_agent.py: `strings` a list of 1 MB strings, of about
`--mb` MB of pickle; `objects` a dict of small objects and `mixed` half of each, of
about `--objects-mb` MB: decoded, small objects take about 13 times their pickle, so
the same size would need gigabytes), and a tiny job one snapshot.

Measured, each command a child process of its own (its peak RSS is its ru_maxrss,
from wait4): `snaprun inspect --json JOB@1` (streamed: the body decoded as it is
read), the same report the way inspect made it before (the whole verified body read
into one buffer, then decoded: `Home.read_row` + `describe`), and `snaprun diff --json
JOB@1 JOB@2`. Each peak is printed as its growth over `inspect` of the tiny job (the
interpreter and snapstate) and as a multiple of the pickle's size, with the seconds
taken and the load average. Target: inspect's growth <= 2x the pickle. Memory and
speed are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import inspect_agent  # noqa: E402

from snapstate import JobStatus, Store  # noqa: E402

# The report as `snaprun inspect --json` made it before it streamed (kept for comparing).
WHOLE = """
import json, sys
from snapstate.runtime import _inspect
from snapstate.serializers._home import open_store
home = open_store(sys.argv[1], create=False, writable=False)
header, payload = home.read_row(home.catalog.snapshot(sys.argv[2], 1))
print(json.dumps(_inspect.describe(header, payload), default=str))
"""


def snaprun() -> str:
    """The `snaprun` of this interpreter's environment (else the one on PATH)."""
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    found = shutil.which("snaprun", path=path)
    if found is None:
        raise SystemExit("bench_inspect: no `snaprun` beside this Python or on PATH")
    return found


def peak(argv: list[str]) -> tuple[float, float]:
    """(peak RSS in MB, seconds) of one child process, its stdout dropped."""
    start = time.perf_counter()
    with open(os.devnull, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE)
        assert proc.stderr is not None
        with proc.stderr:
            err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"bench_inspect: {' '.join(argv)} exited {proc.returncode}: {err!r}")
    return usage.ru_maxrss / 1024, seconds


def build(store: str, shape: str, mb: int) -> int:
    """The store's two snapshots of `shape` (job `big`) and a tiny one (job `tiny`);
    returns the first big snapshot's pickle size in bytes."""
    os.environ.update(BENCH_SHAPE=shape, BENCH_MB=str(mb))
    for job, fn in (("big", inspect_agent.big_main), ("tiny", inspect_agent.tiny_main)):
        result = Store(store).start(fn, job_id=job)
        if result.status != JobStatus.DONE:
            raise SystemExit(f"bench_inspect: job {job} ended {result.status}: {result.error}")
    from snapstate.serializers._home import open_store

    home = open_store(store, create=False, writable=False)
    try:
        header = home.chunks.manifest(
            home.catalog.snapshot("big", 1), home.keys, home.encrypt, "big@1"
        ).header
        return int(header["size"])
    finally:
        home.close()


def built(store: str, shape: str, mb: int) -> int:
    """build() in a child process: this one stays small, so the children it starts
    to measure do not begin with its memory (ru_maxrss counts what a fork inherits)."""
    proc = subprocess.run(
        [sys.executable, __file__, "--build", store, shape, str(mb)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(f"bench_inspect: building the {shape} store failed: {proc.stderr}")
    return int(proc.stdout.split()[-1])


def main() -> None:
    if sys.argv[1:2] == ["--build"]:
        print(build(sys.argv[2], sys.argv[3], int(sys.argv[4])))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=500, help="MB of pickle of `strings`")
    parser.add_argument(
        "--objects-mb", type=int, default=50, help="MB of pickle of `objects` and `mixed`"
    )
    parser.add_argument("--shapes", default="strings,objects,mixed")
    parser.add_argument("--dir", default=None, help="where the temporary stores go")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args()
    exe = snaprun()
    results: dict[str, dict[str, float]] = {}
    for shape in args.shapes.split(","):
        root = tempfile.mkdtemp(prefix="bench-inspect-", dir=args.dir)
        try:
            store = os.path.join(root, "store")
            start = time.perf_counter()
            size = built(store, shape, args.mb if shape == "strings" else args.objects_mb)
            mb = size / 2**20
            print(
                f"{shape}: two snapshots of {mb:.0f} MB built in {time.perf_counter() - start:.1f}s"
            )
            base, _ = peak([exe, "--store", store, "inspect", "--json", "tiny@1"])
            row: dict[str, float] = {"payload_mb": mb, "base_mb": base}
            for label, argv in (
                ("inspect", [exe, "--store", store, "inspect", "--json", "big@1"]),
                ("whole", [sys.executable, "-c", WHOLE, store, "big"]),
                ("diff", [exe, "--store", store, "diff", "--json", "big@1", "big@2"]),
            ):
                rss, seconds = peak(argv)
                row[f"{label}_mb"], row[f"{label}_s"] = rss - base, seconds
                print(
                    f"  {label:<8} +{rss - base:7.0f} MB ({(rss - base) / mb:4.2f}x the pickle)"
                    f"  {seconds:6.2f}s"
                )
            results[shape] = row
        finally:
            shutil.rmtree(root, ignore_errors=True)
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {os.cpu_count()} CPUs")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"mb": args.mb, "objects_mb": args.objects_mb, "shapes": results}, f)


if __name__ == "__main__":
    main()
