"""The catalog interface: what the runtime needs from a store's catalog of jobs,
snapshots, leases, effects, approvals, waits and the job timeline, split by capability.

`Catalog` is the whole contract, composed of one abstract class per capability
(`JobCatalog`, `LeaseCatalog`, ...); the embedded default is SQLite
(serializers/_sqlite/, `SqliteCatalog`). Another backend (PostgreSQL, say) implements
the same classes and proves it with the conformance suite in `snapstate.testing`,
one spec module per capability (see that package's docstring). A snapshot body is
either a file in the store directory (the catalog says which exist) or content-defined
chunks held by the catalog (`ChunkCatalog`): a signed manifest per snapshot and each
chunk once per store, in the catalog or in a pack file of the store directory.

Fencing: every runner holds a lease with an epoch that grows with each acquisition.
A snapshot row for sequence N+1 is committed only if N is still the job's latest and
the writer's epoch is still the lease's: a stale writer changes nothing. An effect is
recorded as dispatched only while the writer's lease also has time left (see
`LedgerCatalog.record_effects`), and a live lease is never taken over, even with force.

Every method is atomic: its checks and its writes happen in one transaction.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Collection, Mapping
from typing import Any

from .._errors import SnapshotNotFound
from ._store import (
    ApprovalRow,
    EffectRow,
    EffectState,
    EventRow,
    JobCopy,
    JobListing,
    JobRow,
    LeaseRow,
    Owner,
    SnapshotBody,
    SnapshotRow,
    StoredChunk,
    WaitRow,
    WorkerRow,
)

__all__ = [
    "Catalog",
    "JobCatalog",
    "LeaseCatalog",
    "SnapshotCatalog",
    "ChunkCatalog",
    "LedgerCatalog",
    "EventCatalog",
    "ApprovalCatalog",
    "WaitCatalog",
    "WorkerCatalog",
    "AdminCatalog",
    "status_with_lease",
]


class JobCatalog(abc.ABC):
    """Jobs: one row per job (entry point, arguments, status)."""

    @abc.abstractmethod
    def create_job(
        self,
        job_id: str,
        entry: dict[str, Any],
        argv: list[str],
        *,
        parent: str | None = None,
        fork_seq: int | None = None,
    ) -> JobRow:
        """Insert a new job (status running); JobExists if the id is taken."""

    @abc.abstractmethod
    def get_job(self, job_id: str) -> JobRow:
        """The job, or JobNotFound."""

    @abc.abstractmethod
    def list_jobs(self) -> list[JobRow]:
        """All jobs, oldest first."""

    @abc.abstractmethod
    def set_status(
        self, job_id: str, status: str, *, epoch: int | None = None, error: str | None = None
    ) -> None:
        """Set a job's status; with `epoch`, only while that epoch holds the lease
        (StaleWriter otherwise)."""

    @abc.abstractmethod
    def delete_job(self, job_id: str) -> None:
        """Remove a job and all its rows."""

    def job_listing(self, limit: int | None = None) -> JobListing:
        """The store's job count and its newest `limit` jobs (every job with None), by
        creation, with their snapshot rows, leases and wait rows (see JobListing): what
        `snaprun ls` shows. This default reads job by job; a backend answers it with a
        few set-based queries in one transaction (serializers/_sql/_jobs.py)."""
        every = self.list_jobs()
        jobs = tuple(every if limit is None else every[max(len(every) - limit, 0) :])
        waits = {w.job_id: w for w in self.waits()} if isinstance(self, WaitCatalog) else {}
        leases = {}
        if isinstance(self, LeaseCatalog):
            for job in jobs:
                lease = self.get_lease(job.job_id)
                if lease is not None:
                    leases[job.job_id] = lease
        snapshots = (
            {job.job_id: tuple(self.snapshots(job.job_id)) for job in jobs}
            if isinstance(self, SnapshotCatalog)
            else {}
        )
        return JobListing(
            total=len(every),
            jobs=jobs,
            snapshots=snapshots,
            leases=leases,
            waits={j.job_id: waits[j.job_id] for j in jobs if j.job_id in waits},
        )

    @abc.abstractmethod
    def set_entry(self, job_id: str, entry: dict[str, Any]) -> JobRow:
        """Record a new entry point for a job (`snaprun set-entry`: the only way a
        job's entry point changes), its row signed again; returns the row as it was.
        JobNotFound; LeaseHeld while a runner holds the job; StoreDamaged if the row
        does not verify (a row someone edited is restored, never re-signed)."""


def status_with_lease(job: JobRow, lease: LeaseRow | None, now: float) -> str:
    """The job's effective status given its lease row (LeaseCatalog.effective_status)."""
    if job.status != "running":
        return job.status
    return "running" if lease is not None and lease.is_live(now) else "interrupted"


class LeaseCatalog(abc.ABC):
    """Leases: one runner per job, fenced by an epoch that grows with each acquisition."""

    @abc.abstractmethod
    def acquire_lease(
        self, job_id: str, owner: Owner, ttl: float, *, force: bool = False, resuming: bool = False
    ) -> int:
        """Take the job's lease and return the new epoch. LeaseHeld while another
        owner's lease is live, even with `force` (which only changes the message and
        the timeline's note: the runtime waits out a silent holder's lease, see
        runtime/_lease.py). `resuming` counts a resume. Sets the job running and
        drops its wait row (a resumed wait is polled again)."""

    @abc.abstractmethod
    def record_resume(self, job_id: str, epoch: int, detail: str) -> None:
        """Count a resume and log it (event "resumed"), once its restore succeeded;
        StaleWriter if `epoch` no longer holds the lease."""

    @abc.abstractmethod
    def heartbeat(self, job_id: str, epoch: int, ttl: float) -> None:
        """Extend the lease; LeaseLost (a StaleWriter) if the epoch no longer holds it."""

    @abc.abstractmethod
    def release_lease(self, job_id: str, epoch: int) -> None:
        """Give the lease up (no error if it is already gone)."""

    @abc.abstractmethod
    def get_lease(self, job_id: str) -> LeaseRow | None:
        """The job's current lease row, live or not."""

    def effective_status(self, job: JobRow, now: float) -> str:
        """A running job whose runner is gone is shown as interrupted (resumable)."""
        if job.status != "running":
            return job.status
        return status_with_lease(job, self.get_lease(job.job_id), now)


class SnapshotCatalog(abc.ABC):
    """Snapshot rows: which snapshot files of a job exist, in sequence."""

    @abc.abstractmethod
    def commit_snapshot(self, row: SnapshotRow, body: SnapshotBody | None = None) -> None:
        """Record snapshot row.seq, compare-and-swap: only if row.seq - 1 is the job's
        latest sequence and row.epoch still holds the lease. StaleWriter otherwise,
        with nothing changed. With `body` (a chunked snapshot, row.file CHUNKED), in the
        same transaction: its new chunks are added (one already held is kept), its
        manifest recorded, and every chunk it refers to must be held once they are
        (ChunksMissing naming those that are not, e.g. swept by a concurrent prune,
        with nothing changed: the writer stores them again and retries)."""

    @abc.abstractmethod
    def snapshots(self, job_id: str) -> list[SnapshotRow]:
        """The job's snapshots, by sequence."""

    @abc.abstractmethod
    def delete_snapshot(self, job_id: str, seq: int) -> None:
        """Forget one snapshot row and its manifest (its file is the caller's; its
        chunks are swept by `ChunkCatalog.sweep_chunks`)."""

    @abc.abstractmethod
    def add_snapshot_unfenced(self, row: SnapshotRow, body: SnapshotBody | None = None) -> None:
        """Record a snapshot copied in by fork or import, when no runner holds the
        job; StoreError if that sequence number is taken. `body` as for
        commit_snapshot."""

    def latest(self, job_id: str) -> SnapshotRow | None:
        """The job's latest snapshot row, or None."""
        rows = self.snapshots(job_id)
        return rows[-1] if rows else None

    def snapshot(self, job_id: str, seq: int) -> SnapshotRow:
        """One snapshot row, or SnapshotNotFound."""
        for row in self.snapshots(job_id):
            if row.seq == seq:
                return row
        raise SnapshotNotFound(
            f"job {job_id} has no snapshot {seq}; `snaprun log {job_id}` lists its snapshots"
        )


class ChunkCatalog(abc.ABC):
    """Chunked snapshot bodies: each chunk stored once per store under its id (a keyed
    hash of its content, serializers/_chunks.py), and one signed manifest per snapshot
    listing its chunks in order. Chunks are added only with a snapshot
    (`SnapshotCatalog.commit_snapshot`) and removed only by `sweep_chunks`."""

    @abc.abstractmethod
    def missing_chunks(self, ids: Collection[bytes]) -> set[bytes]:
        """The ids among `ids` the catalog does not hold."""

    @abc.abstractmethod
    def get_chunks(self, ids: Collection[bytes]) -> dict[bytes, StoredChunk]:
        """The chunks held among `ids`, by id (a missing one is absent)."""

    @abc.abstractmethod
    def manifest(self, job_id: str, seq: int) -> bytes | None:
        """The signed manifest of a chunked snapshot, or None."""

    @abc.abstractmethod
    def sweep_chunks(self) -> tuple[int, set[str]]:
        """Mark and sweep, in one transaction: delete every chunk that no manifest
        refers to. Returns (chunks deleted, the pack files still referred to); a caller
        deleting the packs no chunk lives in asks `packs()` again after it knows their
        writers are gone (a writer may commit its pack between the two). A snapshot committed
        concurrently either committed first (its chunks are marked) or finds its
        chunks missing at its commit (ChunksMissing) and stores them again."""

    @abc.abstractmethod
    def packs(self) -> set[str]:
        """The pack files some held chunk lives in."""


class LedgerCatalog(abc.ABC):
    """The effect ledger: one row per logical outbound action, recorded before it is
    sent and confirmed after it (runtime/_effects.py)."""

    @abc.abstractmethod
    def effect(self, job_id: str, ordinal: int) -> EffectRow | None:
        """The ledger row of one logical action, or None."""

    @abc.abstractmethod
    def effect_by_key(self, job_id: str, key: str) -> EffectRow | None:
        """The ledger row of the action with this idempotency key, or None."""

    @abc.abstractmethod
    def effects(self, job_id: str) -> list[EffectRow]:
        """The job's ledger, by ordinal."""

    @abc.abstractmethod
    def record_effects(
        self,
        rows: list[EffectRow],
        *,
        epoch: int | None,
        replace: bool = False,
        ttl: float | None = None,
        margin: float = 0.0,
        ordered: bool = False,
    ) -> float | None:
        """Insert (or, with replace, overwrite) ledger rows in one durable transaction,
        fenced by the lease epoch (StaleWriter otherwise). Inserting an existing
        ordinal raises StoreError: a logical action is recorded once.

        `ordered`: the transaction need not be on disk when this returns, only ordered
        before every later transaction (durable when the next durable one is; it
        survives the process's death at once). The ledger records an effect's outcome
        so: lost only with the machine, it leaves the row as its dispatch recorded it,
        whose recovery is a crash's between the call and its outcome.

        With `ttl` the transaction records a dispatch (the last row is about to be
        sent): it also requires the lease's deadline to be more than `margin` seconds
        away (StaleWriter otherwise, nothing changed), renews the lease to now + ttl
        like a heartbeat, and returns that deadline: the request must end before it."""

    @abc.abstractmethod
    def reconcile_effect(
        self, job_id: str, ordinal: int, *, state: EffectState, result: bytes | None, note: str
    ) -> EffectRow:
        """Settle an effect whose outcome is unknown: only while no live lease holds the
        job (LeaseHeld), only a recorded write/read effect (StoreError otherwise) that
        is ambiguous, dispatched or failed (StoreError otherwise). Sets its state,
        result and note, counts it in the "reconciled" metric, logs it, and turns a
        parked job interrupted (resumable). Returns the new row."""


class EventCatalog(abc.ABC):
    """The job's timeline (events) and its counters (metrics)."""

    @abc.abstractmethod
    def log_event(self, job_id: str, kind: str, detail: str = "") -> None:
        """Append to the job's timeline."""

    @abc.abstractmethod
    def events(self, job_id: str) -> list[EventRow]:
        """The job's timeline, in the order it was written."""

    @abc.abstractmethod
    def bump_metric(self, job_id: str, name: str, by: int = 1) -> None:
        """Add to one of the job's counters (metrics)."""

    @abc.abstractmethod
    def metrics(self, job_id: str) -> dict[str, float]:
        """The job's counters and timestamps."""

    @abc.abstractmethod
    def set_metric(self, job_id: str, name: str, value: float) -> None:
        """Set one of the job's metrics."""


class ApprovalCatalog(abc.ABC):
    """Approvals a job requested and their decisions (runtime/_approvals.py)."""

    @abc.abstractmethod
    def add_approval(self, row: ApprovalRow, *, epoch: int | None) -> ApprovalRow:
        """Record a pending approval (fenced by `epoch`); an existing row of that id is
        kept and returned unchanged (a re-executed request finds its own)."""

    @abc.abstractmethod
    def get_approval(self, job_id: str, approval_id: str) -> ApprovalRow | None:
        """One approval, or None."""

    @abc.abstractmethod
    def approvals(self, job_id: str | None = None) -> list[ApprovalRow]:
        """Approvals of one job (or all), oldest first."""

    @abc.abstractmethod
    def decide_approval(
        self,
        job_id: str,
        approval_id: str,
        *,
        granted: bool,
        by: str,
        note: str | None,
        at: float,
    ) -> ApprovalRow:
        """pending -> granted or rejected, compare-and-swap; StoreError naming the
        decision already made (or the unknown id) otherwise, nothing changed."""


class WaitCatalog(abc.ABC):
    """Hibernated jobs: why each waiting job waits (runtime/_waits.py)."""

    @abc.abstractmethod
    def hibernate(self, wait: WaitRow, *, epoch: int) -> None:
        """The job waits: status waiting and its wait row, in one transaction, only while
        `epoch` holds the lease (StaleWriter otherwise). The lease is not released."""

    @abc.abstractmethod
    def get_wait(self, job_id: str) -> WaitRow | None:
        """Why the job waits, if it does."""

    @abc.abstractmethod
    def waits(self) -> list[WaitRow]:
        """Every waiting job's wait row."""


class WorkerCatalog(abc.ABC):
    """What `snaprun worker` asks (runtime/_worker.py): which jobs to start, its
    advisory claims on them, and giving up on a job whose runners keep dying."""

    @abc.abstractmethod
    def runnable_jobs(self, now: float) -> list[str]:
        """Jobs a worker may take now: waiting ones that are due or whose approval was
        decided, and running ones whose runner is gone (interrupted), oldest first."""

    @abc.abstractmethod
    def stopped_jobs(self) -> list[str]:
        """Jobs whose status is interrupted (stopped by a signal, or their store failed
        while they ran), oldest first: resumable, as runnable_jobs' dead runners are."""

    @abc.abstractmethod
    def claim_job(self, job_id: str, owner: Owner, ttl: float) -> bool:
        """A worker's claim on starting a runner for the job, for `ttl` seconds: False
        while another owner's claim is live (unexpired, its process alive). Advisory:
        the job's lease, which the runner takes, is what keeps runners exclusive."""

    @abc.abstractmethod
    def release_claims(self, owner: Owner, job_id: str | None = None) -> None:
        """Drop the owner's claim on the job (or all its claims)."""

    def wait_for_change(self, timeout: float) -> bool:
        """The worker's pause between passes: until a change that may make a job
        runnable is announced (True: a job released, an approval decided, a job waiting
        on a timer, an effect reconciled) or `timeout` seconds pass (False). This
        default sleeps (its workers poll); PostgreSQL listens for NOTIFY."""
        time.sleep(max(0.0, timeout))
        return False

    @abc.abstractmethod
    def beat_worker(self, owner: Owner, info: Mapping[str, Any], ttl: float) -> None:
        """Record (or refresh) a running worker's heartbeat: `info` (JSON values: its
        start, concurrency, running jobs...), live for `ttl` seconds from the catalog's
        clock; a ttl of 0 withdraws it (a worker that stops). Rows expired long ago are
        dropped on the way."""

    @abc.abstractmethod
    def workers(self, now: float) -> list[WorkerRow]:
        """The heartbeats live at `now` (unexpired; on this host, their process alive),
        ordered by host and pid. A row whose info is not a JSON object is listed with
        info {} (a catalog row is data, never trusted)."""

    @abc.abstractmethod
    def give_up_job(self, job_id: str, error: str) -> bool:
        """Mark a job whose runners keep dying failed with `error` (resumable by hand),
        in one transaction, only while it is running with no live lease or interrupted;
        True when it was marked."""


class AdminCatalog(abc.ABC):
    """Operations on whole jobs (runtime/_admin.py, runtime/_repair.py). Each is one
    transaction with its checks inside it: a check made in one transaction and acted
    on in another could be overtaken by a runner starting in between."""

    @abc.abstractmethod
    def fork_job(
        self,
        parent: str,
        fork_seq: int,
        job_id: str,
        copies: dict[int, SnapshotRow],
        inherited_effects: int,
    ) -> JobRow:
        """Create job `job_id` as a fork of `parent` at its snapshot `fork_seq`: for each
        of the parent's snapshot rows up to fork_seq the row `copies[seq]` (its file copied
        in and checked by the caller beforehand, its digest bound), and the parent's ledger rows
        with ordinal <= inherited_effects. JobExists if the id is taken, JobNotFound /
        SnapshotNotFound for a missing parent or snapshot, StoreError if the parent's
        rows are no longer those of `copies`; nothing changed then."""

    @abc.abstractmethod
    def import_job(
        self,
        job_id: str,
        entry: dict[str, Any],
        argv: list[str],
        row: SnapshotRow,
        *,
        parent: str | None,
        source: str,
        body: SnapshotBody | None = None,
    ) -> JobRow:
        """Create job `job_id` holding the one snapshot `row` (its file copied in by the
        caller beforehand, or, with `body`, its chunks and manifest, added as
        commit_snapshot adds them), imported from `source`. JobExists if the id is taken."""

    @abc.abstractmethod
    def prune_job(
        self, job_id: str, *, finished: bool, keep_last: int | None, older_than: float | None
    ) -> tuple[bool, list[SnapshotRow]]:
        """Drop what the rules say, only while no live lease holds the job (LeaseHeld):
        with `finished`, a done or failed job entirely; otherwise its snapshots beyond
        the `keep_last` latest and those created before `older_than` (a timestamp),
        never the latest. Returns (job dropped, snapshot rows dropped); the caller
        deletes their files after this commits."""

    @abc.abstractmethod
    def rebuild_job(
        self,
        job: JobRow,
        epoch: int,
        rows: list[SnapshotRow],
        metrics: dict[str, float] | None = None,
    ) -> None:
        """Recreate a job (with the given status, error and lease epoch), its snapshot
        rows and metrics in one transaction: `snaprun repair`. JobExists if the id is
        taken."""

    @abc.abstractmethod
    def read_job_copy(self, job_id: str) -> JobCopy:
        """Every row of one job, read in one transaction (a consistent view: a writer
        committing meanwhile is wholly in it or wholly out), each row verified as its
        own reader verifies it (StoreDamaged naming the row): the job, its lease-epoch
        counter, snapshot rows, ledger, approvals, wait row, timeline, metrics and
        lease. Writes nothing. JobNotFound."""

    @abc.abstractmethod
    def insert_job_copy(
        self, copy: JobCopy, bodies: Mapping[int, SnapshotBody], note: str
    ) -> JobRow:
        """Create job `copy.job` with all its rows in one transaction (`snaprun
        migrate-store`): the job as it was (status, error, resume count, parent and fork
        point, created and updated times, its epoch counter), its snapshot rows (with
        `bodies[seq]`, its chunks and manifest, added as commit_snapshot adds them), its
        ledger, approvals, wait row, timeline and metrics as given, each row signed (and
        sealed) by this catalog; no lease. `note` is logged as one more event
        ("migrated"). JobExists if the id is taken; nothing written then, or on any
        error (ChunksMissing as commit_snapshot's)."""


class Catalog(
    JobCatalog,
    LeaseCatalog,
    SnapshotCatalog,
    ChunkCatalog,
    LedgerCatalog,
    EventCatalog,
    ApprovalCatalog,
    WaitCatalog,
    WorkerCatalog,
    AdminCatalog,
):
    """The whole catalog contract: every capability. `directory` is the store directory
    the snapshot files' paths are relative to."""

    directory: str

    def close(self) -> None:  # noqa: B027 (optional hook: most catalogs hold nothing)
        """Release connections."""

    def close_thread(self) -> None:
        """Release what the calling thread holds (a thread that used the catalog, such
        as a lease's heartbeat, ends); the catalog stays open for the others. This
        default suits a catalog with one connection per thread: close() is that."""
        self.close()
