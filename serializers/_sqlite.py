"""The embedded catalog: SQLite in WAL mode with synchronous=FULL, one file in the
store directory. Writes run in BEGIN IMMEDIATE transactions, so compare-and-swap
checks and their writes are atomic across processes."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import sqlite3
import threading
import time
import types
import urllib.parse
from collections.abc import Callable
from typing import Any, Literal, NoReturn

from .._errors import (
    JobExists,
    JobFinished,
    JobNotFound,
    LeaseHeld,
    SnapshotNotFound,
    SnapstateError,
    StaleWriter,
    StoreDamaged,
    StoreError,
    StoreFailure,
)
from . import _fs
from ._sealing import PLAIN, Sealer
from ._store import (
    ApprovalRow,
    EffectKind,
    EffectRow,
    EffectState,
    EventRow,
    JobRow,
    LeaseRow,
    Owner,
    SnapshotRow,
    Store,
    WaitRow,
)

__all__ = ["SqliteStore"]

# The catalog's schema (PRAGMA user_version; "schema" in snapshot headers): bumped when a
# table changes. Older schemas are upgraded in place, newer ones refused (CHANGELOG.md).
SCHEMA_VERSION = 3
_WAIT_TABLES = """
CREATE TABLE IF NOT EXISTS waits (
    job_id TEXT PRIMARY KEY, kind TEXT NOT NULL, reason TEXT NOT NULL, due REAL,
    since REAL NOT NULL, seq INTEGER NOT NULL, approval_id TEXT);
CREATE TABLE IF NOT EXISTS approvals (
    job_id TEXT NOT NULL, approval_id TEXT NOT NULL, name TEXT NOT NULL, scope TEXT NOT NULL,
    digest TEXT NOT NULL, requested REAL NOT NULL, expires REAL, approvers TEXT,
    state TEXT NOT NULL, decided_by TEXT, decided_at REAL, note TEXT, site TEXT NOT NULL,
    PRIMARY KEY (job_id, approval_id))
"""
# Upgrades, applied in order by the first writable open: version 1 lacks the snapshots'
# digest and origin columns; version 2 the waits and approvals tables.
_UPGRADES = {
    1: (
        "ALTER TABLE snapshots ADD COLUMN digest TEXT",
        "ALTER TABLE snapshots ADD COLUMN origin TEXT",
    ),
    2: tuple(s for s in _WAIT_TABLES.split(";") if s.strip()),
}
_TABLES = frozenset({"jobs", "snapshots", "leases", "events", "effects", "metrics"})
_DECISION_COLUMNS = ("decided_by", "note")  # sealed with the approval's state
_JOB_TABLES = ("snapshots", "leases", "events", "effects", "metrics", "waits", "approvals")

_SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY, entry TEXT NOT NULL, argv TEXT NOT NULL, status TEXT NOT NULL,
    created REAL NOT NULL, updated REAL NOT NULL, resume_count INTEGER NOT NULL DEFAULT 0,
    parent TEXT, fork_seq INTEGER, error TEXT, epoch INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS snapshots (
    job_id TEXT NOT NULL, seq INTEGER NOT NULL, label TEXT, file TEXT NOT NULL,
    size INTEGER NOT NULL, created REAL NOT NULL, epoch INTEGER NOT NULL,
    digest TEXT, origin TEXT, PRIMARY KEY (job_id, seq));
CREATE TABLE IF NOT EXISTS leases (
    job_id TEXT PRIMARY KEY, host TEXT NOT NULL, pid INTEGER NOT NULL, started INTEGER NOT NULL,
    epoch INTEGER NOT NULL, expires REAL NOT NULL, heartbeat REAL NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL, at REAL NOT NULL,
    kind TEXT NOT NULL, detail TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS events_by_job ON events (job_id, id);
CREATE TABLE IF NOT EXISTS effects (
    job_id TEXT NOT NULL, ordinal INTEGER NOT NULL, key TEXT NOT NULL, name TEXT NOT NULL,
    call_site TEXT NOT NULL, args_digest TEXT NOT NULL, args_repr TEXT NOT NULL,
    kind TEXT NOT NULL, state TEXT NOT NULL, result BLOB, external_id TEXT,
    attempts INTEGER NOT NULL, created REAL NOT NULL, updated REAL NOT NULL, note TEXT NOT NULL,
    PRIMARY KEY (job_id, ordinal));
CREATE INDEX IF NOT EXISTS effects_by_key ON effects (job_id, key);
CREATE TABLE IF NOT EXISTS metrics (
    job_id TEXT NOT NULL, name TEXT NOT NULL, value REAL NOT NULL, PRIMARY KEY (job_id, name));
"""
    + _WAIT_TABLES
)


# SQLite messages of a failing store (the disk, the file system, permissions): the
# store failed, not the agent, and the job stays resumable once the cause is fixed.
_FAILURE_MESSAGES = (
    "database or disk is full",
    "disk i/o error",
    "readonly database",
    "unable to open database file",
    "read-only file system",
)
# Messages of a catalog that is not (or no longer) a SQLite database: damage.
_DAMAGE_MESSAGES = ("file is not a database", "database disk image is malformed")
_FAILURE_ERRNOS = {
    errno.ENOSPC,
    errno.EROFS,
    errno.EIO,
    errno.EDQUOT,
    errno.EFBIG,
    errno.EACCES,
    errno.EPERM,
}


def store_failure(exc: BaseException, path: str) -> SnapstateError | None:
    """The snapstate error for a low-level failure of the catalog at `path`, or None
    when `exc` is no store failure (e.g. "database is locked": the busy timeout and
    the callers handle that)."""
    if isinstance(exc, sqlite3.DatabaseError):
        text = str(exc).lower()
        if any(m in text for m in _DAMAGE_MESSAGES):
            return StoreDamaged(
                f"the catalog {path} is damaged or unreadable ({exc}); nothing "
                "was changed. Restore it from a backup, or run `snaprun "
                "repair`."
            )
        if not isinstance(exc, sqlite3.OperationalError) or not any(
            m in text for m in _FAILURE_MESSAGES
        ):
            return None
        reason = str(exc)
    elif isinstance(exc, OSError) and exc.errno in _FAILURE_ERRNOS:
        reason = exc.strerror or str(exc)
    else:
        return None
    return StoreFailure(
        f"the store failed: {reason} at {os.path.dirname(path)}; the job is left resumable: "
        "free space / make it writable, then `snaprun resume JOB`"
    )


_Row = tuple[Any, ...]  # a row as sqlite3 returns it (values by the column's type)


class SqliteStore(Store):
    """`sealer` seals what the agent produced (argv, errors, labels, event details, effect
    arguments, results, notes, external ids) on write and opens it on read, so callers
    see plain rows (serializers._sealing; a pass-through in a plaintext store).
    `create=False`: the catalog must already exist with its schema (an existing
    store's catalog is never re-created: StoreDamaged instead). `writable=False`: open
    for reading only (no schema upgrade)."""

    def __init__(
        self,
        directory: str,
        *,
        clock: Callable[[], float] = time.time,
        synchronous: str = "FULL",
        sealer: Sealer = PLAIN,
        create: bool = True,
        writable: bool = True,
    ):
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError("synchronous must be FULL or NORMAL")
        self.synchronous = synchronous
        self.sealer = sealer
        self.directory = os.path.abspath(directory)
        if create:
            _fs.make_private_dir(self.directory)
        self.path = os.path.join(self.directory, "catalog.db")
        if not create and not os.path.isfile(self.path):
            raise StoreDamaged(f"the catalog {self.path} is missing")
        if create:
            _fs.create_private_file(self.path)  # before SQLite: -wal and -shm get its mode
        self.clock = clock
        self._local = threading.local()
        self._snapshot_extra = "digest, origin"
        self._no_waits = False  # an older catalog opened read-only has no waits tables
        self._create = create
        self._writable = writable
        self._checked = create  # switch to WAL only once the file is known ours
        # Several processes may open a new store at once: the schema is checked and
        # created in one write transaction.
        try:
            with self._tx(immediate=writable) as db:
                version = db.execute("PRAGMA user_version").fetchone()[0]
                self.schema_version = version if version else SCHEMA_VERSION
                names = {
                    r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                }
                if not names and not create:
                    raise StoreDamaged(
                        f"the catalog {self.path} holds no tables (it was emptied or re-created)"
                    )
                if names and not _TABLES <= names:
                    raise StoreDamaged(
                        f"the catalog {self.path} lacks the tables "
                        f"{', '.join(sorted(_TABLES - names))}"
                    )
                if names and version not in (SCHEMA_VERSION, *_UPGRADES):
                    raise StoreError(
                        f"the catalog {self.path} has schema version {version}; this "
                        f"snapstate uses {SCHEMA_VERSION}. Use the snapstate release that "
                        "created it, or start a new store (--store DIR)."
                    )
                if not names:
                    for statement in _SCHEMA.split(";"):
                        if statement.strip():
                            db.execute(statement)
                    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                elif version != SCHEMA_VERSION and writable:
                    for step in range(version, SCHEMA_VERSION):
                        for statement in _UPGRADES[step]:
                            db.execute(statement)
                    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                    self.schema_version = SCHEMA_VERSION
                elif version != SCHEMA_VERSION:
                    if version < 2:
                        self._snapshot_extra = "NULL, NULL"  # read-only over version 1
                    self._no_waits = True  # read-only over version 1 or 2: nothing waits
            if not create:
                self._checked = True  # WAL is persistent: usually already set
                if writable:
                    self._wal(self._db())
        except sqlite3.DatabaseError as exc:
            self.close()
            raise StoreDamaged(f"the catalog {self.path} is damaged ({exc})") from None
        except BaseException:
            self.close()
            raise

    # One connection per thread (the lease heartbeat runs in its own thread).
    def _db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            try:
                db = self._connect()
            except (sqlite3.DatabaseError, OSError) as exc:
                mapped = store_failure(exc, self.path)
                if mapped is None:
                    raise
                raise mapped from exc
            self._local.db = db
        return db

    def _connect(self) -> sqlite3.Connection:
        if self._create:
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        else:  # an existing store's catalog: never create the file; a read-only
            # opening never writes it either (no checkpoint when it closes)
            mode = "rw" if self._writable else "ro"
            db = sqlite3.connect(
                f"file:{urllib.parse.quote(self.path)}?mode={mode}",
                uri=True,
                timeout=30,
                isolation_level=None,
            )
        try:
            if self._checked and self._writable:
                self._wal(db)
            db.execute(f"PRAGMA synchronous={self.synchronous}")
            db.execute("PRAGMA foreign_keys=ON")
        except BaseException:
            db.close()
            raise
        return db

    def _wal(self, db: sqlite3.Connection) -> None:
        for attempt in range(200):  # switching to WAL is not covered by the busy timeout
            try:
                db.execute("PRAGMA journal_mode=WAL")
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or attempt == 199:
                    if store_failure(exc, self.path) is not None:
                        raise
                    raise StoreError(f"cannot open the catalog {self.path}: {exc}") from None
                time.sleep(0.01)

    class _Tx:
        """A transaction; a failing disk or file system surfaces as StoreFailure (a
        damaged catalog as StoreDamaged), never as a bare sqlite3 error."""

        def __init__(self, db: sqlite3.Connection, immediate: bool, path: str):
            self.db, self.immediate, self.path = db, immediate, path

        def __enter__(self) -> sqlite3.Connection:
            try:
                self.db.execute("BEGIN IMMEDIATE" if self.immediate else "BEGIN")
            except (sqlite3.DatabaseError, OSError) as exc:
                self._raise_mapped(exc)
            return self.db

        def __exit__(
            self,
            kind: type[BaseException] | None,
            exc: BaseException | None,
            tb: types.TracebackType | None,
        ) -> Literal[False]:
            if kind is None:
                try:
                    self.db.execute("COMMIT")
                    return False
                except (sqlite3.DatabaseError, OSError) as commit_error:
                    exc = commit_error
            assert exc is not None  # the body's exception, or the COMMIT's
            # SQLite may have rolled back by itself (e.g. on SQLITE_FULL).
            if self.db.in_transaction:
                try:
                    self.db.execute("ROLLBACK")
                except sqlite3.Error:
                    pass
            mapped = store_failure(exc, self.path)
            if mapped is not None:
                raise mapped from exc
            if kind is None:
                raise exc  # a COMMIT that failed otherwise (e.g. busy)
            return False

        def _raise_mapped(self, exc: BaseException) -> NoReturn:
            mapped = store_failure(exc, self.path)
            if mapped is None:
                raise exc
            raise mapped from exc

    def _tx(self, immediate: bool = True) -> _Tx:
        return self._Tx(self._db(), immediate, self.path)

    def close(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None

    # ---------------------------------------------------------------- jobs
    def _job(self, row: _Row) -> JobRow:
        argv = self.sealer.open(row[2], "jobs", "argv", row[0])
        return JobRow(
            row[0],
            json.loads(row[1]),
            json.loads(argv),
            row[3],
            row[4],
            row[5],
            row[6],
            row[7],
            row[8],
            self.sealer.open(row[9], "jobs", "error", row[0]),
        )

    _JOB_COLUMNS = (
        "job_id, entry, argv, status, created, updated, resume_count, parent, fork_seq, error"
    )

    def create_job(
        self,
        job_id: str,
        entry: dict[str, Any],
        argv: list[str],
        *,
        parent: str | None = None,
        fork_seq: int | None = None,
    ) -> JobRow:
        now = self.clock()
        with self._tx() as db:
            self._insert_job(db, job_id, entry, argv, parent, fork_seq, now)
            self._event(
                db,
                job_id,
                "created",
                f"forked from {parent}@{fork_seq}"
                if parent
                else f"entry {entry.get('path') or entry.get('module')}",
            )
        return self.get_job(job_id)

    def get_job(self, job_id: str) -> JobRow:
        row = (
            self._db()
            .execute(f"SELECT {self._JOB_COLUMNS} FROM jobs WHERE job_id = ?", (job_id,))
            .fetchone()
        )
        if row is None:
            raise JobNotFound(
                f"no job {job_id!r} in {self.directory} (`snaprun ls` lists the jobs)"
            )
        return self._job(row)

    def list_jobs(self) -> list[JobRow]:
        rows = self._db().execute(f"SELECT {self._JOB_COLUMNS} FROM jobs ORDER BY created, job_id")
        return [self._job(r) for r in rows]

    def set_status(
        self, job_id: str, status: str, *, epoch: int | None = None, error: str | None = None
    ) -> None:
        with self._tx() as db:
            if epoch is not None:
                self._check_epoch(db, job_id, epoch)
            cur = db.execute(
                "UPDATE jobs SET status = ?, error = ?, updated = ? WHERE job_id = ?",
                (status, self.sealer.seal(error, "jobs", "error", job_id), self.clock(), job_id),
            )
            if cur.rowcount == 0:
                raise JobNotFound(f"no job {job_id!r}")
            self._event(db, job_id, status, error or "")

    def delete_job(self, job_id: str) -> None:
        with self._tx() as db:
            for table in (*_JOB_TABLES, "jobs"):
                db.execute(f"DELETE FROM {table} WHERE job_id = ?", (job_id,))

    # ---------------------------------------------------------------- waits
    _WAIT_COLUMNS = "job_id, kind, reason, due, since, seq, approval_id"

    def _wait(self, r: _Row) -> WaitRow:
        return WaitRow(
            r[0], r[1], self.sealer.open(r[2], "waits", "reason", r[0]), r[3], r[4], r[5], r[6]
        )

    def hibernate(self, wait: WaitRow, *, epoch: int) -> None:
        with self._tx() as db:
            self._check_epoch(db, wait.job_id, epoch)
            db.execute(
                f"INSERT OR REPLACE INTO waits ({self._WAIT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    wait.job_id,
                    wait.kind,
                    self.sealer.seal(wait.reason, "waits", "reason", wait.job_id),
                    wait.due,
                    wait.since,
                    wait.seq,
                    wait.approval_id,
                ),
            )
            db.execute(
                "UPDATE jobs SET status = 'waiting', error = NULL, updated = ? WHERE job_id = ?",
                (self.clock(), wait.job_id),
            )
            self._event(db, wait.job_id, "waiting", wait.reason)

    def get_wait(self, job_id: str) -> WaitRow | None:
        if self._no_waits:
            return None
        row = (
            self._db()
            .execute(f"SELECT {self._WAIT_COLUMNS} FROM waits WHERE job_id = ?", (job_id,))
            .fetchone()
        )
        return self._wait(row) if row else None

    def waits(self) -> list[WaitRow]:
        if self._no_waits:
            return []
        rows = self._db().execute(f"SELECT {self._WAIT_COLUMNS} FROM waits ORDER BY since")
        return [self._wait(r) for r in rows.fetchall()]

    def runnable_jobs(self, now: float) -> list[str]:
        if self._no_waits:
            return []
        db = self._db()
        waiting = db.execute(
            "SELECT w.job_id FROM waits w JOIN jobs j ON j.job_id = w.job_id "
            "WHERE j.status = 'waiting' AND ((w.due IS NOT NULL AND w.due <= ?) OR "
            "(w.approval_id IS NOT NULL AND EXISTS (SELECT 1 FROM approvals a WHERE "
            "a.job_id = w.job_id AND a.approval_id = w.approval_id AND a.state != 'pending')))"
            " ORDER BY COALESCE(w.due, w.since)",
            (now,),
        ).fetchall()
        running = db.execute(
            "SELECT job_id FROM jobs WHERE status = 'running' ORDER BY updated"
        ).fetchall()
        out = [r[0] for r in waiting]
        for (job_id,) in running:
            lease = self.get_lease(job_id)
            if lease is None or not lease.is_live(now):
                out.append(job_id)
        return out

    # The worker's claims (runtime/_worker.py): a short note that a worker is starting a
    # child for a job, so that two workers do not both start one. Correctness comes from
    # the job's lease, which the child takes; a claim only saves a wasted child. The
    # table is created on first use (no schema change: older snapstates ignore it).
    _CLAIMS = (
        "CREATE TABLE IF NOT EXISTS claims (job_id TEXT PRIMARY KEY, host TEXT NOT NULL, "
        "pid INTEGER NOT NULL, started INTEGER NOT NULL, expires REAL NOT NULL)"
    )

    def stopped_jobs(self) -> list[str]:
        rows = self._db().execute(
            "SELECT job_id FROM jobs WHERE status = 'interrupted' ORDER BY updated"
        )
        return [r[0] for r in rows.fetchall()]

    def claim_job(self, job_id: str, owner: Owner, ttl: float) -> bool:
        now = self.clock()
        with self._tx() as db:
            db.execute(self._CLAIMS)
            row = db.execute(
                "SELECT host, pid, started, expires FROM claims WHERE job_id = ?", (job_id,)
            ).fetchone()
            if row is not None:
                holder = Owner(row[0], row[1], row[2])
                if holder != owner and LeaseRow(job_id, holder, 0, row[3], now).is_live(now):
                    return False
            db.execute(
                "INSERT OR REPLACE INTO claims (job_id, host, pid, started, expires) "
                "VALUES (?, ?, ?, ?, ?)",
                (job_id, owner.host, owner.pid, owner.started, now + ttl),
            )
        return True

    def release_claims(self, owner: Owner, job_id: str | None = None) -> None:
        with self._tx() as db:
            db.execute(self._CLAIMS)
            db.execute(
                "DELETE FROM claims WHERE host = ? AND pid = ? AND started = ?"
                + (" AND job_id = ?" if job_id is not None else ""),
                (owner.host, owner.pid, owner.started) + ((job_id,) if job_id is not None else ()),
            )

    def give_up_job(self, job_id: str, error: str) -> bool:
        now = self.clock()
        with self._tx() as db:
            job = db.execute("SELECT status FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
            if job is None or job[0] not in ("running", "interrupted"):
                return False
            lease = self._live_lease(db, job_id)
            if lease is not None:
                return False  # a runner holds it (again): not abandoned
            db.execute(
                "UPDATE jobs SET status = 'failed', error = ?, updated = ? WHERE job_id = ?",
                (self.sealer.seal(error, "jobs", "error", job_id), now, job_id),
            )
            db.execute("DELETE FROM leases WHERE job_id = ?", (job_id,))
            self._event(db, job_id, "failed", error)
        return True

    # ---------------------------------------------------------------- approvals
    _APPROVAL_COLUMNS = (
        "job_id, approval_id, name, scope, digest, requested, expires, approvers, state, "
        "decided_by, decided_at, note, site"
    )
    _SEALED_APPROVAL = ("name", "scope", "digest", "approvers", "decided_by", "note", "site")

    def _approval(self, r: _Row) -> ApprovalRow:
        def opened(i: int, column: str) -> Any:
            # who decided and their note are bound to the decision (state): a rejection
            # flipped to granted by hand no longer opens
            state = (r[8],) if column in _DECISION_COLUMNS else ()
            return self.sealer.open(r[i], "approvals", column, r[0], r[1], *state)

        approvers = opened(7, "approvers")
        return ApprovalRow(
            job_id=r[0],
            approval_id=r[1],
            name=opened(2, "name"),
            scope=opened(3, "scope"),
            digest=opened(4, "digest"),
            requested=r[5],
            expires=r[6],
            approvers=None if approvers is None else json.loads(approvers),
            state=r[8],
            decided_by=opened(9, "decided_by"),
            decided_at=r[10],
            note=opened(11, "note"),
            site=opened(12, "site"),
        )

    def _approval_values(self, a: ApprovalRow) -> tuple[object, ...]:
        def sealed(value: str | None, column: str) -> object:
            state = (a.state,) if column in _DECISION_COLUMNS else ()
            return self.sealer.seal(value, "approvals", column, a.job_id, a.approval_id, *state)

        return (
            a.job_id,
            a.approval_id,
            sealed(a.name, "name"),
            sealed(a.scope, "scope"),
            sealed(a.digest, "digest"),
            a.requested,
            a.expires,
            sealed(None if a.approvers is None else json.dumps(a.approvers), "approvers"),
            a.state,
            sealed(a.decided_by, "decided_by"),
            a.decided_at,
            sealed(a.note, "note"),
            sealed(a.site, "site"),
        )

    def add_approval(self, row: ApprovalRow, *, epoch: int | None) -> ApprovalRow:
        with self._tx() as db:
            if epoch is not None:
                self._check_epoch(db, row.job_id, epoch)
            found = db.execute(
                f"SELECT {self._APPROVAL_COLUMNS} FROM approvals WHERE job_id = ? AND "
                "approval_id = ?",
                (row.job_id, row.approval_id),
            ).fetchone()
            if found is not None:
                return self._approval(found)
            db.execute(
                f"INSERT INTO approvals ({self._APPROVAL_COLUMNS}) VALUES "
                "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                self._approval_values(row),
            )
            self._event(db, row.job_id, "approval", f"{row.approval_id} requested: {row.name}")
            return row

    def get_approval(self, job_id: str, approval_id: str) -> ApprovalRow | None:
        if self._no_waits:
            return None
        found = (
            self._db()
            .execute(
                f"SELECT {self._APPROVAL_COLUMNS} FROM approvals WHERE job_id = ? AND "
                "approval_id = ?",
                (job_id, approval_id),
            )
            .fetchone()
        )
        return self._approval(found) if found else None

    def approvals(self, job_id: str | None = None) -> list[ApprovalRow]:
        if self._no_waits:
            return []
        where, args = ("WHERE job_id = ?", (job_id,)) if job_id is not None else ("", ())
        rows = self._db().execute(
            f"SELECT {self._APPROVAL_COLUMNS} FROM approvals {where} ORDER BY requested, rowid",
            args,
        )
        return [self._approval(r) for r in rows.fetchall()]

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
        with self._tx() as db:
            found = db.execute(
                f"SELECT {self._APPROVAL_COLUMNS} FROM approvals WHERE job_id = ? AND "
                "approval_id = ?",
                (job_id, approval_id),
            ).fetchone()
            if found is None:
                raise StoreError(
                    f"job {job_id} has no approval {approval_id!r}; `snaprun approvals` lists "
                    "the pending ones"
                )
            row = self._approval(found)
            if row.state != "pending":
                raise StoreError(
                    f"approval {approval_id} of job {job_id} was already {row.state} by "
                    f"{row.decided_by} at {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(row.decided_at or 0))}"
                    "; a decision is final (nothing changed)"
                )
            decided = dataclasses.replace(
                row,
                state="granted" if granted else "rejected",
                decided_by=by,
                decided_at=at,
                note=note,
            )
            db.execute(
                "UPDATE approvals SET state = ?, decided_by = ?, decided_at = ?, note = ? "
                "WHERE job_id = ? AND approval_id = ? AND state = 'pending'",
                (
                    decided.state,
                    *self._approval_values(decided)[9:12],
                    job_id,
                    approval_id,
                ),
            )
            self._event(db, job_id, "approval", f"{approval_id} {decided.state} by {by}")
            return decided

    # ---------------------------------------------------------------- leases
    _LEASE_COLUMNS = "job_id, host, pid, started, epoch, expires, heartbeat"

    @staticmethod
    def _lease(row: _Row) -> LeaseRow:
        return LeaseRow(row[0], Owner(row[1], row[2], row[3]), row[4], row[5], row[6])

    def get_lease(self, job_id: str) -> LeaseRow | None:
        row = (
            self._db()
            .execute(f"SELECT {self._LEASE_COLUMNS} FROM leases WHERE job_id = ?", (job_id,))
            .fetchone()
        )
        return self._lease(row) if row else None

    def acquire_lease(
        self, job_id: str, owner: Owner, ttl: float, *, force: bool = False, resuming: bool = False
    ) -> int:
        now = self.clock()
        with self._tx() as db:
            job = db.execute(
                "SELECT epoch, status FROM jobs WHERE job_id = ?", (job_id,)
            ).fetchone()
            if job is None:
                raise JobNotFound(f"no job {job_id!r} in {self.directory}")
            if job[1] == "done":  # checked where the lease is taken: no race with a finish
                raise JobFinished(
                    f"job {job_id} is done; it never runs again (`snaprun fork "
                    f"{job_id}@SEQ` starts a copy from one of its snapshots)"
                )
            row = db.execute(
                f"SELECT {self._LEASE_COLUMNS} FROM leases WHERE job_id = ?", (job_id,)
            ).fetchone()
            if row is not None:
                lease = self._lease(row)
                if lease.is_live(now):
                    # Never over a live lease, force or not: a holder that is alive but
                    # silent (paused, partitioned) may still send what it has
                    # dispatched until its lease expires. `--force` waits it out
                    # (runtime/_lease.py); a holder whose process is gone is not live.
                    holder_ttl = lease.expires - lease.heartbeat
                    age = now - lease.heartbeat
                    raise LeaseHeld(
                        f"job {job_id} is held by a live runner ({lease.owner}, lease epoch "
                        f"{lease.epoch}, last heartbeat {age:.0f}s ago, expires in "
                        f"{lease.expires - now:.0f}s); only one runner per job. "
                        + (
                            "--force never takes over a runner that is heartbeating; it waits "
                            "out the lease of one that is silent (no heartbeat for "
                            f"{2 * holder_ttl / 3:.0f}s)"
                            if force
                            else "Wait for it to finish, or use --force to wait out its lease "
                            "once its heartbeat is silent"
                        )
                    )
            epoch: int = job[0] + 1
            db.execute("DELETE FROM waits WHERE job_id = ?", (job_id,))  # polled again
            db.execute(
                "UPDATE jobs SET epoch = ?, status = 'running', error = NULL, updated = ?,"
                " resume_count = resume_count + ? WHERE job_id = ?",
                (epoch, now, int(resuming), job_id),
            )
            db.execute(
                f"INSERT OR REPLACE INTO leases ({self._LEASE_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (job_id, owner.host, owner.pid, owner.started, epoch, now + ttl, now),
            )
            self._event(
                db,
                job_id,
                "lease",
                f"epoch {epoch} taken by {owner}"
                + (
                    " (forced, after the previous lease expired)"
                    if force and row is not None and row[5] <= now
                    else ""
                ),
            )
        return epoch

    def _check_epoch(self, db: sqlite3.Connection, job_id: str, epoch: int | None) -> None:
        row = db.execute("SELECT epoch FROM leases WHERE job_id = ?", (job_id,)).fetchone()
        if row is None or row[0] != epoch:
            current = row[0] if row else "none"
            raise StaleWriter(
                f"job {job_id}: this runner's lease epoch {epoch} is no longer current "
                f"(current: {current}); another runner took the job over. This runner's write "
                "was rejected; nothing changed."
            )

    def record_resume(self, job_id: str, epoch: int, detail: str) -> None:
        with self._tx() as db:
            self._check_epoch(db, job_id, epoch)
            db.execute(
                "UPDATE jobs SET resume_count = resume_count + 1 WHERE job_id = ?", (job_id,)
            )
            self._event(db, job_id, "resumed", detail)

    def heartbeat(self, job_id: str, epoch: int, ttl: float) -> None:
        now = self.clock()
        with self._tx() as db:
            self._check_epoch(db, job_id, epoch)
            db.execute(
                "UPDATE leases SET expires = ?, heartbeat = ? WHERE job_id = ?",
                (now + ttl, now, job_id),
            )

    def _fence_dispatch(
        self,
        db: sqlite3.Connection,
        job_id: str,
        epoch: int | None,
        ttl: float,
        margin: float,
        what: str,
    ) -> float:
        """Inside a dispatch's transaction: the epoch holds the lease and its deadline is
        more than `margin` seconds away; renew it (a heartbeat) and return the new one."""
        now = self.clock()  # inside the transaction: after any wait for the lock
        self._check_epoch(db, job_id, epoch)
        expires: float = db.execute(
            "SELECT expires FROM leases WHERE job_id = ?", (job_id,)
        ).fetchone()[0]
        if expires - now <= margin:
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
        deadline = now + ttl
        db.execute(
            "UPDATE leases SET expires = ?, heartbeat = ? WHERE job_id = ?", (deadline, now, job_id)
        )
        return deadline

    def release_lease(self, job_id: str, epoch: int) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM leases WHERE job_id = ? AND epoch = ?", (job_id, epoch))

    # ---------------------------------------------------------------- snapshots
    _INSERT_SNAPSHOT = (
        "INSERT INTO snapshots (job_id, seq, label, file, size, created, epoch, "
        "digest, origin) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
    )

    @property
    def _select_snapshots(self) -> str:
        # a read-only opening of a schema-1 catalog has no digest/origin columns
        return (
            "SELECT job_id, seq, label, file, size, created, epoch, "
            f"{self._snapshot_extra} FROM snapshots"
        )

    def _snapshot(self, row: _Row) -> SnapshotRow:
        label = self.sealer.open(row[2], "snapshots", "label", row[0], row[1])
        return SnapshotRow(
            row[0],
            row[1],
            label,
            row[3],
            row[4],
            row[5],
            row[6],
            row[7],
            json.loads(row[8]) if row[8] else None,
        )

    def _snapshot_values(self, row: SnapshotRow) -> tuple[object, ...]:
        return (
            row.job_id,
            row.seq,
            self._label(row),
            row.file,
            row.size,
            row.created,
            row.epoch,
            row.digest,
            json.dumps(row.origin, sort_keys=True) if row.origin else None,
        )

    def commit_snapshot(self, row: SnapshotRow) -> None:
        with self._tx() as db:
            self._check_epoch(db, row.job_id, row.epoch)
            latest = (
                db.execute(
                    "SELECT MAX(seq) FROM snapshots WHERE job_id = ?", (row.job_id,)
                ).fetchone()[0]
                or 0
            )
            if latest != row.seq - 1:
                raise StaleWriter(
                    f"job {row.job_id}: snapshot {row.seq} expected {row.seq - 1} to be the "
                    f"latest, but it is {latest}; another writer moved the job on. Nothing "
                    "changed."
                )
            db.execute(self._INSERT_SNAPSHOT, self._snapshot_values(row))
            db.execute("UPDATE jobs SET updated = ? WHERE job_id = ?", (row.created, row.job_id))
            self._event(
                db, row.job_id, "snapshot", f"{row.seq}" + (f" ({row.label})" if row.label else "")
            )

    def _label(self, row: SnapshotRow) -> str | bytes | None:
        return self.sealer.seal(row.label, "snapshots", "label", row.job_id, row.seq)

    def snapshots(self, job_id: str) -> list[SnapshotRow]:
        rows = self._db().execute(
            f"{self._select_snapshots} WHERE job_id = ? ORDER BY seq", (job_id,)
        )
        return [self._snapshot(r) for r in rows]

    def delete_snapshot(self, job_id: str, seq: int) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM snapshots WHERE job_id = ? AND seq = ?", (job_id, seq))

    def add_snapshot_unfenced(self, row: SnapshotRow) -> None:
        """Record a snapshot copied in by fork or import (no runner, no lease)."""
        with self._tx() as db:
            try:
                db.execute(self._INSERT_SNAPSHOT, self._snapshot_values(row))
            except sqlite3.IntegrityError:
                raise StoreError(f"job {row.job_id} already has snapshot {row.seq}") from None

    def rebuild_job(
        self,
        job: JobRow,
        epoch: int,
        rows: list[SnapshotRow],
        metrics: dict[str, float] | None = None,
    ) -> None:
        """Recreate a job and its snapshot rows from its files (snaprun repair), in one
        transaction; its next lease epoch is above every epoch its files carry."""
        with self._tx() as db:
            if db.execute("SELECT 1 FROM jobs WHERE job_id = ?", (job.job_id,)).fetchone():
                raise JobExists(f"a job named {job.job_id!r} already exists in {self.directory}")
            db.execute(
                "INSERT INTO jobs (job_id, entry, argv, status, created, updated, "
                "resume_count, parent, fork_seq, error, epoch) VALUES "
                "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    job.job_id,
                    json.dumps(job.entry),
                    self.sealer.seal(json.dumps(job.argv), "jobs", "argv", job.job_id),
                    job.status,
                    job.created,
                    job.updated,
                    job.resume_count,
                    job.parent,
                    job.fork_seq,
                    self.sealer.seal(job.error, "jobs", "error", job.job_id),
                    epoch,
                ),
            )
            db.executemany(self._INSERT_SNAPSHOT, [self._snapshot_values(r) for r in rows])
            db.executemany(
                "INSERT INTO metrics (job_id, name, value) VALUES (?, ?, ?)",
                [(job.job_id, k, v) for k, v in (metrics or {}).items()],
            )
            self._event(db, job.job_id, "rebuilt", job.error or "")

    # ---------------------------------------------------------------- admin operations
    def _insert_job(
        self,
        db: sqlite3.Connection,
        job_id: str,
        entry: dict[str, Any],
        argv: list[str],
        parent: str | None,
        fork_seq: int | None,
        now: float,
    ) -> None:
        if db.execute("SELECT 1 FROM jobs WHERE job_id = ?", (job_id,)).fetchone():
            raise JobExists(
                f"a job named {job_id!r} already exists in {self.directory}; choose another id"
            )
        db.execute(
            "INSERT INTO jobs (job_id, entry, argv, status, created, updated, parent,"
            " fork_seq) VALUES (?, ?, ?, 'running', ?, ?, ?, ?)",
            (
                job_id,
                json.dumps(entry),
                self.sealer.seal(json.dumps(argv), "jobs", "argv", job_id),
                now,
                now,
                parent,
                fork_seq,
            ),
        )

    def _live_lease(self, db: sqlite3.Connection, job_id: str) -> LeaseRow | None:
        row = db.execute(
            f"SELECT {self._LEASE_COLUMNS} FROM leases WHERE job_id = ?", (job_id,)
        ).fetchone()
        lease = self._lease(row) if row else None
        return lease if lease is not None and lease.is_live(self.clock()) else None

    def fork_job(
        self,
        parent: str,
        fork_seq: int,
        job_id: str,
        copies: dict[int, SnapshotRow],
        inherited_effects: int,
    ) -> JobRow:
        now = self.clock()
        with self._tx() as db:
            source = db.execute(
                "SELECT entry, argv FROM jobs WHERE job_id = ?", (parent,)
            ).fetchone()
            if source is None:
                raise JobNotFound(f"no job {parent!r} in {self.directory}")
            rows = [
                self._snapshot(r)
                for r in db.execute(
                    f"{self._select_snapshots} WHERE job_id = ? AND seq <= ? ORDER BY seq",
                    (parent, fork_seq),
                )
            ]
            if not rows or rows[-1].seq != fork_seq:
                raise SnapshotNotFound(
                    f"job {parent} has no snapshot {fork_seq}; `snaprun log "
                    f"{parent}` lists its snapshots"
                )
            if sorted(copies) != [r.seq for r in rows] or any(
                copies[r.seq].digest is not None
                and r.digest is not None
                and copies[r.seq].digest != r.digest
                for r in rows
            ):
                raise StoreError(
                    f"the snapshots of job {parent} changed during the fork "
                    "(pruned or rewound); nothing was forked, try again"
                )
            argv = json.loads(self.sealer.open(source[1], "jobs", "argv", parent))
            self._insert_job(db, job_id, json.loads(source[0]), argv, parent, fork_seq, now)
            db.executemany(
                self._INSERT_SNAPSHOT, [self._snapshot_values(copies[r.seq]) for r in rows]
            )
            # Effects before the fork point are the new job's history; those after it
            # are the original's future: the fork makes its own, with its own keys.
            # Re-sealed for the new job (a sealed value is bound to its row).
            inherited = [
                self._effect(r)
                for r in db.execute(
                    f"SELECT {self._EFFECT_COLUMNS} FROM effects WHERE job_id = ? AND ordinal <= ? "
                    "ORDER BY ordinal",
                    (parent, inherited_effects),
                )
            ]
            db.executemany(
                f"INSERT INTO effects ({self._EFFECT_COLUMNS}) VALUES "
                "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [self._effect_values(dataclasses.replace(e, job_id=job_id)) for e in inherited],
            )
            self._event(db, job_id, "created", f"forked from {parent}@{fork_seq}")
            self._event(db, parent, "forked", f"snapshot {fork_seq} as job {job_id}")
        return self.get_job(job_id)

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
        now = self.clock()
        with self._tx() as db:
            self._insert_job(db, job_id, entry, argv, parent, row.seq, now)
            db.execute(self._INSERT_SNAPSHOT, self._snapshot_values(row))
            self._event(db, job_id, "created", f"imported snapshot {row.seq} of {parent}")
            self._event(db, job_id, "imported", f"from {source}")
        return self.get_job(job_id)

    def reconcile_effect(
        self, job_id: str, ordinal: int, *, state: EffectState, result: bytes | None, note: str
    ) -> EffectRow:
        now = self.clock()
        with self._tx() as db:
            job = db.execute("SELECT status FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
            if job is None:
                raise JobNotFound(
                    f"no job {job_id!r} in {self.directory} (`snaprun ls` lists the jobs)"
                )
            lease = self._live_lease(db, job_id)
            if lease is not None:
                raise LeaseHeld(
                    f"job {job_id} is running ({lease.owner}); reconcile it once it has stopped"
                )
            found = db.execute(
                f"SELECT {self._EFFECT_COLUMNS} FROM effects WHERE job_id = ? AND ordinal = ?",
                (job_id, ordinal),
            ).fetchone()
            effect = self._effect(found) if found else None
            if effect is None or effect.kind == EffectKind.VALUE:
                raise StoreError(
                    f"job {job_id} has no effect {ordinal} (`snaprun effects {job_id}`)"
                )
            if effect.state not in (
                EffectState.AMBIGUOUS,
                EffectState.DISPATCHED,
                EffectState.FAILED,
            ):
                raise StoreError(
                    f"effect {ordinal} of job {job_id} is {effect.state}; only an "
                    "ambiguous or failed effect can be reconciled"
                )
            settled = dataclasses.replace(
                effect, state=state, result=result, note=note, updated=now
            )
            db.execute(
                f"INSERT OR REPLACE INTO effects ({self._EFFECT_COLUMNS}) VALUES "
                "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                self._effect_values(settled),
            )
            db.execute(
                "INSERT INTO metrics (job_id, name, value) VALUES (?, 'reconciled', 1) "
                "ON CONFLICT (job_id, name) DO UPDATE SET value = value + 1",
                (job_id,),
            )
            self._event(db, job_id, "reconciled", f"effect {ordinal}: {note}")
            if job[0] == "parked":
                db.execute(
                    "UPDATE jobs SET status = 'interrupted', error = NULL, updated = ? "
                    "WHERE job_id = ?",
                    (now, job_id),
                )
                self._event(db, job_id, "interrupted", "")
        return settled

    def prune_job(
        self, job_id: str, *, finished: bool, keep_last: int | None, older_than: float | None
    ) -> tuple[bool, list[SnapshotRow]]:
        with self._tx() as db:
            job = db.execute("SELECT status FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
            if job is None:
                raise JobNotFound(f"no job {job_id!r} in {self.directory}")
            lease = self._live_lease(db, job_id)
            if lease is not None:
                raise LeaseHeld(f"job {job_id} is running ({lease.owner}); it is not pruned")
            rows = [
                self._snapshot(r)
                for r in db.execute(
                    f"{self._select_snapshots} WHERE job_id = ? ORDER BY seq", (job_id,)
                )
            ]
            if finished and job[0] in ("done", "failed"):
                for table in (*_JOB_TABLES, "jobs"):
                    db.execute(f"DELETE FROM {table} WHERE job_id = ?", (job_id,))
                return True, rows
            keep = {r.seq for r in rows[-keep_last:]} if keep_last else {r.seq for r in rows}
            if older_than is not None:
                keep = {r.seq for r in rows if r.seq in keep and r.created >= older_than}
            if rows:
                keep.add(rows[-1].seq)  # a resumable job keeps its latest snapshot
            dropped = [r for r in rows if r.seq not in keep]
            db.executemany(
                "DELETE FROM snapshots WHERE job_id = ? AND seq = ?",
                [(job_id, r.seq) for r in dropped],
            )
            if dropped:
                self._event(
                    db, job_id, "pruned", f"snapshots {', '.join(str(r.seq) for r in dropped)}"
                )
            return False, dropped

    # ---------------------------------------------------------------- effect ledger
    _EFFECT_FIELDS = tuple(f.name for f in dataclasses.fields(EffectRow))
    _EFFECT_COLUMNS = ", ".join(_EFFECT_FIELDS)

    _SEALED_EFFECT_COLUMNS = ("args_repr", "result", "external_id", "note")

    def _effect(self, row: tuple[Any, ...]) -> EffectRow:
        columns: dict[str, Any] = dict(zip(self._EFFECT_FIELDS, row, strict=True))
        job_id, ordinal = columns["job_id"], columns["ordinal"]
        for column in self._SEALED_EFFECT_COLUMNS:
            columns[column] = self.sealer.open(columns[column], "effects", column, job_id, ordinal)
        columns["args_digest"] = self.sealer.stored_digest(
            columns["args_digest"], "effects", "args_digest", job_id, ordinal
        )
        try:
            return EffectRow.from_columns(columns)
        except ValueError:  # a state or kind snapstate never writes
            raise StoreDamaged(
                f"the catalog {self.path} is damaged or was written by a newer snapstate: "
                f"effect {ordinal} of job {job_id} has state {columns['state']!r} and kind "
                f"{columns['kind']!r}; nothing was changed."
            ) from None

    def _effect_values(self, row: EffectRow) -> tuple[object, ...]:
        columns: dict[str, Any] = row.columns()
        for column in self._SEALED_EFFECT_COLUMNS:
            columns[column] = self.sealer.seal(
                columns[column], "effects", column, row.job_id, row.ordinal
            )
        columns["args_digest"] = self.sealer.digest(row.args_digest)
        return tuple(columns.values())

    def effect(self, job_id: str, ordinal: int) -> EffectRow | None:
        row = (
            self._db()
            .execute(
                f"SELECT {self._EFFECT_COLUMNS} FROM effects WHERE job_id = ? AND ordinal = ?",
                (job_id, ordinal),
            )
            .fetchone()
        )
        return self._effect(row) if row else None

    def effect_by_key(self, job_id: str, key: str) -> EffectRow | None:
        row = (
            self._db()
            .execute(
                f"SELECT {self._EFFECT_COLUMNS} FROM effects WHERE job_id = ? "
                "AND key = ? ORDER BY ordinal LIMIT 1",
                (job_id, key),
            )
            .fetchone()
        )
        return self._effect(row) if row else None

    def effects(self, job_id: str) -> list[EffectRow]:
        rows = self._db().execute(
            f"SELECT {self._EFFECT_COLUMNS} FROM effects WHERE job_id = ? ORDER BY ordinal",
            (job_id,),
        )
        return [self._effect(r) for r in rows]

    def record_effects(
        self,
        rows: list[EffectRow],
        *,
        epoch: int | None,
        replace: bool = False,
        ttl: float | None = None,
        margin: float = 0.0,
    ) -> float | None:
        if not rows:
            return None
        verb = "INSERT OR REPLACE" if replace else "INSERT"
        deadline = None
        with self._tx() as db:
            if ttl is not None:
                deadline = self._fence_dispatch(
                    db,
                    rows[0].job_id,
                    epoch,
                    ttl,
                    margin,
                    f"effect {rows[-1].ordinal} ({rows[-1].name})",
                )
            elif epoch is not None:
                self._check_epoch(db, rows[0].job_id, epoch)
            try:
                db.executemany(
                    f"{verb} INTO effects ({self._EFFECT_COLUMNS}) VALUES "
                    "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [self._effect_values(r) for r in rows],
                )
            except sqlite3.IntegrityError:
                raise StoreError(
                    f"job {rows[0].job_id}: effect {rows[0].ordinal} is already recorded"
                ) from None
        return deadline

    def bump_metric(self, job_id: str, name: str, by: int = 1) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO metrics (job_id, name, value) VALUES (?, ?, ?) ON CONFLICT "
                "(job_id, name) DO UPDATE SET value = value + excluded.value",
                (job_id, name, by),
            )

    def set_metric(self, job_id: str, name: str, value: float) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO metrics (job_id, name, value) VALUES (?, ?, ?)",
                (job_id, name, value),
            )

    def metrics(self, job_id: str) -> dict[str, float]:
        return dict(
            self._db()
            .execute("SELECT name, value FROM metrics WHERE job_id = ?", (job_id,))
            .fetchall()
        )

    # ---------------------------------------------------------------- sealing
    def reseal(self, sealer: Sealer) -> None:
        """Rewrite every sealed column with `sealer` in one transaction (encryption
        turned on or off for a store that has rows; values already in the new form are
        taken as they are), then compact the catalog and empty its WAL, so no earlier
        form of a value stays in the files."""
        reader = Sealer(
            sealer.keys if sealer.enabled else self.sealer.keys,
            sealer.enabled or self.sealer.enabled,
            tolerant=True,
        )
        old, self.sealer = self.sealer, reader
        try:
            with self._tx() as db:
                jobs = [
                    self._job(r)
                    for r in db.execute(f"SELECT {self._JOB_COLUMNS} FROM jobs").fetchall()
                ]
                snaps = [self._snapshot(r) for r in db.execute(self._select_snapshots).fetchall()]
                effects = [
                    self._effect(r)
                    for r in db.execute(f"SELECT {self._EFFECT_COLUMNS} FROM effects").fetchall()
                ]
                events = [
                    (
                        i,
                        job_id,
                        at,
                        kind,
                        self.sealer.open(detail, "events", "detail", job_id, kind, repr(at)),
                    )
                    for i, job_id, at, kind, detail in db.execute(
                        "SELECT id, job_id, at, kind, detail FROM events"
                    ).fetchall()
                ]
                waits = [
                    self._wait(r)
                    for r in db.execute(f"SELECT {self._WAIT_COLUMNS} FROM waits").fetchall()
                ]
                approvals = [
                    self._approval(r)
                    for r in db.execute(
                        f"SELECT {self._APPROVAL_COLUMNS} FROM approvals"
                    ).fetchall()
                ]
                self.sealer = sealer
                for w in waits:
                    db.execute(
                        "UPDATE waits SET reason = ? WHERE job_id = ?",
                        (sealer.seal(w.reason, "waits", "reason", w.job_id), w.job_id),
                    )
                db.executemany(
                    f"INSERT OR REPLACE INTO approvals ({self._APPROVAL_COLUMNS}) VALUES "
                    "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [self._approval_values(a) for a in approvals],
                )
                for job in jobs:
                    db.execute(
                        "UPDATE jobs SET argv = ?, error = ? WHERE job_id = ?",
                        (
                            sealer.seal(json.dumps(job.argv), "jobs", "argv", job.job_id),
                            sealer.seal(job.error, "jobs", "error", job.job_id),
                            job.job_id,
                        ),
                    )
                for snap in snaps:
                    db.execute(
                        "UPDATE snapshots SET label = ? WHERE job_id = ? AND seq = ?",
                        (self._label(snap), snap.job_id, snap.seq),
                    )
                for i, job_id, at, kind, detail in events:
                    db.execute(
                        "UPDATE events SET detail = ? WHERE id = ?",
                        (sealer.seal(detail, "events", "detail", job_id, kind, repr(at)), i),
                    )
                db.executemany(
                    f"INSERT OR REPLACE INTO effects ({self._EFFECT_COLUMNS}) VALUES "
                    "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [self._effect_values(r) for r in effects],
                )
        except BaseException:
            self.sealer = old
            raise
        db = self._db()
        db.execute("VACUUM")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    # ---------------------------------------------------------------- timeline
    def _event(self, db: sqlite3.Connection, job_id: str, kind: str, detail: str) -> None:
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

    def log_event(self, job_id: str, kind: str, detail: str = "") -> None:
        with self._tx() as db:
            self._event(db, job_id, kind, detail)

    def events(self, job_id: str) -> list[EventRow]:
        rows = self._db().execute(
            "SELECT job_id, at, kind, detail FROM events WHERE job_id = ? ORDER BY id", (job_id,)
        )
        return [
            EventRow(
                r[0], r[1], r[2], self.sealer.open(r[3], "events", "detail", r[0], r[2], repr(r[1]))
            )
            for r in rows
        ]
