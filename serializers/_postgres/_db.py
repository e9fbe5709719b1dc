"""The PostgreSQL catalog's connections, schema and transactions (psycopg 3 and its
connection pool), under the SQL every capability shares (serializers/_sql/).

Transactions. A write transaction (`_tx()`) starts by taking one store-wide
transaction-level advisory lock, so writers are serialized from their first statement
exactly as SQLite's BEGIN IMMEDIATE serializes them: every compare-and-swap the shared
SQL makes (the snapshot sequence, the lease epoch, a dispatch's deadline, a decision)
reads and writes with no other writer in between, under READ COMMITTED, and the
conformance suite holds unchanged. Reads take no lock. A write transaction holds the
lock for a few statements (about a millisecond on a local server); the benchmark
(benchmarks/bench_postgres.py) measures what that allows with several workers.

`_unsynced()` (an effect's outcome, LedgerCatalog.record_effects' `ordered`) commits
with `synchronous_commit = off`: ordered before every later commit and durable with
the next durable one, lost only if the server stops before it flushes, which leaves
the effect's row as its dispatch recorded it (reconciled, never sent again).

Changes the worker waits for (an approval decided, a job released or waiting with a
timer) are announced with NOTIFY on the channel `snapstate` in the transaction that
makes them, so they reach listeners only once committed (`wait_for_change`).

A lost or refused connection is a store failure (StoreFailure, the job left
resumable), never an agent error: the pool checks each connection it hands out and
reconnects after a server restart; a transaction cut off mid-way rolled back.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import re
import select
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import psycopg
import psycopg.conninfo
import psycopg.errors
from psycopg_pool import ConnectionPool, PoolTimeout

from ..._errors import SnapstateError, StoreDamaged, StoreError, StoreFailure
from ..._version import __version__
from .._location import is_postgres_url, redact
from .._sealing import MAGIC, PLAIN, Sealer
from .._sql._base import SqlBase

__all__ = [
    "SCHEMA_VERSION",
    "PostgresBase",
    "redact",
    "is_postgres_url",
    "CHANNEL",
]

# The schema's version (table snapstate_schema): bumped when a table changes; older
# schemas are upgraded by `snaprun db upgrade` (or on first use), newer ones refused.
SCHEMA_VERSION = 2
CHANNEL = "snapstate"
_LOCK = 0x736E6170  # "snap": the store-wide writers' lock (pg_advisory_xact_lock)
_MIGRATION_LOCK = 0x736E6171

# Migrations: version N's statements create what version N adds. The rows that decide
# what code runs or what the agent receives (jobs, effects, waits, approvals) carry
# their signature (`mac`, Sealer.row_mac) from the first version: every row of a
# PostgreSQL store is signed from birth. Types: every
# integer is BIGINT (sizes, pids, process start times), every REAL a double, every
# BLOB bytea. A manifest goes with its snapshot row (ON DELETE CASCADE, SQLite's
# trigger); approvals keep their insertion order in `n` (SQLite's rowid).
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """CREATE TABLE jobs (
    job_id TEXT PRIMARY KEY, entry TEXT NOT NULL, argv TEXT NOT NULL, status TEXT NOT NULL,
    created DOUBLE PRECISION NOT NULL, updated DOUBLE PRECISION NOT NULL,
    resume_count BIGINT NOT NULL DEFAULT 0, parent TEXT, fork_seq BIGINT, error TEXT,
    epoch BIGINT NOT NULL DEFAULT 0, mac TEXT)""",
        """CREATE TABLE snapshots (
    job_id TEXT NOT NULL, seq BIGINT NOT NULL, label TEXT, file TEXT NOT NULL,
    size BIGINT NOT NULL, created DOUBLE PRECISION NOT NULL, epoch BIGINT NOT NULL,
    digest TEXT, origin TEXT, PRIMARY KEY (job_id, seq))""",
        """CREATE TABLE leases (
    job_id TEXT PRIMARY KEY, host TEXT NOT NULL, pid BIGINT NOT NULL, started BIGINT NOT NULL,
    epoch BIGINT NOT NULL, expires DOUBLE PRECISION NOT NULL,
    heartbeat DOUBLE PRECISION NOT NULL)""",
        """CREATE TABLE events (
    id BIGSERIAL PRIMARY KEY, job_id TEXT NOT NULL, at DOUBLE PRECISION NOT NULL,
    kind TEXT NOT NULL, detail TEXT NOT NULL)""",
        "CREATE INDEX events_by_job ON events (job_id, id)",
        """CREATE TABLE effects (
    job_id TEXT NOT NULL, ordinal BIGINT NOT NULL, key TEXT NOT NULL, name TEXT NOT NULL,
    call_site TEXT NOT NULL, args_digest TEXT NOT NULL, args_repr TEXT NOT NULL,
    kind TEXT NOT NULL, state TEXT NOT NULL, result BYTEA, external_id TEXT,
    attempts BIGINT NOT NULL, created DOUBLE PRECISION NOT NULL,
    updated DOUBLE PRECISION NOT NULL, note TEXT NOT NULL, mac TEXT,
    PRIMARY KEY (job_id, ordinal))""",
        "CREATE INDEX effects_by_key ON effects (job_id, key)",
        """CREATE TABLE metrics (
    job_id TEXT NOT NULL, name TEXT NOT NULL, value DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (job_id, name))""",
        """CREATE TABLE waits (
    job_id TEXT PRIMARY KEY, kind TEXT NOT NULL, reason TEXT NOT NULL, due DOUBLE PRECISION,
    since DOUBLE PRECISION NOT NULL, seq BIGINT NOT NULL, approval_id TEXT, mac TEXT)""",
        """CREATE TABLE approvals (
    job_id TEXT NOT NULL, approval_id TEXT NOT NULL, name TEXT NOT NULL, scope TEXT NOT NULL,
    digest TEXT NOT NULL, requested DOUBLE PRECISION NOT NULL, expires DOUBLE PRECISION,
    approvers TEXT, state TEXT NOT NULL, decided_by TEXT, decided_at DOUBLE PRECISION,
    note TEXT, site TEXT NOT NULL, mac TEXT, n BIGSERIAL, PRIMARY KEY (job_id, approval_id))""",
        """CREATE TABLE manifests (
    job_id TEXT NOT NULL, seq BIGINT NOT NULL, data BYTEA NOT NULL, PRIMARY KEY (job_id, seq),
    FOREIGN KEY (job_id, seq) REFERENCES snapshots (job_id, seq) ON DELETE CASCADE)""",
        """CREATE TABLE chunks (
    id BYTEA PRIMARY KEY, size BIGINT NOT NULL, data BYTEA, pack TEXT,
    "offset" BIGINT NOT NULL DEFAULT 0, length BIGINT NOT NULL DEFAULT 0, base BYTEA)""",
        """CREATE TABLE claims (
    job_id TEXT PRIMARY KEY, host TEXT NOT NULL, pid BIGINT NOT NULL, started BIGINT NOT NULL,
    expires DOUBLE PRECISION NOT NULL)""",
        # The store's identity and settings (what a store directory keeps in store.json
        # and config.json): never its keys.
        "CREATE TABLE store_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    ),
    # The workers' heartbeats (`snaprun worker --status`; SQLite's schema 6).
    2: (
        """CREATE TABLE workers (
    host TEXT NOT NULL, pid BIGINT NOT NULL, started BIGINT NOT NULL, info TEXT NOT NULL,
    beat DOUBLE PRECISION NOT NULL, expires DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (host, pid, started))""",
    ),
}
_TABLES = frozenset({"jobs", "snapshots", "leases", "events", "effects", "metrics"})
# The pool reports each failed reconnection as a logging warning; without a handler of
# the program's, Python would print it raw on stderr. Snapstate says it in its own words
# (a StoreFailure; the worker's "cannot read the store ... retrying").
logging.getLogger("psycopg.pool").addHandler(logging.NullHandler())


def _ended(conn: psycopg.Connection[Any]) -> bool:
    """Whether the server ended an idle connection's session, seen without a round
    trip: its socket has nothing to read unless the server wrote to it unasked (a
    restart, an administrator's command) or closed it. A session ended in a way this
    cannot see fails its statement, as a store failure."""
    if conn.closed or conn.broken:
        return True
    readable, _, _ = select.select([conn.fileno()], [], [], 0)
    return bool(readable)


def _url_timeout(url: str, default: float = 10.0) -> float:
    """The URL's connect_timeout (seconds): also how long a statement waits for a
    connection while the server is unreachable, before the store is reported failed."""
    try:
        value = float(psycopg.conninfo.conninfo_to_dict(url).get("connect_timeout") or default)
    except (psycopg.ProgrammingError, TypeError, ValueError):
        return default
    return value if 1 <= value <= 3600 else default


class TextSealer(Sealer):
    """The catalog's Sealer with PostgreSQL's strict types: a text value sealed into
    bytes (an encrypted store) is kept in its TEXT column as an escape, a marker and its
    base64, and opened back; bytes values (effect results, a BYTEA column) are as they
    are. In a plaintext store every value passes through unchanged."""

    PREFIX = "\x1b" + MAGIC.decode() + ":"

    def __init__(self, inner: Sealer):
        super().__init__(inner.keys, inner.enabled, tolerant=inner.tolerant, signed=inner.signed)
        self._derived = inner._derived  # the key derivations, shared

    def seal(self, value: Any, *place: object) -> Any:
        sealed = super().seal(value, *place)
        if isinstance(value, str) and isinstance(sealed, bytes):
            return self.PREFIX + base64.b64encode(sealed).decode()
        return sealed

    def open(self, stored: Any, *place: object) -> Any:
        if self.enabled and isinstance(stored, str) and stored.startswith(self.PREFIX):
            try:
                stored = base64.b64decode(stored[len(self.PREFIX) :], validate=True)
            except ValueError:
                pass  # not ours: the Sealer refuses it as unsealed
        return super().open(stored, *place)


_PLACEHOLDER = re.compile(r"\?")


def _translate(sql: str, cache: dict[str, str] = {}) -> str:  # noqa: B006 (a cache)
    """The shared SQL's `?` placeholders as psycopg's `%s` (a literal % doubled)."""
    out = cache.get(sql)
    if out is None:
        out = cache[sql] = _PLACEHOLDER.sub("%s", sql.replace("%", "%%"))
    return out


class _Result:
    """A statement's rows, fetched whole (the connection goes back to the pool)."""

    def __init__(self, rows: list[Any], rowcount: int):
        self._rows, self.rowcount = rows, rowcount

    def fetchone(self) -> Any:
        return self._rows[0] if self._rows else None

    def fetchall(self) -> list[Any]:
        return self._rows

    def __iter__(self) -> Iterator[Any]:
        return iter(self._rows)


class _Conn:
    """A psycopg connection in the shape the shared SQL uses (sqlite3's)."""

    def __init__(self, conn: psycopg.Connection[Any]):
        self.conn = conn

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> _Result:
        cur = self.conn.execute(_translate(sql), tuple(parameters) or None)
        rows = cur.fetchall() if cur.description is not None else []
        return _Result(rows, cur.rowcount)

    def executemany(self, sql: str, seq_of_parameters: Iterable[Sequence[Any]], /) -> _Result:
        params = [tuple(p) for p in seq_of_parameters]
        if not params:
            return _Result([], 0)
        with self.conn.cursor() as cur:
            cur.executemany(_translate(sql), params)
            return _Result([], cur.rowcount)


class _Reads:
    """`_db()`: each statement on a pooled connection of its own (autocommit)."""

    def __init__(self, base: PostgresBase):
        self.base = base

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> _Result:
        with self.base._connection() as conn:
            return _Conn(conn).execute(sql, parameters)

    def executemany(self, sql: str, seq_of_parameters: Iterable[Sequence[Any]], /) -> _Result:
        with self.base._tx() as db:
            return db.executemany(sql, seq_of_parameters)


class PostgresBase(SqlBase):
    """A PostgreSQL database as a store's catalog (see the module doc). `url`: a
    postgresql:// connection URL. `create=False`: the database must hold a snapstate
    schema already. `writable=False`: nothing is created or upgraded. `upgrade`: a schema
    older than this release's is upgraded on opening (else refused, naming `snaprun db
    upgrade`); an empty database is always set up when `create`."""

    integrity_error = psycopg.errors.IntegrityError
    insertion_order = "n"

    def __init__(
        self,
        url: str,
        *,
        clock: Callable[[], float] = time.time,
        sealer: Sealer = PLAIN,
        create: bool = True,
        writable: bool = True,
        upgrade: bool = True,
        pool_size: int = 4,
        connect_timeout: float | None = None,
    ):
        if not is_postgres_url(url):
            raise StoreError(f"{redact(url)} is not a postgresql:// URL")
        self.url = url
        self.path = self.directory = redact(url)
        if connect_timeout is None:  # the URL's own connect_timeout, else 10 s
            connect_timeout = _url_timeout(url)
        self.clock = clock
        self.sealer = sealer
        self._writable = writable
        self._synced = threading.local()
        self._listen: psycopg.Connection[Any] | None = None
        self._timeout = float(connect_timeout)
        self._pool = ConnectionPool(
            url,
            min_size=1,
            max_size=max(1, pool_size),
            kwargs={"autocommit": True, "connect_timeout": max(1, int(connect_timeout))},
            timeout=connect_timeout,
            reconnect_timeout=max(connect_timeout, 60.0),
            open=False,
            name="snapstate",
        )
        try:
            self._pool.open(wait=True, timeout=connect_timeout)
        except PoolTimeout:
            self._pool.close(timeout=0)
            raise StoreFailure(
                f"the store failed: cannot connect to PostgreSQL at {self.path} within "
                f"{connect_timeout:g}s; check that the server runs and the URL (user, host, "
                "port, database) is right, then run the command again"
            ) from None
        try:
            self.schema_version = self._set_up(create, writable, upgrade)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ sealing
    @property
    def sealer(self) -> Sealer:
        return self._sealer

    @sealer.setter
    def sealer(self, value: Sealer) -> None:
        self._sealer = self._column_sealer(value)

    def _column_sealer(self, sealer: Sealer) -> Sealer:
        return sealer if isinstance(sealer, TextSealer) else TextSealer(sealer)

    # ------------------------------------------------------------------ schema
    def _set_up(self, create: bool, writable: bool, upgrade: bool) -> int:
        self.found_version = version = self._version()
        if version == SCHEMA_VERSION:
            return version
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"the PostgreSQL store {self.path} has schema version {version}; this "
                f"snapstate knows up to {SCHEMA_VERSION}. Use a snapstate release that knows "
                "it (or a new database)."
            )
        if version == 0 and not create:
            raise StoreError(
                f"no snapstate store in the PostgreSQL database {self.path}: it holds no "
                "snapstate tables. Stores are created by `snaprun run`, `snaprun init` or "
                "`snaprun db upgrade`."
            )
        if not writable:
            raise StoreError(
                f"the PostgreSQL store {self.path} has schema version {version}, older than "
                f"this snapstate's {SCHEMA_VERSION}: run `snaprun --store URL db upgrade` first"
            )
        if version and not upgrade:
            raise StoreError(
                f"the PostgreSQL store {self.path} has schema version {version}; this "
                f"snapstate uses {SCHEMA_VERSION}: run `snaprun --store URL db upgrade`"
            )
        return self.migrate()

    def _version(self) -> int:
        with self._connection() as conn:
            found = conn.execute("SELECT to_regclass('snapstate_schema')").fetchone()
            if found is None or found[0] is None:
                tables = {
                    r[0]
                    for r in conn.execute(
                        "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
                    ).fetchall()
                }
                if tables & _TABLES:
                    raise StoreDamaged(
                        f"the PostgreSQL database {self.path} holds tables named like "
                        f"snapstate's ({', '.join(sorted(tables & _TABLES))}) but no snapstate "
                        "schema version: it is another application's, or a damaged store; "
                        "use another database"
                    )
                return 0
            row = conn.execute("SELECT max(version) FROM snapstate_schema").fetchone()
            return int(row[0] or 0) if row else 0

    def version(self) -> int:
        """The database's schema version (0: no snapstate tables)."""
        return self._version()

    def migrate(self) -> int:
        """Apply every migration newer than the database's schema, each in its own
        transaction, under a lock (several processes may open a new store at once).
        Returns the schema version now; a newer one than this snapstate's is refused."""
        with self._connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            conn.execute(
                "CREATE TABLE IF NOT EXISTS snapstate_schema (version BIGINT PRIMARY KEY, "
                "applied DOUBLE PRECISION NOT NULL, release TEXT NOT NULL)"
            )
            row = conn.execute("SELECT max(version) FROM snapstate_schema").fetchone()
            version = int(row[0] or 0) if row else 0
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"the PostgreSQL store {self.path} has schema version {version}; this "
                    f"snapstate knows up to {SCHEMA_VERSION}"
                )
            for step in range(version + 1, SCHEMA_VERSION + 1):
                for statement in _MIGRATIONS[step]:
                    conn.execute(statement)  # our own constants
                conn.execute(
                    "INSERT INTO snapstate_schema (version, applied, release) VALUES (%s, %s, %s)",
                    (step, time.time(), __version__),
                )
        return SCHEMA_VERSION

    # ------------------------------------------------------------------ connections
    @contextlib.contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        try:
            conn = self._live_connection()
            try:
                yield conn
            finally:
                self._pool.putconn(conn)
        except (psycopg.OperationalError, PoolTimeout) as exc:
            raise self._failure(exc) from exc
        except psycopg.errors.IntegrityError:
            raise  # the shared SQL's (a taken id): it says what
        except psycopg.DatabaseError as exc:  # a dropped table, a changed column...
            raise StoreDamaged(
                f"the PostgreSQL store {self.path} refused a statement ({exc}): its tables are "
                "not the ones this snapstate made (damaged, or changed by hand); nothing was "
                "changed. Restore the database from a backup"
            ) from None

    def _live_connection(self) -> psycopg.Connection[Any]:
        """A pooled connection whose session the server has not ended. One it ended (a
        restart) is closed and given back, which the pool replaces: after a restart the
        dead ones are drained at once, without a round trip each."""
        deadline = time.monotonic() + self._timeout
        while True:
            conn = self._pool.getconn(timeout=max(0.001, deadline - time.monotonic()))
            if not _ended(conn):
                return conn
            conn.close()
            self._pool.putconn(conn)

    def _failure(self, exc: BaseException) -> SnapstateError:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return StoreFailure(
            f"the store failed: PostgreSQL at {self.path}: {reason}; the job is left "
            "resumable: once the server is reachable, `snaprun resume JOB` (a worker retries "
            "by itself)"
        )

    def _db(self) -> _Reads:
        return _Reads(self)

    @contextlib.contextmanager
    def _tx(self, immediate: bool = True) -> Iterator[_Conn]:
        # BEGIN, the writers' lock and the commit setting in one round trip.
        begin = "BEGIN"
        if immediate:
            begin += f"; SELECT pg_advisory_xact_lock({_LOCK})"
        if getattr(self._synced, "off", False):
            begin += "; SET LOCAL synchronous_commit = off"
        with self._connection() as conn:
            try:
                conn.execute(begin)  # our own constants
                try:
                    yield _Conn(conn)
                except BaseException:
                    if not conn.broken:
                        with contextlib.suppress(psycopg.Error):
                            conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
            except psycopg.errors.DataError as exc:
                raise StoreError(
                    f"PostgreSQL at {self.path} refused a value: {exc}".strip()
                ) from None

    @contextlib.contextmanager
    def _claim_tx(self, job_id: str) -> Iterator[_Conn | None]:
        """A claim needs no store-wide lock: claims are advisory (the job's lease keeps
        runners exclusive) and touch only the claims table. It locks the job's row, and
        a worker finding it locked by another's claim skips the job at once."""
        with self._connection() as conn, conn.transaction():
            held = conn.execute(
                "SELECT 1 FROM jobs WHERE job_id = %s FOR UPDATE SKIP LOCKED", (job_id,)
            ).fetchone()
            yield _Conn(conn) if held is not None else None

    @contextlib.contextmanager
    def _read_tx(self) -> Iterator[_Conn]:
        with self._tx(immediate=False) as db:
            db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield db

    @contextlib.contextmanager
    def _unsynced(self) -> Iterator[None]:
        self._synced.off = True
        try:
            yield
        finally:
            self._synced.off = False

    def _notify(self, db: Any, job_id: str) -> None:
        """Announce a change to the job's runnability (on commit)."""
        db.execute("SELECT pg_notify(?, ?)", (CHANNEL, job_id))

    def wait_for_change(self, timeout: float) -> bool:
        """Block until a NOTIFY on the channel (True) or `timeout` seconds (False): the
        worker's wake-up. A connection failure waits the timeout out (polling)."""
        deadline = time.monotonic() + max(0.0, timeout)
        try:
            conn = self._listener()
            for _ in conn.notifies(timeout=max(0.0, deadline - time.monotonic()), stop_after=1):
                return True
            return False
        except psycopg.Error:
            self._drop_listener()
            time.sleep(max(0.0, deadline - time.monotonic()))
            return False

    def _listener(self) -> psycopg.Connection[Any]:
        conn = self._listen
        if conn is None or conn.closed:
            conn = psycopg.connect(
                self.url, autocommit=True, connect_timeout=max(1, int(self._timeout))
            )
            conn.execute(f"LISTEN {CHANNEL}")
            self._listen = conn
        return conn

    def _drop_listener(self) -> None:
        conn, self._listen = self._listen, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error):
                conn.close()

    # ------------------------------------------------------------------ the store's facts
    def meta(self) -> dict[str, str]:
        """The store's identity and settings (table store_meta)."""
        return {r[0]: r[1] for r in self._db().execute("SELECT name, value FROM store_meta")}

    def set_meta(self, name: str, value: str, *, only_new: bool = False) -> str:
        """Record one fact; with `only_new`, keep one already recorded. Returns the
        value recorded."""
        with self._tx() as db:
            if only_new:
                db.execute(
                    "INSERT INTO store_meta (name, value) VALUES (?, ?) ON CONFLICT DO NOTHING",
                    (name, value),
                )
            else:
                db.execute(
                    "INSERT INTO store_meta (name, value) VALUES (?, ?) "
                    "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                    (name, value),
                )
            row = db.execute("SELECT value FROM store_meta WHERE name = ?", (name,)).fetchone()
            return str(row[0])

    def close_thread(self) -> None:
        """Nothing: connections go back to the pool after each statement."""

    def close(self) -> None:
        self._drop_listener()
        with contextlib.suppress(Exception):
            self._pool.close(timeout=5)
