"""The embedded catalog: SQLite in WAL mode with synchronous=FULL, one file in the
store directory (catalog.db). Writes run in BEGIN IMMEDIATE transactions, so
compare-and-swap checks and their writes are atomic across processes. _db.py holds the
connection, the schema and its upgrades; the SQL of each capability is shared with the
PostgreSQL backend (serializers/_sql/)."""

from __future__ import annotations

from .._sql import SqlCatalog
from ._db import SCHEMA_VERSION, SqliteBase, sqlite_schema_version, store_failure

__all__ = ["SqliteCatalog", "SCHEMA_VERSION", "store_failure", "sqlite_schema_version"]


class SqliteCatalog(SqliteBase, SqlCatalog):
    """The catalog in `directory`/catalog.db. `sealer` seals what the agent produced
    (argv, errors, labels, event details, effect arguments, results, notes, external
    ids) on write and opens it on read, so callers see plain rows
    (serializers/_sealing.py; a pass-through in a plaintext store). `create=False`: the
    catalog must already exist with its schema (an existing store's catalog is never
    re-created: StoreDamaged instead). `writable=False`: open for reading only (no
    schema upgrade). `clock` is the catalog's time (tests inject one)."""
