"""What the SQL catalog's capability modules share: the connection they are written
against (`Conn`: `execute`/`executemany` with `?` placeholders, as sqlite3's), and
`SqlBase`, the part of a backend every capability mixin calls: `_db()` (a connection for
reads), `_tx()` (a write transaction: its checks and writes atomic against every other
writer), `_unsynced()`, and the checks every fenced write makes inside its transaction
(the lease epoch, a live lease, a dispatch's deadline) and the timeline append.

The capability modules (_jobs.py, _leases.py, _snapshots.py, _chunks.py, _ledger.py,
_events.py, _approvals.py, _waits.py, _admin.py, _reseal.py) hold the SQL, written in
the subset SQLite and PostgreSQL share (`INSERT ... ON CONFLICT`, no rowid); a backend
(serializers/_sqlite/, serializers/_postgres/) supplies the connection, the schema and
its transactions: SQLite's BEGIN IMMEDIATE, PostgreSQL's store-wide transaction lock.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol

from ..._errors import StaleWriter
from .._sealing import Sealer
from .._store import LeaseRow
from ._rows import LEASE_COLUMNS, lease_row, select_snapshots

__all__ = ["Conn", "Cursor", "SqlBase", "JOB_TABLES"]

# The tables holding a job's rows besides `jobs` (deleting a job deletes from each).
JOB_TABLES = (
    "snapshots",
    "manifests",
    "leases",
    "events",
    "effects",
    "metrics",
    "waits",
    "approvals",
)


class Cursor(Protocol):
    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Conn(Protocol):
    """A connection as the capability modules use it (sqlite3's shape: `?` placeholders)."""

    def execute(self, sql: str, parameters: Sequence[Any] = ..., /) -> Any: ...

    def executemany(self, sql: str, seq_of_parameters: Iterable[Sequence[Any]], /) -> Any: ...


class SqlBase:
    """The backend's part of a SQL catalog (see the module doc). `integrity_error`: the
    exception a violated primary key raises; `insertion_order`: an expression ordering
    a table's rows as they were inserted."""

    directory: str
    path: str  # where messages say the catalog is
    sealer: Sealer
    clock: Callable[[], float]
    integrity_error: type[Exception] | tuple[type[Exception], ...] = ()
    insertion_order: str  # each backend's (SQLite: rowid; PostgreSQL: a serial column)
    _snapshot_extra = "digest, origin"
    _no_waits = False  # an older catalog opened read-only has no waits tables
    _no_chunks = False  # nor manifests and chunks
    _no_workers = False  # nor the workers' heartbeats

    def _db(self) -> Any:
        """A connection for reads (its own transaction per statement)."""
        raise NotImplementedError

    def _tx(self, immediate: bool = True) -> contextlib.AbstractContextManager[Any]:
        """A transaction; `immediate`: a write transaction, serialized with every other
        writer of the store from its start (compare-and-swap checks inside it hold)."""
        raise NotImplementedError

    def _read_tx(self) -> contextlib.AbstractContextManager[Any]:
        """A transaction that only reads, every statement in it seeing the same
        committed state (SQLite's deferred transaction; PostgreSQL's repeatable read)."""
        return self._tx(immediate=False)

    @contextlib.contextmanager
    def _unsynced(self) -> Iterator[None]:
        """Transactions inside may commit without waiting for the disk (see
        LedgerCatalog.record_effects' `ordered`); a backend that cannot just commits."""
        yield

    def _notify(self, db: Any, job_id: str) -> None:
        """Inside a transaction that may make the job runnable (released, waiting on a
        timer, an approval decided, reconciled): tell waiting workers once it commits
        (PostgreSQL's NOTIFY; nothing in SQLite, whose workers poll)."""

    def _claim_tx(self, job_id: str) -> contextlib.AbstractContextManager[Any]:
        """The transaction of a worker's claim on a job (WorkerCatalog.claim_job): a
        write transaction; PostgreSQL's locks the job's row instead, and yields None
        when another claimer holds it (FOR UPDATE SKIP LOCKED: that worker gets it)."""
        return self._tx()

    def _column_sealer(self, sealer: Sealer) -> Sealer:
        """`sealer` as this backend's columns need it (PostgreSQL keeps sealed text in
        TEXT columns in a text form: serializers/_postgres/_db.py, TextSealer)."""
        return sealer

    def _after_reseal(self) -> None:
        """After every sealed value was rewritten (SQLite truncates its WAL)."""

    @property
    def _select_snapshots(self) -> str:
        return select_snapshots(self._snapshot_extra)

    # ------------------------------------------------ inside a transaction
    def _event(self, db: Conn, job_id: str, kind: str, detail: str) -> None:
        """Append to the job's timeline, in the caller's transaction."""
        at = float(self.clock())
        db.execute(
            "INSERT INTO events (job_id, at, kind, detail) VALUES (?, ?, ?, ?)",
            (
                job_id,
                at,
                kind,
                self.sealer.seal(detail, "events", "detail", job_id, kind, repr(at)),
            ),
        )

    def _check_epoch(self, db: Conn, job_id: str, epoch: int | None) -> None:
        """The fence: StaleWriter unless `epoch` holds the job's lease."""
        row = db.execute("SELECT epoch FROM leases WHERE job_id = ?", (job_id,)).fetchone()
        if row is None or row[0] != epoch:
            current = row[0] if row else "none"
            raise StaleWriter(
                f"job {job_id}: this runner's lease epoch {epoch} is no longer current "
                f"(current: {current}); another runner took the job over. This runner's write "
                "was rejected; nothing changed."
            )

    def _live_lease(self, db: Conn, job_id: str) -> LeaseRow | None:
        """The job's lease if it is live (an admin operation is refused then)."""
        row = db.execute(
            f"SELECT {LEASE_COLUMNS} FROM leases WHERE job_id = ?", (job_id,)
        ).fetchone()
        lease = lease_row(row) if row else None
        return lease if lease is not None and lease.is_live(self.clock()) else None

    def _fence_dispatch(
        self,
        db: Conn,
        job_id: str,
        epoch: int | None,
        ttl: float,
        margin: float,
        what: str,
    ) -> float:
        """Inside a dispatch's transaction: the epoch holds the lease and its deadline is
        more than `margin` seconds away; renew it (a heartbeat) and return the new one.
        One statement when it holds: the renewal is a compare-and-swap on the epoch and
        the deadline; only a refusal reads the lease again, to say why."""
        now = self.clock()  # inside the transaction: after any wait for the lock
        deadline = now + ttl
        renewed = db.execute(
            "UPDATE leases SET expires = ?, heartbeat = ? "
            "WHERE job_id = ? AND epoch = ? AND expires - ? > ?",
            (deadline, now, job_id, epoch, now, margin),
        ).rowcount
        if renewed == 1:
            return deadline
        self._check_epoch(db, job_id, epoch)  # StaleWriter naming the current epoch
        expires: float = db.execute(
            "SELECT expires FROM leases WHERE job_id = ?", (job_id,)
        ).fetchone()[0]
        raise StaleWriter(
            f"job {job_id}: {what} was not sent: this runner's lease (epoch {epoch}) "
            + (
                f"expired {now - expires:.1f}s ago"
                if expires <= now
                else f"expires in {expires - now:.1f}s"
            )
            + f", under the {margin:.1f}s a request needs (the runner was paused or its "
            "heartbeats were delayed), so another runner may take the job over. This "
            "runner stops; nothing was sent or recorded."
        )
