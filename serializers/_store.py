"""The rows a catalog keeps (jobs, snapshots, leases, effects, waits, approvals,
events) and the runner that owns a lease: plain data that every catalog backend
(serializers/_catalog.py's interface) reads and writes, and the runtime passes around.
"""

from __future__ import annotations

import enum
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from ._fs import pid_alive, process_start

__all__ = [
    "JobRow",
    "SnapshotRow",
    "StoredChunk",
    "SnapshotBody",
    "LeaseRow",
    "WorkerRow",
    "EventRow",
    "EffectRow",
    "WaitRow",
    "ApprovalRow",
    "JobCopy",
    "JobListing",
    "effect_label",
    "APPROVAL_STATES",
    "EffectState",
    "EffectKind",
    "Owner",
    "STATUSES",
    "CHUNKED",
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
    # Set only by a listing of the whole store: why this row is refused (its signature
    # does not verify, serializers/_sealing.py); its other fields are then not to be used.
    damaged: str | None = None


@dataclass(frozen=True)
class SnapshotRow:
    job_id: str
    seq: int
    label: str | None
    file: str  # path relative to the store directory; CHUNKED: a manifest in the catalog
    size: int
    created: float
    epoch: int
    # The file's digest (the HMAC of its trailer): binds the row to the exact file.
    digest: str | None = None
    # For a file copied in by fork or import, whose header names another job: what its
    # header says ({"store": id or None, "job": id, "epoch": n}); None for the job's own.
    origin: dict[str, Any] | None = None


# A snapshot row whose body is chunks in the catalog (a manifest), not a file of its own.
CHUNKED = ""


@dataclass(frozen=True)
class StoredChunk:
    """One content-defined chunk of snapshot bodies as a catalog holds it: its encoded
    bytes in the catalog (`data`) or at `offset`, `length` in a pack file of the
    store (`pack`, a file name in <store>/chunks). `size` is its decoded length; a
    delta names its `base`, which the catalog keeps while the delta is kept."""

    chunk_id: bytes
    size: int
    data: bytes | None = None
    pack: str | None = None
    offset: int = 0
    length: int = 0
    base: bytes | None = None  # a delta: the id of the chunk it is decoded against
    depth: int = 0  # how many deltas deep (0: whole); known to its writer only


@dataclass(frozen=True)
class SnapshotBody:
    """What a chunked snapshot adds to the catalog with its row: its signed manifest
    (serializers/_manifest.py), the ids of the chunks it lists, and the chunks among
    them the catalog did not hold yet."""

    manifest: bytes
    refs: frozenset[bytes]
    new: tuple[StoredChunk, ...] = ()


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


@dataclass(frozen=True)
class WorkerRow:
    """A worker's heartbeat (`snaprun worker --status`): who it is, what it said of
    itself at its last beat (info: JSON values, e.g. when it started, its concurrency,
    the jobs it runs), when that was and until when the row counts as live."""

    owner: Owner
    info: dict[str, Any]
    beat: float
    expires: float

    def is_live(self, now: float) -> bool:
        """Unexpired and, on this host, its process still there (as a lease)."""
        return LeaseRow("", self.owner, 0, self.expires, self.beat).is_live(now)


class EffectState(enum.StrEnum):
    """The state of an effect row. The values are what the catalog stores and the CLI
    prints: they never change (older catalogs hold them).

    dispatched --response--> confirmed | failed; a dispatched row found after a
    restart is settled by the effect's recovery (runtime/_ledger.py, RECOVERY) or
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
    damaged: str | None = None  # as JobRow.damaged


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
    damaged: str | None = None  # as JobRow.damaged


@dataclass(frozen=True)
class EventRow:
    job_id: str
    at: float
    kind: str
    detail: str


@dataclass(frozen=True)
class JobCopy:
    """Every row a catalog holds about one job, read in one transaction, each verified
    (AdminCatalog.read_job_copy), and what insert_job_copy writes into another store:
    `snaprun migrate-store` (runtime/_migrate.py). `epoch` is the job's lease-epoch
    counter (the next runner's epoch is above it); `lease` is read, never copied."""

    job: JobRow
    epoch: int
    snapshots: tuple[SnapshotRow, ...]
    effects: tuple[EffectRow, ...]
    approvals: tuple[ApprovalRow, ...]
    wait: WaitRow | None
    events: tuple[EventRow, ...]
    metrics: Mapping[str, float]
    lease: LeaseRow | None = None


@dataclass(frozen=True)
class JobListing:
    """What `snaprun ls` shows of a store, read in one transaction
    (JobCatalog.job_listing): how many jobs it holds, the newest jobs asked for (oldest
    first, as list_jobs orders them), and, for those jobs only, their snapshot rows (by
    sequence), leases and wait rows (read leniently: a wait row that does not verify
    comes back marked `damaged`, as WaitCatalog.waits() gives it)."""

    total: int
    jobs: tuple[JobRow, ...]
    snapshots: Mapping[str, tuple[SnapshotRow, ...]]
    leases: Mapping[str, LeaseRow]
    waits: Mapping[str, WaitRow]


_TASK_SITE = re.compile(r"^(.*) \(task ([0-9][0-9.]*#[0-9]+)\)$", re.DOTALL)


def effect_label(ordinal: int, call_site: str) -> tuple[str, str]:
    """(how people name a ledger row, its call site without the task suffix): a spawned
    task's action by its identity `TASK#N` (its row's call site ends with it: task 2's
    first action is `2#1`), the main task's by its ordinal (`snaprun effects`,
    `snaprun reconcile`, the messages that name an effect)."""
    match = _TASK_SITE.match(call_site)
    return (match.group(2), match.group(1)) if match else (str(ordinal), call_site)
