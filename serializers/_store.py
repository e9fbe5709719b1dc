"""The store interface: a catalog of jobs, snapshots, leases and the job timeline.

The embedded default is SQLite (serializers._sqlite); a PostgreSQL implementation
will satisfy the same interface and pass the same conformance suite
(tests/test_store_conformance.py). Snapshot bodies are files; the catalog says
which of them exist.

Fencing: every runner holds a lease with an epoch that grows with each acquisition.
A snapshot row for sequence N+1 is committed only if N is still the job's latest and
the writer's epoch is still the lease's: a stale writer changes nothing. An effect is
recorded as dispatched only while the writer's lease also has time left (see
record_effects), and a live lease is never taken over, even with force.
"""

from __future__ import annotations

import abc
import enum
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from .._errors import SnapshotNotFound
from ._fs import process_start

__all__ = [
    "Store",
    "JobRow",
    "SnapshotRow",
    "LeaseRow",
    "EventRow",
    "EffectRow",
    "WaitRow",
    "ApprovalRow",
    "APPROVAL_STATES",
    "EffectState",
    "EffectKind",
    "Owner",
    "STATUSES",
    "pid_alive",
    "process_start",
]

STATUSES = ("running", "waiting", "done", "failed", "parked", "interrupted")


@dataclass(frozen=True)
class Owner:
    """A runner: host, pid and the process's start time (so a reused pid is not
    mistaken for the runner that died)."""

    host: str
    pid: int
    started: int = 0

    @classmethod
    def me(cls) -> Owner:
        return cls(socket.gethostname(), os.getpid(), process_start(os.getpid()))

    def __str__(self) -> str:
        return f"pid {self.pid} on {self.host}"


@dataclass(frozen=True)
class JobRow:
    job_id: str
    entry: dict[str, Any]  # the entry point (EntryPoint.as_dict(), JSON)
    argv: list[str]
    status: str
    created: float
    updated: float
    resume_count: int
    parent: str | None = None
    fork_seq: int | None = None
    error: str | None = None


@dataclass(frozen=True)
class SnapshotRow:
    job_id: str
    seq: int
    label: str | None
    file: str  # path relative to the store directory
    size: int
    created: float
    epoch: int
    # The file's digest (the HMAC of its trailer): binds the row to the exact file.
    digest: str | None = None
    # For a file copied in by fork or import, whose header names another job: what its
    # header says ({"store": id or None, "job": id, "epoch": n}); None for the job's own.
    origin: dict[str, Any] | None = None


@dataclass(frozen=True)
class LeaseRow:
    job_id: str
    owner: Owner
    epoch: int
    expires: float
    heartbeat: float

    def is_live(self, now: float) -> bool:
        """A lease is live while it has not expired and, when held on this host, its
        process still exists: a runner killed here is seen dead at once."""
        if self.expires <= now:
            return False
        if self.owner.host == socket.gethostname():
            return pid_alive(self.owner.pid) and (
                not self.owner.started or process_start(self.owner.pid) == self.owner.started
            )
        return True


class EffectState(enum.StrEnum):
    """The state of an effect row. The values are what the catalog stores and the CLI
    prints: they never change (older catalogs hold them).

    dispatched --response--> confirmed | failed; a dispatched row found after a
    restart is settled by the effect's recovery (runtime/_effects.py, RECOVERY) or
    becomes ambiguous; `snaprun reconcile` turns an ambiguous, dispatched or failed
    row confirmed or not-committed."""

    DISPATCHED = "dispatched"  # recorded before it was sent: it may have happened
    CONFIRMED = "confirmed"  # its response is recorded (the sealed result)
    FAILED = "failed"  # the call raised (the sealed error): no proof nothing happened
    AMBIGUOUS = "ambiguous"  # outcome unknown and nothing can find it out: the job parks
    NOT_COMMITTED = "not-committed"  # reconciled by hand as not having happened


class EffectKind(enum.StrEnum):
    """What an effect row records (stored values, like EffectState's)."""

    WRITE = "write"  # an outbound action (@effect's default)
    READ = "read"  # safe to repeat (kind="read"); its result is still recorded
    VALUE = "value"  # snapstate.now(), random(), uuid4()


@dataclass(frozen=True)
class EffectRow:
    """One logical action in a job's effect ledger. A new row is built with keywords;
    a changed one with dataclasses.replace; a stored one with from_columns."""

    job_id: str
    ordinal: int  # position along the job's path (or of its explicit key)
    key: str  # idempotency key given to the provider
    name: str  # the effect function's qualified name
    call_site: str  # file:line of the call
    args_digest: str  # digest of the arguments (secrets by reference)
    args_repr: str  # redacted, truncated arguments for people
    kind: EffectKind
    state: EffectState
    result: bytes | None = None  # signed pickle of the result or the error
    external_id: str | None = None
    attempts: int = 0
    created: float = 0.0
    updated: float = 0.0
    note: str = ""  # how it was reconciled, the error text

    def __post_init__(self) -> None:
        # Given as a plain string (a stored value): the member, or ValueError if unknown.
        object.__setattr__(self, "kind", EffectKind(self.kind))
        object.__setattr__(self, "state", EffectState(self.state))

    @classmethod
    def from_columns(cls, columns: Mapping[str, Any]) -> EffectRow:
        """The row a store reads back: its columns by field name (sealed ones already
        opened; state and kind as stored strings). Unknown state or kind: ValueError."""
        return cls(**{f.name: columns[f.name] for f in fields(cls)})

    def columns(self) -> dict[str, object]:
        """The row as a store writes it, by field name in field order; state and kind as
        their plain stored strings."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values["kind"], values["state"] = self.kind.value, self.state.value
        return values


@dataclass(frozen=True)
class WaitRow:
    """Why a hibernated job waits (one row per waiting job; runtime/_waits.py)."""

    job_id: str
    kind: str  # "timer", "rate-limit", "approval"
    reason: str  # shown by `snaprun ls`, e.g. "approval purchase-1 (by alice)"
    due: float | None  # when it may go on (None: only when an approval is decided)
    since: float  # when it began waiting
    seq: int  # the snapshot it waits at
    approval_id: str | None = None  # the approval whose decision ends the wait


APPROVAL_STATES = ("pending", "granted", "rejected")


@dataclass(frozen=True)
class ApprovalRow:
    """One approval a job requested, stored exactly as requested and decided."""

    job_id: str
    approval_id: str
    name: str
    scope: str  # canonical JSON of the scope, exactly as requested
    digest: str  # sha256 of `scope`
    requested: float
    expires: float | None
    approvers: list[str] | None  # who may decide (None: anyone)
    state: str  # one of APPROVAL_STATES
    decided_by: str | None = None
    decided_at: float | None = None
    note: str | None = None
    site: str = ""  # the agent's call site


@dataclass(frozen=True)
class EventRow:
    job_id: str
    at: float
    kind: str
    detail: str


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (killed, not yet reaped by its parent) is dead for our purposes.
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
        return state not in (b"Z", b"X")
    except (OSError, IndexError):
        return True


class Store(abc.ABC):
    """What the runtime needs from a store. Every method is atomic."""

    directory: str

    # ---------------------------------------------------------------- jobs
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

    # ---------------------------------------------------------------- waits
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

    @abc.abstractmethod
    def give_up_job(self, job_id: str, error: str) -> bool:
        """Mark a job whose runners keep dying failed with `error` (resumable by hand),
        in one transaction, only while it is running with no live lease or interrupted;
        True when it was marked."""

    # ---------------------------------------------------------------- approvals
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

    # ---------------------------------------------------------------- leases
    @abc.abstractmethod
    def acquire_lease(
        self, job_id: str, owner: Owner, ttl: float, *, force: bool = False, resuming: bool = False
    ) -> int:
        """Take the job's lease and return the new epoch. LeaseHeld while another
        owner's lease is live, even with `force` (which only changes the message and
        the timeline's note: the runtime waits out a silent holder's lease, see
        runtime/_lease.py). `resuming` counts a resume."""

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

    # ---------------------------------------------------------------- snapshots
    @abc.abstractmethod
    def commit_snapshot(self, row: SnapshotRow) -> None:
        """Record snapshot row.seq, compare-and-swap: only if row.seq - 1 is the job's
        latest sequence and row.epoch still holds the lease. StaleWriter otherwise,
        with nothing changed."""

    @abc.abstractmethod
    def snapshots(self, job_id: str) -> list[SnapshotRow]:
        """The job's snapshots, by sequence."""

    @abc.abstractmethod
    def delete_snapshot(self, job_id: str, seq: int) -> None:
        """Forget one snapshot row (its file is the caller's)."""

    @abc.abstractmethod
    def add_snapshot_unfenced(self, row: SnapshotRow) -> None:
        """Record a snapshot copied in by fork or import, when no runner holds the
        job; StoreError if that sequence number is taken."""

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

    # ---------------------------------------------------------------- admin operations
    # Each is one transaction with its checks inside it (runtime/_admin.py calls them):
    # a check made in one transaction and acted on in another could be overtaken by a
    # runner starting in between.
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
        rows are no longer those of `files`; nothing changed then."""

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
    ) -> JobRow:
        """Create job `job_id` holding the one snapshot `row` (its file copied in by the
        caller beforehand), imported from `source`. JobExists if the id is taken."""

    @abc.abstractmethod
    def reconcile_effect(
        self, job_id: str, ordinal: int, *, state: EffectState, result: bytes | None, note: str
    ) -> EffectRow:
        """Settle an effect whose outcome is unknown: only while no live lease holds the
        job (LeaseHeld), only a recorded write/read effect (StoreError otherwise) that
        is ambiguous, dispatched or failed (StoreError otherwise). Sets its state,
        result and note, counts it in the "reconciled" metric, logs it, and turns a
        parked job interrupted (resumable). Returns the new row."""

    @abc.abstractmethod
    def prune_job(
        self, job_id: str, *, finished: bool, keep_last: int | None, older_than: float | None
    ) -> tuple[bool, list[SnapshotRow]]:
        """Drop what the rules say, only while no live lease holds the job (LeaseHeld):
        with `finished`, a done or failed job entirely; otherwise its snapshots beyond
        the `keep_last` latest and those created before `older_than` (a timestamp),
        never the latest. Returns (job dropped, snapshot rows dropped); the caller
        deletes their files after this commits."""

    # ---------------------------------------------------------------- effect ledger
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
    ) -> float | None:
        """Insert (or, with replace, overwrite) ledger rows in one durable transaction,
        fenced by the lease epoch (StaleWriter otherwise). Inserting an existing
        ordinal raises StoreError: a logical action is recorded once.

        With `ttl` the transaction records a dispatch (the last row is about to be
        sent): it also requires the lease's deadline to be more than `margin` seconds
        away (StaleWriter otherwise, nothing changed), renews the lease to now + ttl
        like a heartbeat, and returns that deadline: the request must end before it."""

    @abc.abstractmethod
    def bump_metric(self, job_id: str, name: str, by: int = 1) -> None:
        """Add to one of the job's counters (metrics)."""

    @abc.abstractmethod
    def metrics(self, job_id: str) -> dict[str, float]:
        """The job's counters and timestamps."""

    @abc.abstractmethod
    def set_metric(self, job_id: str, name: str, value: float) -> None:
        """Set one of the job's metrics."""

    # ---------------------------------------------------------------- timeline
    @abc.abstractmethod
    def log_event(self, job_id: str, kind: str, detail: str = "") -> None:
        """Append to the job's timeline."""

    @abc.abstractmethod
    def events(self, job_id: str) -> list[EventRow]:
        """The job's timeline, oldest first."""

    # ---------------------------------------------------------------- derived
    def latest(self, job_id: str) -> SnapshotRow | None:
        rows = self.snapshots(job_id)
        return rows[-1] if rows else None

    def snapshot(self, job_id: str, seq: int) -> SnapshotRow:
        for row in self.snapshots(job_id):
            if row.seq == seq:
                return row
        raise SnapshotNotFound(
            f"job {job_id} has no snapshot {seq}; `snaprun log {job_id}` lists its snapshots"
        )

    def effective_status(self, job: JobRow, now: float) -> str:
        """A running job whose runner is gone is shown as interrupted (resumable)."""
        if job.status != "running":
            return job.status
        lease = self.get_lease(job.job_id)
        return "running" if lease is not None and lease.is_live(now) else "interrupted"

    def close(self) -> None:  # noqa: B027 (optional hook: most stores hold nothing)
        """Release connections."""
