"""Store conformance: every Store implementation (serializers/_store.py) behaves the
same, so the runtime can rely on it. The suite runs once per backend in BACKENDS (today
SQLite; a PostgreSQL store is added there, with a factory that makes a fresh database).

What a backend must accept for these tests: `Factory(location)` and
`Factory(location, clock=callable)` (an injectable clock, so lease expiry and
heartbeat age are tested without sleeping), and it must be constructible in another
process from the same `location` (the concurrency tests race real processes).

Lease owners are real processes of this host: a live `sleep` process and a finished
(reaped) one, so "live" and "dead" come from the operating system, not from a flag.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from snapstate._errors import (
    JobExists,
    JobNotFound,
    LeaseHeld,
    SnapshotNotFound,
    StaleWriter,
    StoreError,
)
from snapstate.serializers._catalog import Catalog as Store
from snapstate.serializers._fs import pid_alive, process_start
from snapstate.serializers._store import (
    EffectRow,
    EventRow,
    JobRow,
    LeaseRow,
    Owner,
    SnapshotRow,
)

HOST = socket.gethostname()
ENTRY = {"module": "agent", "function": "main", "path": "/agents/agent.py", "search_path": None}
T0 = 1_000_000.0


# ------------------------------------------------------------------ backends
@dataclasses.dataclass
class Backend:
    """How to open one store implementation: `factory` is "module:Class", importable in
    a subprocess; `location` is the one argument it takes (a directory, a DSN)."""

    name: str
    factory: str
    location: str
    cleanup: object = None
    opened: list = dataclasses.field(default_factory=list)

    def open(self, clock=None) -> Store:
        module, _, name = self.factory.partition(":")
        cls = getattr(importlib.import_module(module), name)
        store = cls(self.location) if clock is None else cls(self.location, clock=clock)
        self.opened.append(store)
        return store

    def close_all(self) -> None:
        for store in self.opened:
            store.close()
        if callable(self.cleanup):
            self.cleanup()


def _sqlite(tmp_path: Path) -> Backend:
    return Backend("sqlite", "snapstate.serializers._sqlite:SqliteCatalog", str(tmp_path / "store"))


# A PostgreSQL backend goes here: a function of tmp_path that creates a fresh database
# (or schema), returns its Backend (cleanup drops it) and pytest.skip()s without a server.
BACKENDS = {"sqlite": _sqlite}


@pytest.fixture(params=sorted(BACKENDS))
def make_backend(request):
    """The factory of one backend: a fresh, empty store per call."""
    return BACKENDS[request.param]


@pytest.fixture
def backend(make_backend, tmp_path):
    b = make_backend(tmp_path)
    yield b
    b.close_all()


class FakeClock:
    """An injectable store clock: time moves only when a test moves it."""

    def __init__(self, now: float = T0):
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def store(backend, clock) -> Store:
    return backend.open(clock=clock)


@pytest.fixture(scope="module")
def live_pid():
    """A live process on this host (a lease owner that is still running)."""
    proc = subprocess.Popen(["sleep", "600"])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def dead_pid():
    """The pid of a process of this host that finished (and was reaped)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert not pid_alive(proc.pid)
    return proc.pid


def live_owner(pid: int) -> Owner:
    return Owner(HOST, pid, process_start(pid))


def make_job(store: Store, job_id: str = "job", **kw) -> JobRow:
    return store.create_job(job_id, ENTRY, ["--x", "1"], **kw)


def row(
    seq: int, epoch: int, job_id: str = "job", label: str | None = None, created: float = T0
) -> SnapshotRow:
    return SnapshotRow(
        job_id, seq, label, f"snapshots/{job_id}/{seq:06d}-e{epoch}.snap", 100 + seq, created, epoch
    )


def state(store: Store, job_id: str = "job"):
    """Everything the store holds about a job (to prove that nothing changed)."""
    return (
        store.get_job(job_id),
        store.snapshots(job_id),
        store.events(job_id),
        store.get_lease(job_id),
    )


# ------------------------------------------------------------------ jobs
def test_create_and_get_job(store, clock):
    """create_job stores every field (entry and argv round-trip), starts as running with
    no resumes, stamps created/updated with the store clock, and logs `created`."""
    created = make_job(store)
    got = store.get_job("job")
    assert got == created
    assert got == JobRow("job", ENTRY, ["--x", "1"], "running", T0, T0, 0, None, None, None)
    fork = store.create_job("child", ENTRY, [], parent="job", fork_seq=3)
    assert (fork.parent, fork.fork_seq) == ("job", 3)
    assert [e.kind for e in store.events("job")] == ["created"]
    assert [e.kind for e in store.events("child")] == ["created"]
    assert "job@3" in store.events("child")[0].detail


def test_create_existing_job_raises_job_exists_and_changes_nothing(store, clock):
    """A taken id raises JobExists (a StoreError); the existing job is untouched."""
    make_job(store)
    before = state(store)
    clock.advance(5)
    with pytest.raises(JobExists, match="job"):
        store.create_job("job", {"module": "other", "function": "f"}, [])
    assert state(store) == before
    assert issubclass(JobExists, StoreError)


def test_unknown_job_raises_job_not_found(store):
    """get_job, set_status and acquire_lease of an unknown id raise JobNotFound."""
    make_job(store)
    with pytest.raises(JobNotFound, match="nope"):
        store.get_job("nope")
    with pytest.raises(JobNotFound):
        store.set_status("nope", "done")
    with pytest.raises(JobNotFound):
        store.acquire_lease("nope", Owner.me(), 30)
    assert [j.job_id for j in store.list_jobs()] == ["job"]


def test_list_jobs_oldest_first(store, clock):
    """list_jobs returns every job, oldest first (creation time, then id)."""
    assert store.list_jobs() == []
    make_job(store, "b")
    clock.advance(1)
    make_job(store, "a")
    make_job(store, "c")  # same time as "a": by id
    clock.advance(1)
    make_job(store, "0-last")
    assert [j.job_id for j in store.list_jobs()] == ["b", "a", "c", "0-last"]


def test_set_status_without_epoch(store, clock):
    """Without an epoch, set_status always applies: status, error and updated change
    and the status is logged with the error as detail."""
    make_job(store)
    clock.advance(7)
    store.set_status("job", "failed", error="ValueError: boom")
    job = store.get_job("job")
    assert (job.status, job.error, job.updated) == ("failed", "ValueError: boom", T0 + 7)
    store.set_status("job", "waiting")
    job = store.get_job("job")
    assert (job.status, job.error) == ("waiting", None)
    assert [(e.kind, e.detail) for e in store.events("job")][1:] == [
        ("failed", "ValueError: boom"),
        ("waiting", ""),
    ]


def test_set_status_with_the_current_epoch(store, live_pid):
    """With the lease's current epoch, set_status applies."""
    make_job(store)
    epoch = store.acquire_lease("job", live_owner(live_pid), 30)
    store.set_status("job", "done", epoch=epoch)
    assert store.get_job("job").status == "done"


def test_set_status_with_a_stale_epoch_raises_and_changes_nothing(store, clock, live_pid, dead_pid):
    """With an epoch that no longer holds the lease (taken over, released, or never
    held), set_status raises StaleWriter and changes nothing: not the status, not the
    error, not `updated`, not the timeline."""
    make_job(store)
    first = store.acquire_lease("job", Owner(HOST, dead_pid), 30)
    second = store.acquire_lease("job", live_owner(live_pid), 30)  # dead pid: taken over
    assert second > first
    before = state(store)
    clock.advance(3)
    with pytest.raises(StaleWriter, match=f"epoch {first}"):
        store.set_status("job", "failed", epoch=first, error="stale")
    with pytest.raises(StaleWriter):
        store.set_status("job", "done", epoch=second + 1)
    assert state(store) == before
    store.release_lease("job", second)
    with pytest.raises(StaleWriter):
        store.set_status("job", "done", epoch=second)
    assert store.get_job("job").status == "running"


# ------------------------------------------------------------------ leases
def test_acquire_returns_increasing_epochs(store, clock, live_pid):
    """Every acquisition returns a larger epoch than any before it (after a release,
    after a takeover), sets the job running with no error, and counts resumes only
    when resuming=True."""
    make_job(store)
    me = live_owner(live_pid)
    epochs = [store.acquire_lease("job", me, 30)]
    store.set_status("job", "failed", epoch=epochs[-1], error="boom")
    store.release_lease("job", epochs[-1])
    epochs.append(store.acquire_lease("job", me, 30, resuming=True))
    job = store.get_job("job")
    assert (job.status, job.error, job.resume_count) == ("running", None, 1)
    clock.advance(31)  # expired: taken over
    epochs.append(store.acquire_lease("job", Owner("elsewhere", 1), 30, resuming=True))
    store.release_lease("job", epochs[-1])
    epochs.append(store.acquire_lease("job", me, 30))
    assert epochs == sorted(set(epochs)) and len(epochs) == 4
    assert store.get_job("job").resume_count == 2
    assert store.get_lease("job").epoch == epochs[-1]
    other = make_job(store, "other")
    assert other.resume_count == 0
    assert store.acquire_lease("other", me, 30) >= 1


def test_get_lease_fields(store, clock, live_pid):
    """get_lease returns owner (host, pid, start time), epoch, expiry and heartbeat;
    None when the job has no lease."""
    make_job(store)
    assert store.get_lease("job") is None
    owner = live_owner(live_pid)
    epoch = store.acquire_lease("job", owner, 30)
    assert store.get_lease("job") == LeaseRow("job", owner, epoch, T0 + 30, T0)
    assert store.get_lease("job").is_live(T0 + 29)
    assert not store.get_lease("job").is_live(T0 + 30)


def test_lease_held_while_another_owner_holds_a_live_lease(store, clock, live_pid):
    """While another owner's lease is live (live pid on this host, or any owner on
    another host before expiry) acquire_lease raises LeaseHeld naming the holder, and
    nothing changes: same lease, same epoch, no resume counted, no event."""
    make_job(store)
    make_job(store, "remote")
    holder = live_owner(live_pid)
    store.acquire_lease("job", holder, 30)
    store.acquire_lease("remote", Owner("other-host", 4242), 30)
    before = state(store), state(store, "remote")
    clock.advance(29)
    with pytest.raises(LeaseHeld) as info:
        store.acquire_lease("job", Owner.me(), 30, resuming=True)
    assert f"pid {live_pid} on {HOST}" in str(info.value)
    with pytest.raises(LeaseHeld, match="pid 4242 on other-host"):
        store.acquire_lease("remote", Owner.me(), 30, resuming=True)
    with pytest.raises(LeaseHeld):  # the holder itself gets no second lease either
        store.acquire_lease("job", holder, 30)
    assert (state(store), state(store, "remote")) == before
    assert issubclass(LeaseHeld, StoreError)


@pytest.mark.parametrize("how", ["expired", "dead-pid", "reused-pid", "zombie"])
def test_stale_lease_is_taken_over_without_force(store, clock, live_pid, dead_pid, how):
    """A stale lease is taken over without force: expired (any host), or held on this
    host by a process that is gone: a dead pid, a pid now used by another process (its
    start time differs), or a killed runner not yet reaped (a zombie). The new epoch
    is larger and the lease names the new owner."""
    make_job(store)
    zombie = None
    if how == "expired":
        holder = Owner("other-host", 4242)
    elif how == "dead-pid":
        holder = Owner(HOST, dead_pid, 0)
    elif how == "reused-pid":
        holder = Owner(HOST, live_pid, process_start(live_pid) + 1)
    else:
        zombie = subprocess.Popen(["sleep", "600"])
        holder = live_owner(zombie.pid)
        zombie.send_signal(signal.SIGKILL)
        deadline = time.monotonic() + 10
        while pid_alive(zombie.pid):
            assert time.monotonic() < deadline, "the killed process never became a zombie"
            time.sleep(0.001)
        assert os.path.exists(f"/proc/{zombie.pid}")  # not reaped yet
    try:
        first = store.acquire_lease("job", holder, 30)
        if how == "expired":
            with pytest.raises(LeaseHeld):
                store.acquire_lease("job", Owner.me(), 30)
            clock.advance(30)
        assert not store.get_lease("job").is_live(clock())
        second = store.acquire_lease("job", Owner.me(), 30, resuming=True)
    finally:
        if zombie is not None:
            zombie.wait()
    assert second == first + 1
    lease = store.get_lease("job")
    assert (lease.owner, lease.epoch) == (Owner.me(), second)
    assert store.effective_status(store.get_job("job"), clock()) == "running"


def test_force_never_takes_over_a_live_lease(store, clock, live_pid):
    """force never takes over a live lease, not even once the holder missed two
    heartbeats (a paused runner may still send what it dispatched until its lease
    expires; the runtime waits it out): LeaseHeld with a message saying so, nothing
    changed. Once the lease has expired it is taken, with or without force, and a
    forced takeover is noted in the timeline. A heartbeat makes the lease fresh again."""
    make_job(store)
    holder = live_owner(live_pid)
    first = store.acquire_lease("job", holder, 100)  # expires at T0 + 100
    clock.advance(20)  # heartbeat 20 s old
    before = state(store)
    with pytest.raises(
        LeaseHeld,
        match="--force never takes over a runner that is heartbeating; it waits out the lease",
    ):
        store.acquire_lease("job", Owner.me(), 30, force=True)
    store.heartbeat("job", first, 100)  # heartbeat at T0 + 20
    clock.advance(68)  # 68 s old: two beats missed
    assert store.get_lease("job").is_live(clock())
    for force in (True, False):
        with pytest.raises(LeaseHeld):
            store.acquire_lease("job", Owner.me(), 30, force=force)
    clock.advance(31.9)  # expires in 0.1 s
    with pytest.raises(LeaseHeld):
        store.acquire_lease("job", Owner.me(), 30, force=True)
    lease = store.get_lease("job")
    assert (lease.owner, lease.epoch, lease.heartbeat) == (holder, first, T0 + 20)
    assert store.events("job") == before[2]  # refusals left no trace
    clock.advance(0.1)  # expired
    second = store.acquire_lease("job", Owner.me(), 30, force=True)
    assert second == first + 1
    assert store.get_lease("job").owner == Owner.me()
    assert "forced, after the previous lease expired" in store.events("job")[-1].detail


def test_heartbeat_extends_the_lease(store, clock, live_pid):
    """heartbeat(epoch, ttl) moves expiry to now + ttl and records the heartbeat, so a
    lease that would have expired stays held."""
    make_job(store, "beating")
    make_job(store, "silent")
    holder = Owner("other-host", 4242)  # liveness by expiry alone
    beating = store.acquire_lease("beating", holder, 10)
    store.acquire_lease("silent", holder, 10)
    clock.advance(8)
    store.heartbeat("beating", beating, 10)
    lease = store.get_lease("beating")
    assert (lease.expires, lease.heartbeat) == (T0 + 18, T0 + 8)
    clock.advance(7)  # T0 + 15: silent expired, beating not
    with pytest.raises(LeaseHeld):
        store.acquire_lease("beating", live_owner(live_pid), 10)
    assert store.acquire_lease("silent", live_owner(live_pid), 10) == 2


def test_heartbeat_after_takeover_or_release_raises_stale_writer(store, clock, live_pid):
    """A heartbeat with an epoch that lost the lease (taken over, or released) raises
    StaleWriter and leaves the current lease as it was."""
    make_job(store)
    old = store.acquire_lease("job", Owner("other-host", 4242), 10)
    clock.advance(11)
    new = store.acquire_lease("job", live_owner(live_pid), 10)
    lease = store.get_lease("job")
    clock.advance(1)
    with pytest.raises(StaleWriter, match=f"epoch {old}"):
        store.heartbeat("job", old, 10)
    assert store.get_lease("job") == lease
    store.heartbeat("job", new, 10)
    store.release_lease("job", new)
    with pytest.raises(StaleWriter):
        store.heartbeat("job", new, 10)
    assert store.get_lease("job") is None


def test_release(store, clock, live_pid):
    """release_lease with the current epoch removes the lease (the job shows as
    interrupted if still running); with an old epoch it removes nothing; with no lease
    it is a no-op."""
    make_job(store)
    store.release_lease("job", 1)  # nothing to release
    old = store.acquire_lease("job", Owner("other-host", 1), 10)
    clock.advance(11)
    new = store.acquire_lease("job", live_owner(live_pid), 10)
    store.release_lease("job", old)
    assert store.get_lease("job").epoch == new
    store.release_lease("job", new)
    assert store.get_lease("job") is None
    assert store.effective_status(store.get_job("job"), clock()) == "interrupted"
    store.release_lease("job", new)


# ------------------------------------------------------------------ snapshots
@pytest.mark.smoke
def test_commit_snapshot_in_sequence(store, clock, live_pid):
    """commit_snapshot records seq = latest + 1 with every field, moves the job's
    `updated` to the snapshot's time and logs it; snapshots() lists by sequence."""
    make_job(store)
    epoch = store.acquire_lease("job", live_owner(live_pid), 30)
    assert store.latest("job") is None
    rows = [
        row(1, epoch, label="first", created=T0 + 1),
        row(2, epoch, created=T0 + 2),
        row(3, epoch, label="x", created=T0 + 3),
    ]
    for r in rows:
        store.commit_snapshot(r)
    assert store.snapshots("job") == rows
    assert store.latest("job") == rows[-1]
    assert store.snapshot("job", 2) == rows[1]
    assert store.get_job("job").updated == T0 + 3
    assert [e.detail for e in store.events("job") if e.kind == "snapshot"] == [
        "1 (first)",
        "2",
        "3 (x)",
    ]
    with pytest.raises(SnapshotNotFound, match="4"):
        store.snapshot("job", 4)


def test_commit_snapshot_seq_must_be_latest_plus_one(store, live_pid):
    """A commit whose seq is not latest + 1 (a repeat, a gap, a step back) raises
    StaleWriter and changes nothing."""
    make_job(store)
    epoch = store.acquire_lease("job", live_owner(live_pid), 30)
    store.commit_snapshot(row(1, epoch))
    store.commit_snapshot(row(2, epoch))
    before = state(store)
    for seq in (1, 2, 4, 10, 0):
        with pytest.raises(StaleWriter):
            store.commit_snapshot(row(seq, epoch, label="intruder"))
        assert state(store) == before, seq
    store.commit_snapshot(row(3, epoch))
    assert [r.seq for r in store.snapshots("job")] == [1, 2, 3]


def test_stale_writer_commit_changes_nothing(store, clock, live_pid):
    """The commit of a writer whose epoch lost the lease raises StaleWriter even with
    the right seq, and leaves snapshots(), events(), get_job() and the lease unchanged;
    the same holds with no lease at all (released)."""
    make_job(store)
    old = store.acquire_lease("job", Owner("other-host", 4242), 10)
    store.commit_snapshot(row(1, old))
    clock.advance(11)
    new = store.acquire_lease("job", live_owner(live_pid), 10, resuming=True)
    before = state(store)
    clock.advance(1)
    with pytest.raises(StaleWriter, match=f"epoch {old}"):
        store.commit_snapshot(row(2, old, created=clock()))
    assert state(store) == before
    store.commit_snapshot(row(2, new))
    store.release_lease("job", new)
    before = state(store)
    with pytest.raises(StaleWriter):
        store.commit_snapshot(row(3, new))
    assert state(store) == before


def test_commit_needs_a_lease(store):
    """A job nobody holds accepts no fenced commit (epoch 0 or any other)."""
    make_job(store)
    before = state(store)
    for epoch in (0, 1):
        with pytest.raises(StaleWriter):
            store.commit_snapshot(row(1, epoch))
    assert state(store) == before


def test_delete_snapshot(store, live_pid):
    """delete_snapshot forgets one row (others stay); the sequence then continues from
    the new latest (a rewind); deleting a missing row is a no-op."""
    make_job(store)
    epoch = store.acquire_lease("job", live_owner(live_pid), 30)
    for seq in (1, 2, 3):
        store.commit_snapshot(row(seq, epoch))
    store.delete_snapshot("job", 3)
    store.delete_snapshot("job", 2)
    store.delete_snapshot("job", 7)
    assert [r.seq for r in store.snapshots("job")] == [1]
    with pytest.raises(StaleWriter):
        store.commit_snapshot(row(3, epoch))
    store.commit_snapshot(row(2, epoch, label="again"))
    assert [(r.seq, r.label) for r in store.snapshots("job")] == [(1, None), (2, "again")]


def test_add_snapshot_unfenced(store, live_pid):
    """add_snapshot_unfenced records rows with no lease (fork, import), in any order;
    a taken seq raises StoreError and keeps the original row; fenced commits continue
    after the imported latest."""
    make_job(store)
    imported = [row(3, 0, label="c"), row(1, 0, label="a")]
    for r in imported:
        store.add_snapshot_unfenced(r)
    assert store.snapshots("job") == sorted(imported, key=lambda r: r.seq)
    with pytest.raises(StoreError, match="3"):
        store.add_snapshot_unfenced(row(3, 0, label="dup"))
    assert store.snapshot("job", 3).label == "c"
    epoch = store.acquire_lease("job", live_owner(live_pid), 30)
    store.commit_snapshot(row(4, epoch))
    assert [r.seq for r in store.snapshots("job")] == [1, 3, 4]


# ------------------------------------------------------------------ admin operations
def test_fork_job_copies_rows_and_inherited_effects_in_one_transaction(store, live_pid):
    """fork_job creates the job with the parent's snapshot rows up to the fork point
    (the copies as given, epoch 0) and its ledger rows up to the inherited count, whatever
    the parent's lease; a taken id, a missing parent or snapshot, or files that no
    longer match the parent's rows raise with nothing changed."""
    make_job(store)
    epoch = store.acquire_lease("job", live_owner(live_pid), 30)
    for seq in (1, 2, 3):
        store.commit_snapshot(row(seq, epoch, label=f"l{seq}"))
    store.record_effects([effect(1), effect(2), effect(3)], epoch=epoch)
    make_job(store, "taken")
    before = state(store), state(store, "taken"), store.effects("job")
    files = {
        seq: dataclasses.replace(
            row(seq, 0, label=f"l{seq}"), job_id="twin", file=f"snapshots/twin/{seq}"
        )
        for seq in (1, 2)
    }
    for args, error in (
        (("job", 2, "taken", files, 1), JobExists),
        (("nope", 2, "twin", files, 1), JobNotFound),
        (("job", 7, "twin", files, 1), SnapshotNotFound),
        (("job", 3, "twin", files, 1), StoreError),
    ):
        with pytest.raises(error):
            store.fork_job(*args)
        with pytest.raises(JobNotFound):
            store.get_job("twin")
        assert (state(store), state(store, "taken"), store.effects("job")) == before
    twin = store.fork_job("job", 2, "twin", files, 1)
    assert (twin.job_id, twin.parent, twin.fork_seq, twin.status, twin.entry, twin.argv) == (
        "twin",
        "job",
        2,
        "running",
        ENTRY,
        ["--x", "1"],
    )
    assert [(r.seq, r.label, r.file, r.epoch) for r in store.snapshots("twin")] == [
        (1, "l1", "snapshots/twin/1", 0),
        (2, "l2", "snapshots/twin/2", 0),
    ]
    assert store.effects("twin") == [dataclasses.replace(effect(1), job_id="twin")]
    assert store.get_lease("twin") is None
    assert ("forked", "snapshot 2 as job twin") in [(e.kind, e.detail) for e in store.events("job")]


def test_import_job_creates_the_job_and_its_row_in_one_transaction(store):
    """import_job creates a job holding one snapshot row; a taken id raises JobExists
    and changes nothing."""
    make_job(store)
    before = state(store)
    with pytest.raises(JobExists):
        store.import_job("job", ENTRY, [], row(3, 0), parent="x", source="/tmp/f.snap")
    assert state(store) == before
    job = store.import_job(
        "copy", ENTRY, ["a"], row(3, 0, "copy", label="c"), parent="job", source="/tmp/f.snap"
    )
    assert (job.parent, job.fork_seq, job.argv) == ("job", 3, ["a"])
    assert store.snapshots("copy") == [row(3, 0, "copy", label="c")]
    assert [e.kind for e in store.events("copy")] == ["created", "imported"]


def test_reconcile_effect_checks_the_lease_and_writes_in_one_transaction(store, clock, live_pid):
    """reconcile_effect is refused (LeaseHeld) while a live lease holds the job, with
    the ledger, metrics and job unchanged; once the lease has expired it sets
    the effect's state, result and note, counts it and turns a parked job
    interrupted. An unknown job, an unknown or value effect, or a settled effect is
    refused with nothing changed."""
    make_job(store)
    store.record_effects(
        [
            effect(1, state="ambiguous"),
            effect(2, state="confirmed"),
            dataclasses.replace(effect(3, state="ambiguous"), kind="value"),
        ],
        epoch=None,
    )
    epoch = store.acquire_lease("job", live_owner(live_pid), 30)
    store.set_status("job", "parked", epoch=epoch)
    before = state(store), store.effects("job"), store.metrics("job")
    args = dict(state="confirmed", result=b"sealed", note="by hand")
    with pytest.raises(LeaseHeld):
        store.reconcile_effect("job", 1, **args)
    assert (state(store), store.effects("job"), store.metrics("job")) == before
    clock.advance(31)  # the holder's lease expired (not released)
    for ordinal, error in ((2, "confirmed"), (3, "no effect 3"), (9, "no effect 9")):
        with pytest.raises(StoreError, match=error):
            store.reconcile_effect("job", ordinal, **args)
    with pytest.raises(JobNotFound):
        store.reconcile_effect("nope", 1, **args)
    assert (state(store), store.effects("job"), store.metrics("job")) == before
    settled = store.reconcile_effect("job", 1, **args)
    assert (settled.state, settled.result, settled.note, settled.updated) == (
        "confirmed",
        b"sealed",
        "by hand",
        T0 + 31,
    )
    assert store.effect("job", 1) == settled and store.metrics("job") == {"reconciled": 1}
    assert store.get_job("job").status == "interrupted"


def test_prune_job_is_guarded_by_the_lease(store, clock, live_pid):
    """prune_job drops a done job entirely (with finished) or the snapshots beyond the
    rules, never the latest, and returns what it dropped; while a live lease holds the
    job it raises LeaseHeld with nothing changed."""
    make_job(store)
    epoch = store.acquire_lease("job", live_owner(live_pid), 30)
    for seq in (1, 2, 3, 4):
        store.commit_snapshot(row(seq, epoch, created=T0 + seq))
    before = state(store)
    with pytest.raises(LeaseHeld):
        store.prune_job("job", finished=True, keep_last=1, older_than=None)
    assert state(store) == before
    store.release_lease("job", epoch)
    assert store.prune_job("job", finished=False, keep_last=None, older_than=None) == (False, [])
    dropped, rows = store.prune_job("job", finished=False, keep_last=3, older_than=T0 + 3)
    assert (dropped, [r.seq for r in rows]) == (False, [1, 2])
    dropped, rows = store.prune_job("job", finished=False, keep_last=None, older_than=T0 + 99)
    assert (dropped, [r.seq for r in rows]) == (False, [3])
    assert [r.seq for r in store.snapshots("job")] == [4]
    assert store.prune_job("job", finished=True, keep_last=None, older_than=None) == (False, [])
    store.set_status("job", "done")
    dropped, rows = store.prune_job("job", finished=True, keep_last=None, older_than=None)
    assert (dropped, [r.seq for r in rows]) == (True, [4])
    with pytest.raises(JobNotFound):
        store.get_job("job")


def test_events_are_kept_in_order(backend):
    """events() returns the job's timeline in the order it happened, even when the
    clock stands still or goes backwards; other jobs' events are not mixed in."""
    clock = FakeClock()
    store = backend.open(clock=clock)
    make_job(store)
    make_job(store, "other")
    epoch = store.acquire_lease("job", Owner("other-host", 1), 30)
    store.commit_snapshot(row(1, epoch))
    clock.advance(-100)
    store.log_event("job", "note", "clock went back")
    store.log_event("other", "note", "not mine")
    store.commit_snapshot(row(2, epoch, label="two"))
    store.set_status("job", "done", epoch=epoch)
    events = store.events("job")
    assert [(e.kind, e.detail) for e in events] == [
        ("created", "entry /agents/agent.py"),
        ("lease", "epoch 1 taken by pid 1 on other-host"),
        ("snapshot", "1"),
        ("note", "clock went back"),
        ("snapshot", "2 (two)"),
        ("done", ""),
    ]
    assert all(isinstance(e, EventRow) and e.job_id == "job" for e in events)
    assert [e.at for e in events][:3] == [T0, T0, T0]
    assert [(e.kind, e.detail) for e in store.events("other")] == [
        ("created", "entry /agents/agent.py"),
        ("note", "not mine"),
    ]


def test_effective_status(store, clock, live_pid, dead_pid):
    """A running job is shown as running only while its lease is live; with no lease,
    an expired one, or one held by a dead process of this host it is 'interrupted'.
    Every other status is shown as stored."""
    make_job(store)
    job = lambda: store.get_job("job")  # noqa: E731
    assert store.effective_status(job(), clock()) == "interrupted"  # no lease
    epoch = store.acquire_lease("job", Owner("other-host", 1), 30)
    assert store.effective_status(job(), clock()) == "running"
    assert store.effective_status(job(), T0 + 30) == "interrupted"  # expired
    clock.advance(31)
    store.acquire_lease("job", Owner(HOST, dead_pid), 30)
    assert store.effective_status(job(), clock()) == "interrupted"  # dead pid
    clock.advance(31)
    epoch = store.acquire_lease("job", live_owner(live_pid), 30)
    assert store.effective_status(job(), clock()) == "running"
    for status in ("waiting", "done", "failed", "parked", "interrupted"):
        store.set_status("job", status, epoch=epoch)
        assert store.effective_status(job(), clock()) == status


def test_delete_job(store, live_pid):
    """delete_job removes the job and all its rows (snapshots, lease, events); other
    jobs are untouched; the id is then free."""
    make_job(store)
    make_job(store, "other")
    for job_id in ("job", "other"):
        epoch = store.acquire_lease(job_id, live_owner(live_pid), 30)
        store.commit_snapshot(row(1, epoch, job_id))
    other = state(store, "other")
    store.delete_job("job")
    with pytest.raises(JobNotFound):
        store.get_job("job")
    assert store.snapshots("job") == [] and store.events("job") == []
    assert store.get_lease("job") is None
    assert [j.job_id for j in store.list_jobs()] == ["other"]
    assert state(store, "other") == other
    make_job(store)
    assert store.snapshots("job") == [] and store.get_lease("job") is None


# ------------------------------------------------------------------ effect ledger, metrics
def effect(ordinal: int, job_id: str = "job", state: str = "dispatched", **kw) -> EffectRow:
    return EffectRow(
        job_id,
        ordinal,
        f"key-{ordinal}",
        "agent.charge",
        "agent.py:12",
        f"digest-{ordinal}",
        "(amount=5)",
        "write",
        state,
        **{"result": b"\x00signed", "attempts": 1, "created": T0, "updated": T0, **kw},
    )


def test_record_effects_round_trip_and_are_fenced(store, clock, live_pid):
    """record_effects stores rows (every field, bytes results included) read back by
    effect() and effects() in ordinal order; a batch is all-or-nothing: an ordinal
    recorded twice raises StoreError and nothing of that batch is kept; replace=True
    overwrites; a stale epoch raises StaleWriter with nothing changed; epoch None
    records without a lease; an empty batch is a no-op."""
    make_job(store)
    old = store.acquire_lease("job", Owner("other-host", 1), 10)
    rows = [effect(2), effect(1, external_id="ext-1", note="n")]
    store.record_effects(rows, epoch=old)
    assert store.effects("job") == [rows[1], rows[0]]
    assert store.effect("job", 2) == rows[0] and store.effect("job", 3) is None
    with pytest.raises(StoreError, match="effect"):
        store.record_effects([effect(3), effect(1, state="confirmed")], epoch=old)
    assert store.effects("job") == [rows[1], rows[0]]
    confirmed = effect(1, state="confirmed", attempts=2, updated=T0 + 1)
    store.record_effects([confirmed], epoch=old, replace=True)
    assert store.effect("job", 1) == confirmed
    clock.advance(11)
    new = store.acquire_lease("job", live_owner(live_pid), 10)
    before = store.effects("job"), state(store)
    for batch, replace in (([effect(3)], False), ([effect(1, state="failed")], True)):
        with pytest.raises(StaleWriter):
            store.record_effects(batch, epoch=old, replace=replace)
        assert (store.effects("job"), state(store)) == before
    store.record_effects([], epoch=old)
    store.record_effects([effect(3)], epoch=new)
    store.release_lease("job", new)
    store.record_effects([effect(4)], epoch=None)
    assert [e.ordinal for e in store.effects("job")] == [1, 2, 3, 4]
    make_job(store, "other")
    assert store.effects("other") == []


def test_metrics(store):
    """bump_metric adds to a counter (starting from nothing), set_metric overwrites;
    metrics() returns the job's own, and delete_job removes them with the ledger."""
    make_job(store)
    make_job(store, "other")
    assert store.metrics("job") == {}
    store.bump_metric("job", "retries")
    store.bump_metric("job", "retries", by=4)
    store.set_metric("job", "restart_to_progress_s", 1.5)
    store.set_metric("job", "restart_to_progress_s", 0.25)
    store.bump_metric("other", "retries")
    assert store.metrics("job") == {"retries": 5, "restart_to_progress_s": 0.25}
    store.record_effects([effect(1)], epoch=None)
    store.delete_job("job")
    assert store.metrics("job") == {} and store.effects("job") == []
    assert store.metrics("other") == {"retries": 1}


# ------------------------------------------------------------------ concurrency
def test_threads_committing_the_same_seq_exactly_one_wins(backend):
    """Two threads, each with its own store connection, commit the same seq at the same
    moment, 30 rounds: exactly one wins each round, the other gets StaleWriter, and the
    catalog holds the winner's row."""
    store = backend.open()
    make_job(store)
    epoch = store.acquire_lease("job", Owner.me(), 300)
    rounds, barrier = 30, threading.Barrier(2, timeout=60)
    wins: dict[int, list[int]] = {0: [], 1: []}
    losses: dict[int, list[int]] = {0: [], 1: []}
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        mine = backend.open()
        try:
            for seq in range(1, rounds + 1):
                barrier.wait()
                try:
                    mine.commit_snapshot(row(seq, epoch, label=f"t{i}"))
                    wins[i].append(seq)
                except StaleWriter:
                    losses[i].append(seq)
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)
            barrier.abort()
        finally:
            mine.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert sorted(wins[0] + wins[1]) == list(range(1, rounds + 1))
    assert sorted(losses[0] + losses[1]) == list(range(1, rounds + 1))
    labels = {r.seq: r.label for r in store.snapshots("job")}
    assert labels == {**{s: "t0" for s in wins[0]}, **{s: "t1" for s in wins[1]}}


_RACE = r"""
import importlib, json, os, sys, time
from snapstate._errors import LeaseHeld, StaleWriter
from snapstate.serializers._store import Owner, SnapshotRow

factory, location, gate, mode, job = sys.argv[1:6]
module, _, name = factory.partition(":")
Factory = getattr(importlib.import_module(module), name)
if mode == "open":                      # open a fresh store per round, all at once
    print("ready", flush=True)
    for r, fresh in enumerate(sys.argv[6:]):
        while not os.path.exists(os.path.join(gate, f"go-{r}")):
            time.sleep(0.0002)
        try:
            Factory(fresh).close()
            print(json.dumps(["ok"]), flush=True)
        except Exception as exc:
            print(json.dumps([type(exc).__name__, str(exc)]), flush=True)
    sys.exit(0)
store = Factory(location)
print("ready", flush=True)
while not os.path.exists(os.path.join(gate, "go")):
    time.sleep(0.0005)
if mode == "lease":
    try:
        print(json.dumps(["won", store.acquire_lease(job, Owner.me(), 30)]), flush=True)
    except LeaseHeld as exc:
        print(json.dumps(["held", str(exc)]), flush=True)
    while not os.path.exists(os.path.join(gate, "done")):   # stay alive: a live holder
        time.sleep(0.0005)
else:
    epoch, count, label = int(sys.argv[6]), int(sys.argv[7]), sys.argv[8]
    wins = []
    for seq in range(1, count + 1):
        try:
            store.commit_snapshot(SnapshotRow(job, seq, label, f"snapshots/{job}/{seq}-{label}",
                                              0, time.time(), epoch))
            wins.append(seq)
        except StaleWriter:
            pass
    print(json.dumps(wins), flush=True)
store.close()
"""


def _racers(
    backend: Backend, gate: Path, mode: str, job: str, extra: list[list[str]], go: bool = True
):
    gate.mkdir()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                _RACE,
                backend.factory,
                backend.location,
                str(gate),
                mode,
                job,
                *args,
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for args in extra
    ]
    for p in procs:
        assert p.stdout.readline() == "ready\n"
    if go:
        (gate / "go").touch()
    return procs


def _finish(procs) -> None:
    for p in procs:
        p.stdout.close()
        assert p.wait(timeout=60) == 0


def test_processes_racing_for_a_free_lease_exactly_one_wins(backend, tmp_path):
    """Four processes acquire the same free lease at once: exactly one gets epoch 1,
    the three others get LeaseHeld naming the winner's pid, and the lease is the
    winner's."""
    store = backend.open()
    make_job(store)
    procs = _racers(backend, tmp_path / "gate", "lease", "job", [[]] * 4)
    try:
        results = [json.loads(p.stdout.readline()) for p in procs]
    finally:
        (tmp_path / "gate" / "done").touch()
        _finish(procs)
    winners = [p for p, r in zip(procs, results) if r[0] == "won"]
    assert len(winners) == 1, results
    assert [r for r in results if r[0] == "won"] == [["won", 1]]
    for r in results:
        if r[0] == "held":
            assert f"pid {winners[0].pid} on {HOST}" in r[1]
    lease = store.get_lease("job")
    assert (lease.owner.pid, lease.epoch) == (winners[0].pid, 1)
    assert [e.kind for e in store.events("job")] == ["created", "lease"]


def test_processes_racing_to_commit_each_seq_is_committed_once(backend, tmp_path):
    """Two processes both try to commit seqs 1..150 under the same epoch, at once: each
    seq is committed exactly once (by one of them; the other got StaleWriter), with no
    gap, and the catalog row is the reported winner's."""
    store = backend.open()
    make_job(store)
    epoch = store.acquire_lease("job", Owner.me(), 300)
    count = 150
    procs = _racers(
        backend,
        tmp_path / "gate",
        "commit",
        "job",
        [[str(epoch), str(count), f"p{i}"] for i in (0, 1)],
    )
    try:
        wins = [json.loads(p.stdout.readline()) for p in procs]
    finally:
        _finish(procs)
    assert sorted(wins[0] + wins[1]) == list(range(1, count + 1))
    labels = {r.seq: r.label for r in store.snapshots("job")}
    assert labels == {**{s: "p0" for s in wins[0]}, **{s: "p1" for s in wins[1]}}


def test_processes_opening_a_new_store_at_once_all_succeed(make_backend, tmp_path):
    """Stores are created on first use, so two runners may well create the same store
    at the same moment. Four processes open the same brand-new store at once, 8 rounds
    (a new store each round): every open succeeds, and the store then works."""
    fresh = [make_backend(tmp_path / f"fresh-{r}") for r in range(8)]
    procs = _racers(
        fresh[0], tmp_path / "gate", "open", "-", [[b.location for b in fresh]] * 4, go=False
    )
    try:
        results = []
        for r in range(len(fresh)):
            (tmp_path / "gate" / f"go-{r}").touch()
            results.append([json.loads(p.stdout.readline()) for p in procs])
    finally:
        _finish(procs)
    failed = [(r, res) for r, round_ in enumerate(results) for res in round_ if res != ["ok"]]
    assert failed == []
    for b in fresh:
        store = b.open()
        make_job(store)
        assert store.acquire_lease("job", Owner.me(), 30) == 1
        b.close_all()
