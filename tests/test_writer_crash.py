"""Writer crash matrix through the file-system seam, and SIGKILL of a writing process.

A snapshot is durable in one or two steps (serializers/_chunkstore.py): when it adds
more than 64 KiB of encoded chunks, those are first written to one pack file
atomically (create temp, write, fsync, close, rename, fsync the directory); then its
manifest, its chunk rows (and its small new chunks inline) are committed in one catalog
transaction. Whatever fails or dies in between, the catalog's latest snapshot must be
one the writer had acknowledged (or, for a death after the commit, the one it was
about to acknowledge), verifying in full; no committed snapshot ever refers to a
missing chunk or a pack missing or cut short; no temp file outlives its writer; an
unreferenced pack left by a failed or killed writer is swept (Home.sweep_chunks, as
`snaprun prune` does) once its writer is gone, never before; and the job resumes to
the same result as an uninterrupted run.

Part 1 fails each file-system operation of a real job (tests/agents/pack_steps.py:
four of its five snapshots write a pack, one is inline; run in-process through
Home(dir, fs=FaultyFileSystem)) at every call index that occurs, once (transient) or
from then on (persistent). Part 2 SIGKILLs real writer processes (tests/writer_proc.py)
at seeded random moments.
"""

from __future__ import annotations

import errno
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
import writer_proc
from chunked import chunk_ids, chunk_rows
from helpers import AGENTS

from snapstate._errors import CorruptSnapshot, SnapshotWriteError, StoreDamaged, TamperedSnapshot
from snapstate.runtime._agent import EntryPoint
from snapstate.runtime._job import Job
from snapstate.serializers import _chunks, _fs
from snapstate.serializers._home import Home
from snapstate.serializers._store import CHUNKED, Owner

OPS = ("create", "write", "fsync", "close", "rename", "fsync_dir")
ENTRY = EntryPoint("pack_steps", "main", str(AGENTS / "pack_steps.py"))
STEPS = 5
PACKED = (1, 2, 4, 5)  # the snapshots of pack_steps.py that write a pack (3 is inline)
WRITER = str(Path(__file__).with_name("writer_proc.py"))


class FaultyFileSystem(_fs.FileSystem):
    """The real file system, except that the `at`-th call of operation `op` fails with
    an OSError (transient), or that call and every later call of `op` (persistent).

    A failing write is torn: half of its data reaches the file first (what a full disk
    or a failing device does); the file's bytes at that moment are kept in `torn`. A
    failing close closes the descriptor, then reports the error (as NFS may). Every
    call is counted; `log` lists (op, n, path) in call order; `written` counts the
    bytes that reached each file (by its final name once renamed)."""

    def __init__(self, op: str | None = None, at: int = 0, persistent: bool = False):
        self.op, self.at, self.persistent = op, at, persistent
        self.calls: Counter = Counter()
        self.log: list[tuple[str, int, str]] = []
        self.failed: list[tuple[str, int]] = []
        self.torn: bytes | None = None
        self.written: Counter = Counter()
        self._paths: dict[int, str] = {}

    def _fails(self, op: str, path: str) -> bool:
        self.calls[op] += 1
        n = self.calls[op]
        self.log.append((op, n, path))
        if op == self.op and (n == self.at or (self.persistent and n > self.at)):
            self.failed.append((op, n))
            return True
        return False

    def _error(self, op: str, code: int = errno.EIO) -> OSError:
        return OSError(code, f"injected {op} fault (call {self.calls[op]})")

    def create(self, path):
        if self._fails("create", path):
            raise self._error("create", errno.ENOSPC)
        fd = super().create(path)
        self._paths[fd] = path
        return fd

    def write(self, fd, data):
        path = self._paths[fd]
        if self._fails("write", path):
            done = super().write(fd, bytes(data[: len(data) // 2]))
            self.written[path] += done
            with open(path, "rb") as f:
                self.torn = f.read()
            raise self._error("write", errno.ENOSPC)
        done = super().write(fd, data)
        self.written[path] += done
        return done

    def fsync(self, fd):
        if self._fails("fsync", self._paths[fd]):
            raise self._error("fsync")
        super().fsync(fd)

    def close(self, fd):
        path = self._paths.pop(fd, "")
        super().close(fd)
        if self._fails("close", path):
            raise self._error("close")

    def rename(self, src, dst):
        if self._fails("rename", src):
            raise self._error("rename")
        super().rename(src, dst)
        self.written[dst] = self.written.pop(src, 0)

    def fsync_dir(self, directory):
        if self._fails("fsync_dir", directory):
            raise self._error("fsync_dir")
        super().fsync_dir(directory)


def temp_files(folder: Path) -> list[str]:
    if not folder.is_dir():
        return []
    return sorted(n for n in os.listdir(folder) if n.startswith(".") and n.endswith(".tmp"))


def pack_files(store: Path) -> set[str]:
    folder = store / "chunks"
    return {n for n in os.listdir(folder) if n.endswith(".pack")} if folder.is_dir() else set()


def referenced_packs(store: Path) -> set[str]:
    """The pack files the catalog's chunk rows name, each checked to exist and to hold
    every chunk said to lie in it (never referenced-but-missing or cut short)."""
    sizes: dict[str, int] = {}
    for chunk in chunk_rows(store):
        if chunk.pack is None:
            assert chunk.data is not None, chunk
            continue
        if chunk.pack not in sizes:
            path = store / "chunks" / chunk.pack
            assert path.is_file(), f"a chunk row names {chunk.pack}, which is missing"
            sizes[chunk.pack] = path.stat().st_size
        assert chunk.offset + chunk.length <= sizes[chunk.pack], (chunk.pack, chunk)
    return set(sizes)


def pack_of(store: Path, job: str, seq: int) -> str:
    """The one pack file holding the new chunks of snapshot job@seq (the chunks of the
    snapshot named by no earlier snapshot of the job)."""
    rows = {c.chunk_id: c for c in chunk_rows(store)}
    earlier = {c for s in range(1, seq) for c in chunk_ids(store, job, s)}
    packs = {rows[c].pack for c in chunk_ids(store, job, seq) if c not in earlier}
    assert len(packs) == 1 and None not in packs, packs
    return packs.pop()


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


def _pack_seq(path: str) -> int:
    """The seq of the snapshot a pack (or its temp file) belongs to:
    [.]job.SEQ-eEPOCH.... (serializers/_chunkstore.py)."""
    name = os.path.basename(path).lstrip(".")
    assert name.startswith("job."), path
    return int(name.split(".")[1].split("-e")[0])


def store_for(tmp_path: Path, n: int) -> Path:
    """The store of the test's n-th run (0: the baseline). Every run's path has the
    same length: the canary's path is part of the job's state, and a state of another
    length may be cut into another number of chunks (so written in another number of
    writes)."""
    return tmp_path / f"s{n:04d}"


@pytest.fixture
def baseline(tmp_path, capsys) -> Baseline:
    """An uninterrupted run through a counting (never failing) FaultyFileSystem: the
    result every resumed run must reproduce, and which calls occur for which snapshot."""
    store = store_for(tmp_path, 0)
    fs = FaultyFileSystem()
    home = Home(str(store), fs=fs)
    try:
        result = Job.create(home, ENTRY, [str(store / "canary")], "job").run()
        rows = home.catalog.snapshots("job")
        assert [r.seq for r in rows] == list(range(1, STEPS + 1))
        assert {r.file for r in rows} == {CHUNKED}
    finally:
        home.close()
    snapshot_of, seq = {}, 0
    for op, n, path in fs.log:
        if op == "create":
            seq = _pack_seq(path)
        snapshot_of[(op, n)] = seq
    # One pack per snapshot that adds more than 64 KiB, written atomically; none else.
    assert sorted({_pack_seq(path) for op, _, path in fs.log if op == "create"}) == list(PACKED)
    assert all(fs.calls[op] == len(PACKED) for op in OPS if op != "write")
    assert fs.calls["write"] > 3 * len(PACKED)  # a pack is written in many writes
    assert len(pack_files(store)) == len(PACKED) == len(referenced_packs(store))
    capsys.readouterr()  # its acks
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
    store: Path, op: str, k: int, epochs: list[int], result, acks: list[int], fs
) -> None:
    """The invariants after a run stopped on a fault while writing snapshot k's pack
    under epochs[-1] (earlier failed attempts in `epochs`)."""
    where = f"{op} fault at snapshot {k}"
    folder = store / "chunks"
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
            assert home.verify_row(r)[0]["seq"] == r.seq
        if rows:
            header, payload = home.read_row(rows[-1])
            assert header["seq"] == k - 1 and payload
        # Never a partial pack referenced: the packs are those the chunk rows name
        # (each whole), plus, for a fault at fsync_dir, the complete pack of snapshot k
        # that the rename had put in place before the failure: unacknowledged, so no
        # chunk row names it, but not partial either (every byte written reached it).
        referenced = referenced_packs(store)
        orphans = pack_files(store) - referenced
        if op == "fsync_dir":
            assert sorted(orphans) == sorted(
                n for n in orphans if any(n.startswith(f"job.{k}-e{e}.") for e in epochs)
            ), where
            assert len(orphans) == len(epochs), (where, orphans)
            for name in orphans:
                assert (folder / name).stat().st_size == fs.written[str(folder / name)] > 0
        else:
            assert orphans == set(), where
        # Its writer (this process) is alive: a sweep keeps its pack, and no chunk row
        # is unreferenced (the failed snapshot committed none).
        assert home.sweep_chunks() == (0, 0), where
        assert pack_files(store) == referenced | orphans, where
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
            assert home.verify_row(r)[0]["seq"] == r.seq
        assert home.catalog.get_job("job").status == "done"
        assert home.catalog.get_lease("job") is None
        assert temp_files(store / "chunks") == []
        referenced_packs(store)
    finally:
        home.close()


@pytest.mark.parametrize("kind", ["transient", "persistent"])
@pytest.mark.parametrize("op", OPS)
def test_fault_matrix(op, kind, baseline, tmp_path, capsys):
    """For every call of `op` a full run makes (every pack, every chunk write), that
    call fails (transient: only it; persistent: it and all later calls of op).
    Crash window: inside the atomic write of snapshot k's pack (create, write, fsync,
    close, rename: the pack never appears; fsync_dir: after the rename, before the
    commit). run() raises SnapshotWriteError and is not retried; the catalog lists
    exactly snapshots 1..k-1, the last the agent acknowledged, and each verifies; no
    chunk row names a pack that is missing or too short; no temp file is left; a pack
    left in place is complete, unreferenced, and kept while its writer lives. A
    transient fault is gone: resuming through the same file system completes with the
    uninterrupted result. A persistent one fails the resume again at snapshot k with
    the same invariants; a resume through a healthy file system then completes. A torn
    write's partial bytes, put in place of the pack the completed run wrote for
    snapshot k, are refused (CorruptSnapshot, or TamperedSnapshot where they hold another
    layout's whole chunks)."""
    persistent = kind == "persistent"
    for n in range(1, baseline.calls[op] + 1):
        k = baseline.snapshot_of[(op, n)]
        store = store_for(tmp_path, n)
        fs = FaultyFileSystem(op, n, persistent)
        result, acks = _run(store, fs, resume=False, capsys=capsys)
        assert fs.failed == [(op, n)], (n, result)
        assert [(o, i) for o, i, _ in fs.log if o == "create"][-1:] == [
            ("create", sum(seq <= k for seq in PACKED))
        ], (n, k)  # the failed call belongs to snapshot k's pack, as in the baseline
        _check_after_fault(store, op, k, [1], result, acks, fs)
        torn = fs.torn
        if persistent:
            result, acks = _run(store, fs, resume=True, capsys=capsys)
            assert len(fs.failed) == 2, (n, result)
            _check_after_fault(store, op, k, [1, 2], result, acks, fs)
            fs, epoch = _fs.OS, 3
        else:
            epoch = 2
        result, acks = _run(store, fs, resume=True, capsys=capsys)
        _check_completed(store, baseline, result, epoch, k)
        assert acks == list(range(max(k - 1, 1), STEPS + 1)), (n, acks)
        if op == "write":
            assert torn is not None
            pack = store / "chunks" / pack_of(store, "job", k)
            intact = pack.read_bytes()
            assert len(torn) < len(intact)
            pack.write_bytes(torn)
            home = Home(str(store))
            try:
                # Damaged (a frame cut short) or another chunk's bytes (a torn pack
                # laid out otherwise): refused either way, nothing decoded is used.
                with pytest.raises(
                    (CorruptSnapshot, TamperedSnapshot), match=f"snapshot {k} of job job"
                ):
                    home.read_row(home.catalog.snapshot("job", k))
            finally:
                home.close()
            pack.write_bytes(intact)


def _damages(store: Path, torn: bytes):
    """Ways to damage snapshot 1 of the job (its chunks all in one pack): (what, the
    refusal expected, apply(), undo())."""
    import sqlite3
    from contextlib import closing

    pack = store / "chunks" / pack_of(store, "job", 1)
    intact = pack.read_bytes()
    first = next(c for c in chunk_rows(store) if c.chunk_id == chunk_ids(store, "job", 1)[0])
    assert first.pack == pack.name and first.offset == 0

    def put(data):
        return lambda: pack.write_bytes(data)

    def restore():
        pack.write_bytes(intact)

    def sql(statement, *args):
        def run():
            with closing(sqlite3.connect(store / "catalog.db", isolation_level=None)) as db:
                db.execute(statement, args)

        return run

    def flip(at):
        data = bytearray(intact)
        data[at] ^= 1
        return bytes(data)

    moved = pack.with_name("moved.pack")
    return [
        ("the torn bytes of a failed write", CorruptSnapshot, put(torn), restore),
        ("its last byte cut", CorruptSnapshot, put(intact[:-1]), restore),
        ("cut after its first chunk", CorruptSnapshot, put(intact[: first.length]), restore),
        ("a byte of a chunk's frame header", CorruptSnapshot, put(flip(5)), restore),
        ("a byte of a chunk's content", TamperedSnapshot, put(flip(first.length // 2)), restore),
        (
            "the pack deleted",
            CorruptSnapshot,
            lambda: pack.rename(moved),
            lambda: moved.rename(pack),
        ),
        (
            "a chunk's offset moved",
            (CorruptSnapshot, TamperedSnapshot),
            sql("UPDATE chunks SET offset = offset + 1 WHERE id = ?", first.chunk_id),
            sql("UPDATE chunks SET offset = offset - 1 WHERE id = ?", first.chunk_id),
        ),
        (
            "a chunk's length cut",
            CorruptSnapshot,
            sql("UPDATE chunks SET length = length - 1 WHERE id = ?", first.chunk_id),
            sql("UPDATE chunks SET length = length + 1 WHERE id = ?", first.chunk_id),
        ),
        (
            "a chunk's pack pointed outside the store",
            StoreDamaged,
            sql("UPDATE chunks SET pack = '../../x.pack' WHERE id = ?", first.chunk_id),
            sql("UPDATE chunks SET pack = ? WHERE id = ?", pack.name, first.chunk_id),
        ),
    ]


@pytest.mark.smoke
def test_corrupt_latest_snapshot_is_refused_without_unpickling(baseline, tmp_path, capsys):
    """Crash window: a snapshot damaged after it was committed: its pack replaced by
    the torn bytes of a failed write, cut short, a byte flipped, deleted; its chunk
    rows pointing elsewhere. Resuming refuses it (CorruptSnapshot; TamperedSnapshot for
    content that decodes but is not the chunk; StoreDamaged for a pack outside the
    store), naming the snapshot, and nothing was unpickled: the agent's Canary, whose
    __setstate__ records every unpickling, never ran. Control: with the intact pack
    back, the resume unpickles it (the canary fires) and completes."""
    store = store_for(tmp_path, 1)
    # Torn inside snapshot 2's pack, at its third write.
    at = [n for (op, n), seq in baseline.snapshot_of.items() if op == "write" and seq == 2][2]
    fs = FaultyFileSystem("write", at)
    result, _ = _run(store, fs, resume=False, capsys=capsys)
    assert isinstance(result, SnapshotWriteError)
    assert fs.torn and len(fs.torn) > 0
    canary = store / "canary"
    assert not canary.exists()  # a fresh run unpickles nothing
    home = Home(str(store))
    assert home.catalog.latest("job").seq == 1
    home.close()
    for what, refusal, damage, undo in _damages(store, fs.torn):
        damage()
        home = Home(str(store))
        try:
            with pytest.raises(refusal, match="snapshot 1 of job job"):
                Job.open(home, "job").resume()
        finally:
            home.close()
        assert not canary.exists(), what
        undo()
    result, _ = _run(store, _fs.OS, resume=True, capsys=capsys)
    assert canary.read_text() == "unpickled\n"
    assert isinstance(result, str)


def test_opening_the_store_keeps_a_live_writers_temp_file(tmp_path):
    """Crash window: none; the writer is alive. Opening a Home sweeps temp files of dead
    writers, and so must never remove the temp file of a pack in flight: here this
    very process opens the store (as another thread of an application would) while
    its snapshot's pack is being written. The write must succeed and be committed."""
    store = str(tmp_path)

    class OpenTheStoreMidWrite(_fs.FileSystem):
        opened = False

        def write(self, fd, data):
            if not self.opened:
                self.opened = True
                Home(store).close()
            return super().write(fd, data)

    fs = OpenTheStoreMidWrite()
    home = Home(store, fs=fs)
    try:
        home.catalog.create_job("job", ENTRY.as_dict(), [])
        epoch = home.catalog.acquire_lease("job", Owner.me(), 30)
        header, _ = writer_proc.content("job", 1, epoch)
        payload = random.Random(1).randbytes(300_000)  # a pack, written in many writes
        row = home.write_snapshot("job", 1, epoch, None, header, payload)
        home.commit_snapshot(row)
        assert fs.opened
        assert home.read_row(home.catalog.latest("job"))[1] == payload
        assert len(referenced_packs(tmp_path)) == 1
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


def _expected_pack(home: Home, job: str, seq: int, epoch: int) -> bytes:
    """The bytes of the pack a writer writes for job@seq under epoch after the
    snapshots the catalog lists: writer_proc's payloads are random, so each new chunk
    is stored whole (zstd, deterministic), in body order, each once."""
    codec = _chunks.codec(home.keys.current, False)
    payload = writer_proc.content(job, seq, epoch)[1]
    view, start, out, seen = memoryview(payload), 0, [], set()
    for end in codec.cuts(view):
        content = view[start:end]
        chunk_id = codec.chunk_id(content)
        if chunk_id not in seen and home.catalog.missing_chunks({chunk_id}):
            seen.add(chunk_id)
            out.append(codec.encode(chunk_id, content))
        start = end
    return b"".join(out)


def _check_after_kill(store: Path, job: str, before: list, killed: Killed, stats: Counter) -> list:
    folder = store / "chunks"
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
        # No committed snapshot refers to a missing chunk, a missing pack or one cut
        # short; at most one pack is unreferenced: the complete pack of the next
        # snapshot, renamed in place by the killed writer, never committed.
        referenced = referenced_packs(store)
        orphans = pack_files(store) - referenced
        if orphans:
            stats["pack in place, commit not done"] += 1
            [name] = orphans
            assert name.startswith(f"{job}.{latest + 1}-e{killed.epoch}.{killed.pid}-"), name
            data = (folder / name).read_bytes()
            assert data == _expected_pack(home, job, latest + 1, killed.epoch)
        # Its writer is gone: the sweep (`snaprun prune`) deletes exactly that pack and
        # no chunk (every chunk row belongs to a committed snapshot).
        assert home.sweep_chunks() == (0, len(orphans))
        assert pack_files(store) == referenced
        for r in rows:
            assert home.verify_row(r)[0]["seq"] == r.seq
        lease = home.catalog.get_lease(job)
        assert (lease.owner.pid, lease.epoch) == (killed.pid, killed.epoch)
        assert (
            home.catalog.effective_status(home.catalog.get_job(job), time.time()) == "interrupted"
        )
    finally:
        home.close()
    return rows


WINDOWS = (
    "killed mid-write (temp file left)",
    "pack in place, commit not done",
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
            rows = []
            for _ in range(min(block, iterations - first)):
                killed = _kill_one(runner, store, "w", rng.uniform(0, 0.030))
                rows = _check_after_kill(store, "w", rows, killed, stats)
                stats["acks"] += len(killed.acks)
            home = Home(str(store))
            try:  # every listed snapshot of the block verifies
                listed = home.catalog.snapshots("w")
                for r in listed:
                    assert home.verify_row(r)[0]["seq"] == r.seq
                stats["packed"] += sum(
                    1 for r in listed if any(c.pack for c in _chunks_of(store, "w", r.seq))
                )
            finally:
                home.close()
    finally:
        runner.close()
    return stats


def _chunks_of(store: Path, job: str, seq: int) -> list:
    rows = {c.chunk_id: c for c in chunk_rows(store)}
    return [rows[c] for c in chunk_ids(store, job, seq)]


def test_sigkill_writer_at_random_points(tmp_path):
    """Crash window: anywhere in a writer's loop: mid-write of a pack's temp file,
    between fsync and rename, between rename and commit, inside the SQLite commit (of
    a snapshot with a pack or one inline), between the commit and the printed ack. 200
    writer processes (seeded delays), one SIGKILL each, 50 per store, each starting
    where the killed one left off (its lease taken over without --force: the pid is
    gone). After each kill, reopening the store leaves no temp file; the latest listed
    snapshot is the last acked or the one after (committed, ack not printed); every
    newly listed snapshot verifies and holds exactly the bytes written for it; no chunk
    row names a missing or short pack; at most one pack is unreferenced, the complete
    pack of the next snapshot, and the sweep deletes it (its writer is gone) and
    nothing else."""
    stats = _sigkill_sweep(tmp_path, ForkServer(), 200, seed=20261129)
    print(dict(stats))
    assert stats["acks"] > 0 and stats["packed"] > 0
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
