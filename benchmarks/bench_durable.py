"""A durable snapshot against its floor, measured in the same run.

    python benchmarks/bench_durable.py [--json FILE]

The chat workload of bench_agent.py ((a): a 200-message, ~100 KB history in a
6-frame stack) runs as a real job in a real store, under its lease. While it is
paused in snapshot(), a whole durable snapshot is taken again and again, exactly as
the hub takes one: capture + pickle + header (Job._freeze), the signed file written
atomically (zstd, HMAC-SHA256, write, fsync, rename, fsync of the directory), and the
catalog row committed with compare-and-swap (SQLite, WAL, synchronous=FULL).

A store keeps each content-defined chunk once, so taking the same snapshot twice
stores nothing the second time. Two cases are timed, interleaved: a **full** snapshot
(before it, outside the timed part, the store is made to hold none of the state's
chunks and the writer forgets the job's last body: everything is cut, hashed,
compressed and written, as for a job's first snapshot) and an **unchanged** one (the
same state again: compared with the last body, nothing new is stored; only the
manifest and the row are committed).

The floor is the least any durable snapshot of the same state must do: pickle +
zstd (same level) + write + fsync of the same bytes into a file in the same
directory. All are timed interleaved; medians are printed, with the ratios. Target
(issue 20): a full snapshot <= 1.5x the floor. Also shown: the same with an
encryption-required store. Speed is printed, never asserted. Run with an older
snapstate installed, the script measures that release the same way (its "full" and
"unchanged" are the same: it wrote the whole file each time).
"""

import argparse
import json
import os
import pickle
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_freeze import plain_state  # noqa: E402

from snapstate.runtime import _agent, _job, _switch  # noqa: E402
from snapstate.serializers import _snapfile  # noqa: E402
from snapstate.serializers._home import Home  # noqa: E402

REPS, WARMUP = 60, 5


class DurableJob(_job.Job):
    """Takes REPS durable snapshots back to back at the agent's first snapshot()."""

    results: dict = {}

    def _take_snapshot(self, request):
        top = self._agent.gr_frame
        plain = plain_state(top, self.entry)
        floor_path = os.path.join(self.home.directory, "floor.bin")
        samples = {
            "durable": [],
            "freeze": [],
            "file": [],
            "commit": [],
            "floor": [],
            "unchanged": [],
        }

        def clear():
            """The store holds none of the state's chunks; the writer keeps no last body."""
            chunks = getattr(self.home, "chunks", None)
            if chunks is None:  # a release that wrote whole files
                return
            with sqlite3.connect(os.path.join(self.home.directory, "catalog.db")) as db:
                db.execute("DELETE FROM chunks")
            shutil.rmtree(os.path.join(self.home.directory, "chunks"), ignore_errors=True)
            chunks.forget(self.job_id)

        def take():
            seq = self.seq + 1
            t0 = time.perf_counter()
            header, payload = self._freeze(request, seq)
            t1 = time.perf_counter()
            row = self.home.write_snapshot(
                self.job_id, seq, self.epoch, request.label, header, payload
            )
            t2 = time.perf_counter()
            self.home.commit_snapshot(row)
            t3 = time.perf_counter()
            self.seq = seq
            return row, (t0, t1, t2, t3)

        def floor():
            data = b"".join(_snapfile._compressed(pickle.dumps(plain, protocol=5)))
            fd = os.open(floor_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)

        for i in range(WARMUP + REPS):
            clear()
            row, (t0, t1, t2, t3) = take()
            floor()
            t4 = time.perf_counter()
            _, again = take()
            if i >= WARMUP:
                samples["unchanged"].append((again[3] - again[0]) * 1e3)
                for name, value in (
                    ("durable", t3 - t0),
                    ("freeze", t1 - t0),
                    ("file", t2 - t1),
                    ("commit", t3 - t2),
                    ("floor", t4 - t3),
                ):
                    samples[name].append(value * 1e3)
        DurableJob.results = {k: statistics.median(v) for k, v in samples.items()}
        DurableJob.results["bytes"] = getattr(row, "row", row).size
        return self._agent.switch(_switch.SnapshotInfo(False, 0.0, self.seq, request.label))


def measure(encrypt: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix="snapstate-durable-", dir=os.getcwd()) as tmp:
        home = Home(tmp)
        if encrypt:
            home.set_encryption(True)
        entry = _agent.EntryPoint("bench_agent", "chat_main", os.path.join(HERE, "bench_agent.py"))
        home.catalog.create_job("durable", entry.as_dict(), [])
        argv = list(sys.argv)
        DurableJob(home, "durable", entry, []).run()
        sys.argv = argv
        home.close()
        return dict(DurableJob.results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args()
    results = {}
    print(
        f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, store on "
        f"{os.path.abspath(os.getcwd())}"
    )
    for encrypt in (False, True):
        r = measure(encrypt)
        results["encrypted" if encrypt else "signed"] = r
        ratio = r["durable"] / r["floor"]
        print(
            f"\n{'encrypted' if encrypt else 'signed'} store, a full snapshot stores "
            f"{r['bytes'] / 1e3:.1f} KB"
        )
        print(f"  floor: pickle + zstd + write + fsync   {r['floor']:7.3f} ms")
        print(
            f"  full durable snapshot                  {r['durable']:7.3f} ms   {ratio:5.2f}x floor"
            + ("   target <= 1.5x: " + ("met" if ratio <= 1.5 else "missed") if not encrypt else "")
        )
        print(
            f"    freeze {r['freeze']:.3f} | store (cut, hash, zstd, sign; a pack file when "
            f"large) {r['file']:.3f} | catalog commit {r['commit']:.3f} ms"
        )
        print(
            f"  unchanged durable snapshot             {r['unchanged']:7.3f} ms   "
            f"{r['unchanged'] / r['floor']:5.2f}x floor"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
