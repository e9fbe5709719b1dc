"""The embedded catalog: SQLite in WAL mode with synchronous=FULL, one file in the
store directory. Writes run in BEGIN IMMEDIATE transactions, so compare-and-swap
checks and their writes are atomic across processes."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time

from ..runtime._errors import (JobExists, JobNotFound, LeaseHeld, SnapshotNotFound, StaleWriter,
                              StoreError)
from ._store import EffectRow, EventRow, JobRow, LeaseRow, Owner, SnapshotRow, Store

__all__ = ["SqliteStore"]

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY, entry TEXT NOT NULL, argv TEXT NOT NULL, status TEXT NOT NULL,
    created REAL NOT NULL, updated REAL NOT NULL, resume_count INTEGER NOT NULL DEFAULT 0,
    parent TEXT, fork_seq INTEGER, error TEXT, epoch INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS snapshots (
    job_id TEXT NOT NULL, seq INTEGER NOT NULL, label TEXT, file TEXT NOT NULL,
    size INTEGER NOT NULL, created REAL NOT NULL, epoch INTEGER NOT NULL,
    PRIMARY KEY (job_id, seq));
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


class SqliteStore(Store):
    def __init__(self, directory: str, *, clock=time.time, synchronous: str = "FULL"):
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError("synchronous must be FULL or NORMAL")
        self.synchronous = synchronous
        self.directory = os.path.abspath(directory)
        os.makedirs(self.directory, exist_ok=True)
        self.path = os.path.join(self.directory, "catalog.db")
        self.clock = clock
        self._local = threading.local()
        # Several processes may open a new store at once: the schema is checked and
        # created in one write transaction.
        with self._tx() as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            tables = db.execute("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'"
                                ).fetchone()[0]
            if tables and version != SCHEMA_VERSION:
                raise StoreError(
                    f"the catalog {self.path} has schema version {version}; this snapstate "
                    f"uses {SCHEMA_VERSION}. Use the snapstate release that created it, or start "
                    "a new store (--store DIR).")
            if not tables:
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    # One connection per thread (the lease heartbeat runs in its own thread).
    def _db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            for attempt in range(200):   # switching to WAL is not covered by the busy timeout
                try:
                    db.execute("PRAGMA journal_mode=WAL")
                    break
                except sqlite3.OperationalError as exc:
                    if "locked" not in str(exc) or attempt == 199:
                        raise StoreError(f"cannot open the catalog {self.path}: {exc}") from None
                    time.sleep(0.01)
            db.execute(f"PRAGMA synchronous={self.synchronous}")
            db.execute("PRAGMA foreign_keys=ON")
            self._local.db = db
        return db

    class _Tx:
        def __init__(self, db: sqlite3.Connection, immediate: bool):
            self.db, self.immediate = db, immediate

        def __enter__(self) -> sqlite3.Connection:
            self.db.execute("BEGIN IMMEDIATE" if self.immediate else "BEGIN")
            return self.db

        def __exit__(self, kind, exc, tb):
            self.db.execute("COMMIT" if kind is None else "ROLLBACK")
            return False

    def _tx(self, immediate: bool = True) -> "_Tx":
        return self._Tx(self._db(), immediate)

    def close(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None

    # ---------------------------------------------------------------- jobs
    @staticmethod
    def _job(row) -> JobRow:
        return JobRow(row[0], json.loads(row[1]), json.loads(row[2]), row[3], row[4], row[5],
                      row[6], row[7], row[8], row[9])

    _JOB_COLUMNS = ("job_id, entry, argv, status, created, updated, resume_count, parent, "
                    "fork_seq, error")

    def create_job(self, job_id, entry, argv, *, parent=None, fork_seq=None) -> JobRow:
        now = self.clock()
        with self._tx() as db:
            if db.execute("SELECT 1 FROM jobs WHERE job_id = ?", (job_id,)).fetchone():
                raise JobExists(f"a job named {job_id!r} already exists in {self.directory}; "
                                "choose another id")
            db.execute("INSERT INTO jobs (job_id, entry, argv, status, created, updated, parent,"
                       " fork_seq) VALUES (?, ?, ?, 'running', ?, ?, ?, ?)",
                       (job_id, json.dumps(entry), json.dumps(argv), now, now, parent, fork_seq))
            self._event(db, job_id, "created", f"forked from {parent}@{fork_seq}" if parent
                        else f"entry {entry.get('path') or entry.get('module')}")
        return self.get_job(job_id)

    def get_job(self, job_id) -> JobRow:
        row = self._db().execute(f"SELECT {self._JOB_COLUMNS} FROM jobs WHERE job_id = ?",
                                 (job_id,)).fetchone()
        if row is None:
            raise JobNotFound(f"no job {job_id!r} in {self.directory} (`snaprun ls` lists the "
                              "jobs)")
        return self._job(row)

    def list_jobs(self) -> list[JobRow]:
        rows = self._db().execute(f"SELECT {self._JOB_COLUMNS} FROM jobs ORDER BY created, job_id")
        return [self._job(r) for r in rows]

    def set_status(self, job_id, status, *, epoch=None, error=None) -> None:
        with self._tx() as db:
            if epoch is not None:
                self._check_epoch(db, job_id, epoch)
            cur = db.execute("UPDATE jobs SET status = ?, error = ?, updated = ? WHERE job_id = ?",
                             (status, error, self.clock(), job_id))
            if cur.rowcount == 0:
                raise JobNotFound(f"no job {job_id!r}")
            self._event(db, job_id, status, error or "")

    def delete_job(self, job_id) -> None:
        with self._tx() as db:
            for table in ("snapshots", "leases", "events", "effects", "metrics", "jobs"):
                db.execute(f"DELETE FROM {table} WHERE job_id = ?", (job_id,))

    # ---------------------------------------------------------------- leases
    _LEASE_COLUMNS = "job_id, host, pid, started, epoch, expires, heartbeat"

    @staticmethod
    def _lease(row) -> LeaseRow:
        return LeaseRow(row[0], Owner(row[1], row[2], row[3]), row[4], row[5], row[6])

    def get_lease(self, job_id) -> LeaseRow | None:
        row = self._db().execute(f"SELECT {self._LEASE_COLUMNS} FROM leases WHERE job_id = ?",
                                 (job_id,)).fetchone()
        return self._lease(row) if row else None

    def acquire_lease(self, job_id, owner, ttl, *, force=False, resuming=False) -> int:
        now = self.clock()
        with self._tx() as db:
            job = db.execute("SELECT epoch FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
            if job is None:
                raise JobNotFound(f"no job {job_id!r} in {self.directory}")
            row = db.execute(f"SELECT {self._LEASE_COLUMNS} FROM leases WHERE job_id = ?",
                             (job_id,)).fetchone()
            forced = False
            if row is not None:
                lease = self._lease(row)
                forced = False
                if lease.is_live(now):
                    # Stale: the holder missed two heartbeats (it beats every third of its
                    # ttl, which is expires - heartbeat), though its lease has not expired.
                    holder_ttl = lease.expires - lease.heartbeat
                    stale_by_heartbeat = now - lease.heartbeat > 2 * holder_ttl / 3
                    forced = force and stale_by_heartbeat
                    if not forced:
                        age = now - lease.heartbeat
                        raise LeaseHeld(
                            f"job {job_id} is held by a live runner ({lease.owner}, lease epoch "
                            f"{lease.epoch}, last heartbeat {age:.0f}s ago, expires in "
                            f"{lease.expires - now:.0f}s); only one runner per job. "
                            + ("--force takes over only a stale lease (two missed "
                               f"heartbeats: none for {2 * holder_ttl / 3:.0f}s)" if force
                               else "Wait for it to finish, or use --force once its heartbeat "
                               "is stale"))
            epoch = job[0] + 1
            db.execute("UPDATE jobs SET epoch = ?, status = 'running', error = NULL, updated = ?,"
                       " resume_count = resume_count + ? WHERE job_id = ?",
                       (epoch, now, int(resuming), job_id))
            db.execute(f"INSERT OR REPLACE INTO leases ({self._LEASE_COLUMNS}) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (job_id, owner.host, owner.pid, owner.started, epoch, now + ttl, now))
            self._event(db, job_id, "lease", f"epoch {epoch} taken by {owner}"
                        + (" (forced over a stale lease)" if row is not None and forced else ""))
        return epoch

    def _check_epoch(self, db, job_id, epoch) -> None:
        row = db.execute("SELECT epoch FROM leases WHERE job_id = ?", (job_id,)).fetchone()
        if row is None or row[0] != epoch:
            current = row[0] if row else "none"
            raise StaleWriter(
                f"job {job_id}: this runner's lease epoch {epoch} is no longer current "
                f"(current: {current}); another runner took the job over. This runner's write "
                "was rejected; nothing changed.")

    def heartbeat(self, job_id, epoch, ttl) -> None:
        now = self.clock()
        with self._tx() as db:
            self._check_epoch(db, job_id, epoch)
            db.execute("UPDATE leases SET expires = ?, heartbeat = ? WHERE job_id = ?",
                       (now + ttl, now, job_id))

    def release_lease(self, job_id, epoch) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM leases WHERE job_id = ? AND epoch = ?", (job_id, epoch))

    # ---------------------------------------------------------------- snapshots
    @staticmethod
    def _snapshot(row) -> SnapshotRow:
        return SnapshotRow(*row)

    def commit_snapshot(self, row: SnapshotRow) -> None:
        with self._tx() as db:
            self._check_epoch(db, row.job_id, row.epoch)
            latest = db.execute("SELECT MAX(seq) FROM snapshots WHERE job_id = ?",
                                (row.job_id,)).fetchone()[0] or 0
            if latest != row.seq - 1:
                raise StaleWriter(
                    f"job {row.job_id}: snapshot {row.seq} expected {row.seq - 1} to be the "
                    f"latest, but it is {latest}; another writer moved the job on. Nothing "
                    "changed.")
            db.execute("INSERT INTO snapshots (job_id, seq, label, file, size, created, epoch) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?)", (row.job_id, row.seq, row.label, row.file,
                                                         row.size, row.created, row.epoch))
            db.execute("UPDATE jobs SET updated = ? WHERE job_id = ?", (row.created, row.job_id))
            self._event(db, row.job_id, "snapshot",
                        f"{row.seq}" + (f" ({row.label})" if row.label else ""))

    def snapshots(self, job_id) -> list[SnapshotRow]:
        rows = self._db().execute("SELECT job_id, seq, label, file, size, created, epoch FROM "
                                  "snapshots WHERE job_id = ? ORDER BY seq", (job_id,))
        return [self._snapshot(r) for r in rows]

    def delete_snapshot(self, job_id, seq) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM snapshots WHERE job_id = ? AND seq = ?", (job_id, seq))

    def add_snapshot_unfenced(self, row: SnapshotRow) -> None:
        """Record a snapshot copied in by fork or import (no runner, no lease)."""
        with self._tx() as db:
            try:
                db.execute("INSERT INTO snapshots (job_id, seq, label, file, size, created, "
                           "epoch) VALUES (?, ?, ?, ?, ?, ?, ?)",
                           (row.job_id, row.seq, row.label, row.file, row.size, row.created,
                            row.epoch))
            except sqlite3.IntegrityError:
                raise StoreError(f"job {row.job_id} already has snapshot {row.seq}") from None

    # ---------------------------------------------------------------- admin operations
    def _insert_job(self, db, job_id, entry, argv, parent, fork_seq, now) -> None:
        if db.execute("SELECT 1 FROM jobs WHERE job_id = ?", (job_id,)).fetchone():
            raise JobExists(f"a job named {job_id!r} already exists in {self.directory}; "
                            "choose another id")
        db.execute("INSERT INTO jobs (job_id, entry, argv, status, created, updated, parent,"
                   " fork_seq) VALUES (?, ?, ?, 'running', ?, ?, ?, ?)",
                   (job_id, json.dumps(entry), json.dumps(argv), now, now, parent, fork_seq))

    def _live_lease(self, db, job_id) -> LeaseRow | None:
        row = db.execute(f"SELECT {self._LEASE_COLUMNS} FROM leases WHERE job_id = ?",
                         (job_id,)).fetchone()
        lease = self._lease(row) if row else None
        return lease if lease is not None and lease.is_live(self.clock()) else None

    def fork_job(self, parent, fork_seq, job_id, files, inherited_effects) -> JobRow:
        now = self.clock()
        with self._tx() as db:
            source = db.execute("SELECT entry, argv FROM jobs WHERE job_id = ?",
                                (parent,)).fetchone()
            if source is None:
                raise JobNotFound(f"no job {parent!r} in {self.directory}")
            rows = [self._snapshot(r) for r in db.execute(
                "SELECT job_id, seq, label, file, size, created, epoch FROM snapshots "
                "WHERE job_id = ? AND seq <= ? ORDER BY seq", (parent, fork_seq))]
            if not rows or rows[-1].seq != fork_seq:
                raise SnapshotNotFound(f"job {parent} has no snapshot {fork_seq}; `snaprun log "
                                       f"{parent}` lists its snapshots")
            if sorted(files) != [r.seq for r in rows]:
                raise StoreError(f"the snapshots of job {parent} changed during the fork "
                                 "(pruned or rewound); nothing was forked, try again")
            self._insert_job(db, job_id, json.loads(source[0]), json.loads(source[1]), parent,
                             fork_seq, now)
            db.executemany(
                "INSERT INTO snapshots (job_id, seq, label, file, size, created, epoch) "
                "VALUES (?, ?, ?, ?, ?, ?, 0)",
                [(job_id, r.seq, r.label, files[r.seq], r.size, r.created) for r in rows])
            # Effects before the fork point are the new job's history; those after it
            # are the original's future: the fork makes its own, with its own keys.
            db.execute(f"INSERT INTO effects ({self._EFFECT_COLUMNS}) SELECT ?, "
                       f"{self._EFFECT_COLUMNS.split(', ', 1)[1]} FROM effects "
                       "WHERE job_id = ? AND ordinal <= ?", (job_id, parent, inherited_effects))
            self._event(db, job_id, "created", f"forked from {parent}@{fork_seq}")
            self._event(db, parent, "forked", f"snapshot {fork_seq} as job {job_id}")
        return self.get_job(job_id)

    def import_job(self, job_id, entry, argv, row, *, parent, source) -> JobRow:
        now = self.clock()
        with self._tx() as db:
            self._insert_job(db, job_id, entry, argv, parent, row.seq, now)
            db.execute("INSERT INTO snapshots (job_id, seq, label, file, size, created, epoch) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?)", (job_id, row.seq, row.label, row.file,
                                                         row.size, row.created, row.epoch))
            self._event(db, job_id, "created", f"imported snapshot {row.seq} of {parent}")
            self._event(db, job_id, "imported", f"from {source}")
        return self.get_job(job_id)

    def reconcile_effect(self, job_id, ordinal, *, state, result, note) -> EffectRow:
        now = self.clock()
        with self._tx() as db:
            job = db.execute("SELECT status FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
            if job is None:
                raise JobNotFound(f"no job {job_id!r} in {self.directory} (`snaprun ls` lists "
                                  "the jobs)")
            lease = self._live_lease(db, job_id)
            if lease is not None:
                raise LeaseHeld(f"job {job_id} is running ({lease.owner}); reconcile it once "
                                "it has stopped")
            found = db.execute(f"SELECT {self._EFFECT_COLUMNS} FROM effects WHERE job_id = ? "
                               "AND ordinal = ?", (job_id, ordinal)).fetchone()
            effect = EffectRow(*found) if found else None
            if effect is None or effect.kind == "value":
                raise StoreError(f"job {job_id} has no effect {ordinal} (`snaprun effects "
                                 f"{job_id}`)")
            if effect.state not in ("ambiguous", "dispatched", "failed"):
                raise StoreError(f"effect {ordinal} of job {job_id} is {effect.state}; only an "
                                 "ambiguous or failed effect can be reconciled")
            db.execute("UPDATE effects SET state = ?, result = ?, note = ?, updated = ? "
                       "WHERE job_id = ? AND ordinal = ?",
                       (state, result, note, now, job_id, ordinal))
            db.execute("INSERT INTO metrics (job_id, name, value) VALUES (?, 'reconciled', 1) "
                       "ON CONFLICT (job_id, name) DO UPDATE SET value = value + 1", (job_id,))
            self._event(db, job_id, "reconciled", f"effect {ordinal}: {note}")
            if job[0] == "parked":
                db.execute("UPDATE jobs SET status = 'interrupted', error = NULL, updated = ? "
                           "WHERE job_id = ?", (now, job_id))
                self._event(db, job_id, "interrupted", "")
            found = db.execute(f"SELECT {self._EFFECT_COLUMNS} FROM effects WHERE job_id = ? "
                               "AND ordinal = ?", (job_id, ordinal)).fetchone()
        return EffectRow(*found)

    def prune_job(self, job_id, *, finished, keep_last, older_than):
        with self._tx() as db:
            job = db.execute("SELECT status FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
            if job is None:
                raise JobNotFound(f"no job {job_id!r} in {self.directory}")
            lease = self._live_lease(db, job_id)
            if lease is not None:
                raise LeaseHeld(f"job {job_id} is running ({lease.owner}); it is not pruned")
            rows = [self._snapshot(r) for r in db.execute(
                "SELECT job_id, seq, label, file, size, created, epoch FROM snapshots "
                "WHERE job_id = ? ORDER BY seq", (job_id,))]
            if finished and job[0] in ("done", "failed"):
                for table in ("snapshots", "leases", "events", "effects", "metrics", "jobs"):
                    db.execute(f"DELETE FROM {table} WHERE job_id = ?", (job_id,))
                return True, rows
            keep = {r.seq for r in rows[-keep_last:]} if keep_last else {r.seq for r in rows}
            if older_than is not None:
                keep = {r.seq for r in rows if r.seq in keep and r.created >= older_than}
            if rows:
                keep.add(rows[-1].seq)       # a resumable job keeps its latest snapshot
            dropped = [r for r in rows if r.seq not in keep]
            db.executemany("DELETE FROM snapshots WHERE job_id = ? AND seq = ?",
                           [(job_id, r.seq) for r in dropped])
            if dropped:
                self._event(db, job_id, "pruned",
                            f"snapshots {', '.join(str(r.seq) for r in dropped)}")
            return False, dropped

    # ---------------------------------------------------------------- effect ledger
    _EFFECT_COLUMNS = ("job_id, ordinal, key, name, call_site, args_digest, args_repr, kind, "
                       "state, result, external_id, attempts, created, updated, note")

    def effect(self, job_id, ordinal) -> EffectRow | None:
        row = self._db().execute(f"SELECT {self._EFFECT_COLUMNS} FROM effects WHERE job_id = ? "
                                 "AND ordinal = ?", (job_id, ordinal)).fetchone()
        return EffectRow(*row) if row else None

    def effect_by_key(self, job_id, key) -> EffectRow | None:
        row = self._db().execute(f"SELECT {self._EFFECT_COLUMNS} FROM effects WHERE job_id = ? "
                                 "AND key = ? ORDER BY ordinal LIMIT 1", (job_id, key)).fetchone()
        return EffectRow(*row) if row else None

    def effects(self, job_id) -> list[EffectRow]:
        rows = self._db().execute(f"SELECT {self._EFFECT_COLUMNS} FROM effects WHERE job_id = ? "
                                  "ORDER BY ordinal", (job_id,))
        return [EffectRow(*r) for r in rows]

    def record_effects(self, rows, *, epoch, replace=False) -> None:
        if not rows:
            return
        verb = "INSERT OR REPLACE" if replace else "INSERT"
        with self._tx() as db:
            if epoch is not None:
                self._check_epoch(db, rows[0].job_id, epoch)
            try:
                db.executemany(f"{verb} INTO effects ({self._EFFECT_COLUMNS}) VALUES "
                               "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                               [tuple(r.__dict__.values()) for r in rows])
            except sqlite3.IntegrityError:
                raise StoreError(f"job {rows[0].job_id}: effect {rows[0].ordinal} is already "
                                 "recorded") from None

    def bump_metric(self, job_id, name, by=1) -> None:
        with self._tx() as db:
            db.execute("INSERT INTO metrics (job_id, name, value) VALUES (?, ?, ?) ON CONFLICT "
                       "(job_id, name) DO UPDATE SET value = value + excluded.value",
                       (job_id, name, by))

    def set_metric(self, job_id, name, value) -> None:
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO metrics (job_id, name, value) VALUES (?, ?, ?)",
                       (job_id, name, value))

    def metrics(self, job_id) -> dict:
        return dict(self._db().execute("SELECT name, value FROM metrics WHERE job_id = ?",
                                       (job_id,)).fetchall())

    # ---------------------------------------------------------------- timeline
    def _event(self, db, job_id, kind, detail) -> None:
        db.execute("INSERT INTO events (job_id, at, kind, detail) VALUES (?, ?, ?, ?)",
                   (job_id, self.clock(), kind, detail))

    def log_event(self, job_id, kind, detail="") -> None:
        with self._tx() as db:
            self._event(db, job_id, kind, detail)

    def events(self, job_id) -> list[EventRow]:
        rows = self._db().execute("SELECT job_id, at, kind, detail FROM events WHERE job_id = ? "
                                  "ORDER BY id", (job_id,))
        return [EventRow(*r) for r in rows]
