"""A durable snapshot against its floor, measured in the same run.

    python benchmarks/bench_durable.py

The chat workload of bench_agent.py ((a): a 200-message, ~100 KB history in a
6-frame stack) runs as a real job in a real store, under its lease. While it is
paused in snapshot(), a whole durable snapshot is taken again and again, exactly as
the hub takes one: capture + pickle + header (Job._freeze), the signed file written
atomically (zstd, HMAC-SHA256, write, fsync, rename, fsync of the directory), and the
catalog row committed with compare-and-swap (SQLite, WAL, synchronous=FULL).

The floor is the least any durable snapshot of the same state must do: pickle +
zstd (same level) + write + fsync of the same bytes into a file in the same
directory. Both are timed interleaved; medians are printed, with the ratio. Target
from the issue: <= 2x. Also shown: the same with an encryption-required store.
Speed is printed, never asserted.
"""

import os
import pickle
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
        samples = {"durable": [], "freeze": [], "file": [], "commit": [], "floor": []}

        def floor():
            data = b"".join(_snapfile._compressed(pickle.dumps(plain, protocol=5)))
            fd = os.open(floor_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)

        for i in range(WARMUP + REPS):
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
            floor()
            t4 = time.perf_counter()
            if i >= WARMUP:
                for name, value in (
                    ("durable", t3 - t0),
                    ("freeze", t1 - t0),
                    ("file", t2 - t1),
                    ("commit", t3 - t2),
                    ("floor", t4 - t3),
                ):
                    samples[name].append(value * 1e3)
        DurableJob.results = {k: statistics.median(v) for k, v in samples.items()}
        DurableJob.results["bytes"] = os.path.getsize(self.home.absolute(row.file))
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
    print(
        f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, store on "
        f"{os.path.abspath(os.getcwd())}"
    )
    for encrypt in (False, True):
        r = measure(encrypt)
        ratio = r["durable"] / r["floor"]
        print(f"\n{'encrypted' if encrypt else 'signed'} store, file {r['bytes'] / 1e3:.1f} KB")
        print(f"  floor: pickle + zstd + write + fsync   {r['floor']:7.3f} ms")
        print(
            f"  durable snapshot                       {r['durable']:7.3f} ms   {ratio:5.2f}x floor"
            + ("   target <= 2x: " + ("MET" if ratio <= 2 else "MISSED") if not encrypt else "")
        )
        print(
            f"    freeze {r['freeze']:.3f} | file (zstd, sign, write, fsync, rename, dir fsync) "
            f"{r['file']:.3f} | catalog commit {r['commit']:.3f} ms"
        )


if __name__ == "__main__":
    main()
