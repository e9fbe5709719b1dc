"""Writer crash matrix through the file-system seam, and SIGKILL of a writing process.

A snapshot is durable in two steps (serializers/_home.py): its file is written
atomically (create temp, write, fsync, close, rename, fsync the directory), then its
catalog row is committed. Whatever fails or dies in between, the catalog's latest
snapshot must be a complete, verifiable file that the writer had acknowledged (or, for
a death after the commit, the one it was about to acknowledge); no partial file is
ever listed; no temp file outlives its writer; and the job resumes to the same result
as an uninterrupted run.

Part 1 fails each file-system operation of a real job (tests/agents/lease_steps.py, run
in-process through Home(dir, fs=FaultyFileSystem)) at every call index that occurs,
once (transient) or from then on (persistent). Part 2 SIGKILLs real writer processes
(tests/writer_proc.py) at seeded random moments.
"""

from __future__ import annotations

import errno
import os
import random
import signal
import struct
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
import writer_proc
from helpers import AGENTS

from snapstate._errors import CorruptSnapshot, SnapshotWriteError
from snapstate.runtime._agent import EntryPoint
from snapstate.runtime._job import Job
from snapstate.serializers import _fs, _snapfile
from snapstate.serializers._home import Home
from snapstate.serializers._store import Owner

OPS = ("create", "write", "fsync", "close", "rename", "fsync_dir")
ENTRY = EntryPoint("lease_steps", "main", str(AGENTS / "lease_steps.py"))
STEPS = 5
WRITER = str(Path(__file__).with_name("writer_proc.py"))


class FaultyFileSystem(_fs.FileSystem):
    """The real file system, except that the `at`-th call of operation `op` fails with
    an OSError (transient), or that call and every later call of `op` (persistent).

    A failing write is torn: half of its data reaches the file first (what a full disk
    or a failing device does); the file's bytes at that moment are kept in `torn`. A
    failing close closes the descriptor, then reports the error (as NFS may). Every
    call is counted; `log` lists (op, n) in call order."""

    def __init__(self, op: str | None = None, at: int = 0, persistent: bool = False):
        self.op, self.at, self.persistent = op, at, persistent
        self.calls: Counter = Counter()
        self.log: list[tuple[str, int]] = []
        self.failed: list[tuple[str, int]] = []
        self.torn: bytes | None = None
        self._paths: dict[int, str] = {}

    def _fails(self, op: str) -> bool:
        self.calls[op] += 1
        n = self.calls[op]
        self.log.append((op, n))
        if op == self.op and (n == self.at or (self.persistent and n > self.at)):
            self.failed.append((op, n))
            return True
        return False

    def _error(self, op: str, code: int = errno.EIO) -> OSError:
        return OSError(code, f"injected {op} fault (call {self.calls[op]})")

    def create(self, path):
        if self._fails("create"):
            raise self._error("create", errno.ENOSPC)
        fd = super().create(path)
        self._paths[fd] = path
        return fd

    def write(self, fd, data):
        if self._fails("write"):
            super().write(fd, bytes(data[: len(data) // 2]))
            with open(self._paths[fd], "rb") as f:
                self.torn = f.read()
            raise self._error("write", errno.ENOSPC)
        return super().write(fd, data)

    def fsync(self, fd):
        if self._fails("fsync"):
            raise self._error("fsync")
        super().fsync(fd)

    def close(self, fd):
        self._paths.pop(fd, None)
        super().close(fd)
        if self._fails("close"):
            raise self._error("close")

    def rename(self, src, dst):
        if self._fails("rename"):
            raise self._error("rename")
        super().rename(src, dst)

    def fsync_dir(self, directory):
        if self._fails("fsync_dir"):
            raise self._error("fsync_dir")
        super().fsync_dir(directory)


def temp_files(folder: Path) -> list[str]:
    if not folder.is_dir():
        return []
    return sorted(n for n in os.listdir(folder) if n.startswith(".") and n.endswith(".tmp"))


def snap_files(folder: Path) -> list[str]:
    return sorted(n for n in os.listdir(folder) if n.endswith(".snap")) if folder.is_dir() else []


def acked(out: str) -> list[int]:
    return [int(line.split()[1]) for line in out.splitlines() if line.startswith("acked ")]


@pytest.fixture(autouse=True)
def _keep_argv(monkeypatch):
    """Job.prepare() sets sys.argv for the agent; put pytest's back afterwards."""
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setattr(sys, "path", list(sys.path))


@dataclass
class Baseline:
    result: str
    calls: Counter
    snapshot_of: dict  # (op, n) -> the seq of the snapshot that call belongs to


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> Baseline:
    """An uninterrupted run through a counting (never failing) FaultyFileSystem: the
    result every resumed run must reproduce, and which calls occur for which snapshot."""
    store = tmp_path_factory.mktemp("baseline")
    fs = FaultyFileSystem()
    home = Home(str(store), fs=fs)
    try:
        result = Job.create(home, ENTRY, [], "job").run()
        assert [r.seq for r in home.catalog.snapshots("job")] == list(range(1, STEPS + 1))
    finally:
        home.close()
    snapshot_of, seq = {}, 0
    for op, n in fs.log:
        seq += op == "create"
        snapshot_of[(op, n)] = seq
    assert all(fs.calls[op] == STEPS for op in OPS if op != "write")
    assert fs.calls["write"] > 3 * STEPS  # a two-chunk body at snapshot 2
    return Baseline(result, fs.calls, snapshot_of)


def _run(store: Path, fs, *, resume: bool, capsys):
    """Run (or resume) the job through Home(store, fs); returns (outcome, acked seqs)."""
    home = Home(str(store), fs=fs)
    try:
        if resume:
            job = Job.open(home, "job")
            call = job.resume
        else:
            job = Job.create(home, ENTRY, [str(store / "canary")], "job")
            call = job.run
        try:
            outcome = call()
        except SnapshotWriteError as exc:
            outcome = exc
    finally:
        home.close()
    return outcome, acked(capsys.readouterr().out)


def _check_after_fault(
    store: Path, op: str, k: int, epochs: list[int], result, acks: list[int]
) -> None:
    """The invariants after a run stopped on a fault while writing snapshot k under
    epochs[-1] (earlier failed attempts in `epochs`)."""
    where = f"{op} fault at snapshot {k}"
    folder = store / "snapshots" / "job"
    assert isinstance(result, SnapshotWriteError), (where, result)
    assert "it is not retried" in str(result)
    # The failing writer removed its own temp file (checked before any reopen sweeps).
    assert temp_files(folder) == [], where
    home = Home(str(store))
    try:
        rows = home.catalog.snapshots("job")
        # The catalog lists exactly the acknowledged snapshots: the run stopped at k.
        assert [r.seq for r in rows] == list(range(1, k)), where
        assert acks[-1:] == ([k - 1] if k > 1 else []), (where, acks)
        for r in rows:
            assert home.verify(home.absolute(r.file))["seq"] == r.seq
        if rows:
            header, payload = home.read_row(rows[-1])
            assert header["seq"] == k - 1 and payload
        # Never a partial file: the files are those listed, plus, for a fault at
        # fsync_dir, the complete file of snapshot k that the rename had put in place
        # before the failure: unacknowledged, so never listed (an orphan the resume
        # does not use) but not partial either (it verifies in full).
        listed = {os.path.basename(r.file) for r in rows}
        orphans = [f for f in snap_files(folder) if f not in listed]
        if op == "fsync_dir":
            assert orphans == [f"{k:06d}-e{e}.snap" for e in epochs], where
            for name in orphans:
                assert home.verify(str(folder / name))["seq"] == k
        else:
            assert orphans == [], where
        assert listed <= set(snap_files(folder)), where  # every listed file exists
        job = home.catalog.get_job("job")
        assert job.status == "interrupted" and "could not be written" in job.error, where
        assert home.catalog.get_lease("job") is None, where
        assert home.catalog.effective_status(job, time.time()) == "interrupted"
    finally:
        home.close()


def _check_completed(store: Path, baseline: Baseline, result, epoch: int, k: int) -> None:
    home = Home(str(store))
    try:
        assert result == baseline.result
        rows = home.catalog.snapshots("job")
        assert [r.seq for r in rows] == list(range(1, STEPS + 1))
        assert [r.epoch for r in rows] == [1] * (k - 1) + [epoch] * (STEPS - k + 1)
        for r in rows:
            assert home.verify(home.absolute(r.file))["seq"] == r.seq
        assert home.catalog.get_job("job").status == "done"
        assert home.catalog.get_lease("job") is None
        assert temp_files(store / "snapshots" / "job") == []
    finally:
        home.close()


@pytest.mark.parametrize("kind", ["transient", "persistent"])
@pytest.mark.parametrize("op", OPS)
def test_fault_matrix(op, kind, baseline, tmp_path, capsys):
    """For every call of `op` a full run makes (every snapshot, every chunk write),
    that call fails (transient: only it; persistent: it and all later calls of op).
    Crash window: inside the atomic write of snapshot k (create, write, fsync, close,
    rename: the file never appears; fsync_dir: after the rename, before the commit).
    run() raises SnapshotWriteError and is not retried; the catalog lists exactly
    snapshots 1..k-1, the last the agent acknowledged, and it reads back; no temp file
    is left; a torn write's partial bytes are refused as CorruptSnapshot. A transient
    fault is gone: resuming through the same file system completes with the
    uninterrupted result. A persistent one fails the resume again at snapshot k with
    the same invariants; a resume through a healthy file system then completes."""
    persistent = kind == "persistent"
    for n in range(1, baseline.calls[op] + 1):
        k = baseline.snapshot_of[(op, n)]
        store = tmp_path / f"{op}-{n}"
        fs = FaultyFileSystem(op, n, persistent)
        result, acks = _run(store, fs, resume=False, capsys=capsys)
        assert fs.failed == [(op, n)], (n, result)
        _check_after_fault(store, op, k, [1], result, acks)
        if op == "write":
            torn = tmp_path / "torn.snap"
            torn.write_bytes(fs.torn)
            home = Home(str(store))
            try:
                with pytest.raises(CorruptSnapshot):
                    home.read(str(torn))
            finally:
                home.close()
        if persistent:
            result, acks = _run(store, fs, resume=True, capsys=capsys)
            assert len(fs.failed) == 2, (n, result)
            _check_after_fault(store, op, k, [1, 2], result, acks)
            fs, epoch = _fs.OS, 3
        else:
            epoch = 2
        result, acks = _run(store, fs, resume=True, capsys=capsys)
        _check_completed(store, baseline, result, epoch, k)
        assert acks == list(range(max(k - 1, 1), STEPS + 1)), (n, acks)


@pytest.mark.smoke
def test_corrupt_latest_snapshot_is_refused_without_unpickling(tmp_path, capsys):
    """Crash window: a snapshot damaged after it was committed (here: replaced by the
    torn bytes of a failed write). Resuming raises CorruptSnapshot and nothing was
    unpickled: the agent's Canary, whose __setstate__ records every unpickling, never
    ran. Control: with the intact file back, the resume unpickles it (the canary
    fires) and completes."""
    store = tmp_path / "store"
    fs = FaultyFileSystem("write", 5)  # torn inside snapshot 2's body
    result, _ = _run(store, fs, resume=False, capsys=capsys)
    assert isinstance(result, SnapshotWriteError)
    assert fs.torn and fs.torn.startswith(b"SNAPSTATE\0")
    canary = store / "canary"
    assert not canary.exists()  # a fresh run unpickles nothing
    home = Home(str(store))
    path = Path(home.absolute(home.catalog.latest("job").file))
    home.close()
    intact = path.read_bytes()
    (header_length,) = struct.unpack_from("<I", intact, len(_snapfile.MAGIC) + 2)
    body = len(_snapfile.MAGIC) + 6 + header_length + 4  # first body chunk's bytes
    flipped = intact[: body + 10] + bytes([intact[body + 10] ^ 1]) + intact[body + 11 :]
    for damaged in (fs.torn, intact[:-1], intact[:body], flipped):
        path.write_bytes(damaged)
        home = Home(str(store))
        try:
            with pytest.raises(CorruptSnapshot, match=str(path)):
                Job.open(home, "job").resume()
        finally:
            home.close()
        assert not canary.exists()
    path.write_bytes(intact)
    result, _ = _run(store, _fs.OS, resume=True, capsys=capsys)
    assert canary.read_text() == "unpickled\n"
    assert isinstance(result, str)


def test_opening_the_store_keeps_a_live_writers_temp_file(tmp_path):
    """Crash window: none; the writer is alive. Opening a Home sweeps temp files of dead
    writers, and so must never remove the temp file of a write in flight: here this
    very process opens the store (as another thread of an application would) while
    its snapshot is being written. The write must succeed and be committed."""
    store = str(tmp_path)

    class OpenTheStoreMidWrite(_fs.FileSystem):
        opened = False

        def write(self, fd, data):
            if not self.opened:
                self.opened = True
                Home(store).close()
            return super().write(fd, data)

    home = Home(store, fs=OpenTheStoreMidWrite())
    try:
        home.catalog.create_job("job", ENTRY.as_dict(), [])
        epoch = home.catalog.acquire_lease("job", Owner.me(), 30)
        header, payload = writer_proc.content("job", 1, epoch)
        row = home.write_snapshot("job", 1, epoch, None, header, payload)
        home.commit_snapshot(row)
        assert home.read_row(home.catalog.latest("job"))[1] == payload
    finally:
        home.close()


# ------------------------------------------------------------------ SIGKILL
@dataclass
class Killed:
    pid: int
    epoch: int
    start: int  # the catalog's latest seq when the writer started
    acks: list
    code: int  # exit code (-9: killed)


class ForkServer:
    """tests/writer_proc.py serve: one writer process per iteration, forked from a
    process that has already imported everything."""

    def __init__(self):
        self.proc = subprocess.Popen(
            [sys.executable, WRITER, "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        assert self.proc.stdout.readline() == "serving\n"

    def start(self, store: Path, job: str):
        self.proc.stdin.write(f"write {store} {job}\n")
        self.proc.stdin.flush()
        return self.proc.stdout

    def close(self):
        self.proc.stdin.close()
        self.proc.stdout.close()
        assert self.proc.wait(timeout=60) == 0


class Exec:
    """tests/writer_proc.py write: a fresh interpreter per iteration."""

    proc = None

    def start(self, store: Path, job: str):
        self.proc = subprocess.Popen(
            [sys.executable, WRITER, "write", str(store), job], stdout=subprocess.PIPE, text=True
        )
        return self.proc.stdout

    def close(self):
        pass


def _kill_one(runner, store: Path, job: str, delay: float) -> Killed:
    out = runner.start(store, job)
    ready = out.readline().split()
    assert ready[0] == "ready", ready
    pid, epoch, start = int(ready[1]), int(ready[2]), int(ready[3])
    time.sleep(delay)
    os.kill(pid, signal.SIGKILL)
    acks, code = [], None
    if isinstance(runner, Exec):
        for line in out:
            acks.append(int(line.split()[1]))
        out.close()
        code = runner.proc.wait(timeout=60)
    else:
        for line in out:
            word, *rest = line.split()
            if word == "exited":
                assert int(rest[0]) == pid
                code = int(rest[1])
                break
            acks.append(int(rest[0]))
    return Killed(pid, epoch, start, acks, code)


def _check_after_kill(
    store: Path, job: str, before: list, orphans_before: set, killed: Killed, stats: Counter
) -> tuple[list, set]:
    folder = store / "snapshots" / job
    assert killed.code == -signal.SIGKILL, killed
    stats["killed mid-write (temp file left)"] += bool(temp_files(folder))
    home = Home(str(store))  # sweeps the dead writer's temp files
    try:
        assert temp_files(folder) == []
        rows = home.catalog.snapshots(job)
        start = before[-1].seq if before else 0
        assert killed.start == start
        assert rows[: len(before)] == before  # nothing committed earlier changed
        assert killed.acks == list(range(start + 1, start + 1 + len(killed.acks)))
        last_ack = killed.acks[-1] if killed.acks else start
        latest = rows[-1].seq if rows else 0
        assert latest in (last_ack, last_ack + 1), (killed, latest)
        stats["committed, not yet acked" if latest > last_ack else "latest = last ack"] += 1
        for r in rows[len(before) :]:
            header, payload = home.read_row(r)  # verifies, then reads the body
            assert (header["seq"], header["epoch"], r.epoch) == (r.seq, killed.epoch, killed.epoch)
            assert payload == writer_proc.content(job, r.seq, r.epoch)[1]
        orphans = set(home.orphan_files(job))
        new = orphans - orphans_before
        assert orphans_before <= orphans
        if new:  # renamed in place, never committed
            stats["file in place, commit not done"] += 1
            assert new == {home.relative(home.snapshot_path(job, latest + 1, killed.epoch))}
            assert home.verify(home.absolute(new.pop()))["seq"] == latest + 1
        lease = home.catalog.get_lease(job)
        assert (lease.owner.pid, lease.epoch) == (killed.pid, killed.epoch)
        assert (
            home.catalog.effective_status(home.catalog.get_job(job), time.time()) == "interrupted"
        )
    finally:
        home.close()
    return rows, orphans


WINDOWS = (
    "killed mid-write (temp file left)",
    "file in place, commit not done",
    "committed, not yet acked",
    "latest = last ack",
)


def _sigkill_sweep(tmp_path: Path, runner, iterations: int, seed: int, block: int = 50):
    """`iterations` writers, each SIGKILLed 0-30 ms (seeded) after it is ready; a new
    store every `block` iterations. Returns the outcome counts."""
    rng = random.Random(seed)
    stats: Counter = Counter()
    try:
        for first in range(0, iterations, block):
            store = tmp_path / f"store-{first}"
            home = Home(str(store))
            home.catalog.create_job("w", ENTRY.as_dict(), [])
            home.close()
            rows, orphans = [], set()
            for _ in range(min(block, iterations - first)):
                killed = _kill_one(runner, store, "w", rng.uniform(0, 0.030))
                rows, orphans = _check_after_kill(store, "w", rows, orphans, killed, stats)
                stats["acks"] += len(killed.acks)
            home = Home(str(store))
            try:  # every listed snapshot of the block verifies
                for r in home.catalog.snapshots("w"):
                    assert home.verify(home.absolute(r.file))["seq"] == r.seq
            finally:
                home.close()
    finally:
        runner.close()
    return stats


def test_sigkill_writer_at_random_points(tmp_path):
    """Crash window: anywhere in a writer's loop: mid-write of the temp file, between
    fsync and rename, between rename and commit, inside the SQLite commit, between the
    commit and the printed ack. 200 writer processes (seeded delays), one SIGKILL
    each, 50 per store, each starting where the killed one left off (its lease taken
    over without --force: the pid is gone). After each kill, reopening the store
    leaves no temp file; the latest listed snapshot is the last acked or the one
    after (committed, ack not printed); every newly listed snapshot verifies and holds
    exactly the bytes written for it; at most one new unlisted file, the complete
    next snapshot."""
    stats = _sigkill_sweep(tmp_path, ForkServer(), 200, seed=20261129)
    print(dict(stats))
    assert stats["acks"] > 0
    for window in WINDOWS:  # the kills did land in every window
        assert stats[window] > 0, stats


def test_sigkill_writer_fresh_interpreters(tmp_path):
    """Same as test_sigkill_writer_at_random_points with 20 writers each started as a
    fresh interpreter (no fork server), so nothing depends on the fork."""
    stats = _sigkill_sweep(tmp_path, Exec(), 20, seed=7, block=20)
    print(dict(stats))


@pytest.mark.slow
def test_sigkill_writer_long_sweep(tmp_path):
    """The SIGKILL sweep with 2000 writers (see test_sigkill_writer_at_random_points)."""
    stats = _sigkill_sweep(tmp_path, ForkServer(), 2000, seed=2000)
    print(dict(stats))
    for window in WINDOWS:
        assert stats[window] > 0, stats
