"""The SQLite catalog's one connection and transaction helper: the schema and its
upgrades, opening (and checking) the catalog file, one connection per thread with its
pragmas (WAL, synchronous), `_tx()` (BEGIN IMMEDIATE ... COMMIT, a failing disk mapped
to StoreFailure and a damaged file to StoreDamaged), and the checks every fenced write
makes inside its transaction: the lease epoch, a live lease, a dispatch's deadline.
Each capability module (_jobs.py, _leases.py, ...) is a mixin over `SqliteBase`."""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import shutil
import sqlite3
import tempfile
import threading
import time
import types
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Literal, NoReturn

from ..._errors import SnapstateError, StoreDamaged, StoreError, StoreFailure
from .. import _fs
from .._sealing import PLAIN, Sealer
from .._sql._base import JOB_TABLES, SqlBase

__all__ = ["SCHEMA_VERSION", "SqliteBase", "store_failure", "JOB_TABLES", "sqlite_schema_version"]

# The catalog's schema (PRAGMA user_version; "schema" in snapshot headers): bumped when a
# table changes. Older schemas are upgraded in place, newer ones refused (CHANGELOG.md).
SCHEMA_VERSION = 6
# Since schema 5 the rows that decide what code runs or what the agent receives carry
# a signature (serializers/_sql/_rows.py); an older catalog's rows are signed once, by
# the store that upgrades it (serializers/_home.py), which then records in its key file
# that they are signed: a catalog of an older schema is then a rollback, refused.
SIGNED_SINCE = 5
_SIGNED_TABLES = ("jobs", "effects", "waits", "approvals")
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
# Schema 5: each row's signature (Sealer.row_mac), on the tables whose rows decide what
# code runs or what value the agent receives.
_ROW_SIGNATURES = tuple(f"ALTER TABLE {table} ADD COLUMN mac TEXT" for table in _SIGNED_TABLES)
# Chunked snapshot bodies (serializers/_chunkstore.py): one signed manifest per chunked
# snapshot, each chunk once (its encoded bytes here, or where they lie in a pack file).
# A snapshot row's deletion (prune, rewind, job deletion) takes its manifest with it.
_CHUNK_TABLES = (
    """CREATE TABLE IF NOT EXISTS manifests (
    job_id TEXT NOT NULL, seq INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY (job_id, seq))""",
    """CREATE TABLE IF NOT EXISTS chunks (
    id BLOB PRIMARY KEY, size INTEGER NOT NULL, data BLOB, pack TEXT,
    offset INTEGER NOT NULL DEFAULT 0, length INTEGER NOT NULL DEFAULT 0, base BLOB)""",
    """CREATE TRIGGER IF NOT EXISTS snapshot_drops_manifest AFTER DELETE ON snapshots BEGIN
    DELETE FROM manifests WHERE job_id = OLD.job_id AND seq = OLD.seq; END""",
)
# Workers' heartbeats (serializers/_sql/_waits.py, beat_worker and workers): schema 5.
_WORKER_TABLES = (
    """CREATE TABLE IF NOT EXISTS workers (
    host TEXT NOT NULL, pid INTEGER NOT NULL, started INTEGER NOT NULL, info TEXT NOT NULL,
    beat REAL NOT NULL, expires REAL NOT NULL, PRIMARY KEY (host, pid, started))""",
)
# Upgrades, applied in order by the first writable open: version 1 lacks the snapshots'
# digest and origin columns; version 2 the waits and approvals tables; version 3 the
# manifests and chunks; version 4 the rows' signatures (their values are written by the
# store once it has its keys: serializers/_home.py); version 5 the workers' heartbeats.
_UPGRADES = {
    1: (
        "ALTER TABLE snapshots ADD COLUMN digest TEXT",
        "ALTER TABLE snapshots ADD COLUMN origin TEXT",
    ),
    2: tuple(s for s in _WAIT_TABLES.split(";") if s.strip()),
    3: _CHUNK_TABLES,
    4: _ROW_SIGNATURES,
    5: _WORKER_TABLES,  # `snaprun worker --status`
}
_TABLES = frozenset({"jobs", "snapshots", "leases", "events", "effects", "metrics"})

_CREATE = (
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
_SCHEMA = _CREATE + ";" + ";".join(_ROW_SIGNATURES)


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


class SqliteBase(SqlBase):
    """The catalog file, its connections and transactions. `sealer` seals what the
    agent produced on write and opens it on read (a pass-through in a plaintext store).
    `create=False`: the catalog must already exist with its schema (an existing
    store's catalog is never re-created: StoreDamaged instead). `writable=False`: open
    for reading only (no schema upgrade). `signed_rows`: the store's key file records
    that this catalog's rows are signed, so a schema older than SIGNED_SINCE is a
    rollback (StoreDamaged, nothing upgraded)."""

    integrity_error = sqlite3.IntegrityError
    insertion_order = "rowid"

    def __init__(
        self,
        directory: str,
        *,
        clock: Callable[[], float] = time.time,
        synchronous: str = "FULL",
        sealer: Sealer = PLAIN,
        create: bool = True,
        writable: bool = True,
        signed_rows: bool = False,
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
        self._create = create
        self._writable = writable
        self._checked = create  # switch to WAL only once the file is known ours
        self._unsigned_views: tuple[str, ...] = ()  # read-only over schema < 5
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
                if names and version < SIGNED_SINCE and signed_rows:
                    raise StoreDamaged(
                        f"the catalog {self.path} has schema version {version}, but the "
                        "store's key file records that its rows are signed since schema "
                        f"{SIGNED_SINCE}: the catalog was rolled back or replaced by an "
                        "older one (its rows' signatures dropped). Nothing was changed; "
                        "restore the catalog from a backup taken since the upgrade"
                    )
                if not names:
                    for statement in _SCHEMA.split(";"):
                        if statement.strip():
                            db.execute(statement)
                    for statement in (*_CHUNK_TABLES, *_WORKER_TABLES):
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
                    self._no_waits = version < 3  # read-only over version 1 or 2: nothing waits
                    self._no_chunks = version < 4  # read-only over 1-3: nothing is chunked
                    self._no_workers = version < 6  # read-only over 1-5: no worker beats
                    if version < SIGNED_SINCE:
                        # read-only over version 1-4: rows unsigned, read through views
                        # with an empty signature column (rows not yet signed are
                        # accepted only while the key file does not record them signed)
                        self._unsigned_views = tuple(t for t in _SIGNED_TABLES if t in names)
            if self._unsigned_views:  # the connection opened above has none yet
                self._views(self._db())
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
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
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
            uri = (
                f"file:{urllib.parse.quote(self.path)}?mode=rw"
                if self._writable
                else self._read_only_uri()
            )
            db = sqlite3.connect(uri, uri=True, timeout=30, isolation_level=None)
        try:
            if self._checked and self._writable:
                self._wal(db)
            self._views(db)
            db.execute(f"PRAGMA synchronous={self.synchronous}")
            db.execute("PRAGMA foreign_keys=ON")
        except BaseException:
            db.close()
            raise
        return db

    def _read_only_uri(self) -> str:
        """How a read-only opening reads the catalog. SQLite reads a WAL-mode file
        through its -shm index, which it must create when it is missing: impossible on
        a read-only file system (a mounted backup, a read-only volume). There, where
        no process can write the catalog either, it is opened `immutable` when no WAL
        holds anything (the main file is then the whole catalog), or, when a WAL does,
        a private copy of the file and its WAL is read instead (never the main file
        alone: that would silently miss the WAL's commits). Nothing is created in the
        store directory either way."""
        plain = f"file:{urllib.parse.quote(self.path)}?mode=ro"
        directory = os.path.dirname(self.path)
        if os.path.exists(self.path + "-shm") or not _read_only_fs(directory):
            return plain
        wal = self.path + "-wal"
        if not os.path.exists(wal) or os.path.getsize(wal) == 0:
            return plain + "&immutable=1"
        copy = self._local_copy()
        return f"file:{urllib.parse.quote(copy)}?mode=rw"

    def _local_copy(self) -> str:
        """A private copy of the catalog and its WAL (see _read_only_uri), removed at
        exit; SQLite folds the WAL into the copy when it opens it."""
        folder = tempfile.mkdtemp(prefix="snapstate-ro-")
        atexit.register(shutil.rmtree, folder, True)
        target = os.path.join(folder, "catalog.db")
        shutil.copyfile(self.path, target)
        shutil.copyfile(self.path + "-wal", target + "-wal")
        return target

    def _views(self, db: sqlite3.Connection) -> None:
        """Read-only over a schema older than 5: a temp view per signed table, with an
        empty signature column, shadows the table's name on this connection."""
        for table in self._unsigned_views:
            db.execute(
                f"CREATE TEMP VIEW IF NOT EXISTS {table} AS SELECT *, NULL AS mac FROM main.{table}"
            )

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

    def _tx(self, immediate: bool = True) -> _Tx:
        return _Tx(self._db(), immediate, self.path)

    @contextlib.contextmanager
    def _unsynced(self) -> Iterator[None]:
        """Transactions inside commit without waiting for the disk (synchronous=NORMAL):
        in WAL mode one is then durable once a later synchronous commit is (the WAL is
        written in order and synced whole), and survives the process's death at once."""
        if self.synchronous == "NORMAL":
            yield
            return
        db = self._db()
        db.execute("PRAGMA synchronous=NORMAL")
        try:
            yield
        finally:
            db.execute(f"PRAGMA synchronous={self.synchronous}")

    def _after_reseal(self) -> None:
        """The old plaintext is dropped from the file and its WAL."""
        db = self._db()
        db.execute("VACUUM")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def close(self) -> None:
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None


def _read_only_fs(directory: str) -> bool:
    """Whether the file system holding `directory` is mounted read-only."""
    try:
        return bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False


def sqlite_schema_version(directory: str) -> int:
    """The schema version of the catalog in a store directory, read without changing
    it (0: no catalog yet)."""
    path = os.path.join(directory, "catalog.db")
    if not os.path.isfile(path):
        return 0
    db = sqlite3.connect(f"file:{urllib.parse.quote(path)}?mode=ro", uri=True)
    try:
        return int(db.execute("PRAGMA user_version").fetchone()[0])
    except sqlite3.DatabaseError as exc:
        raise StoreDamaged(f"the catalog {path} is damaged ({exc})") from None
    finally:
        db.close()
