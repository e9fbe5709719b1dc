"""A store's catalog in PostgreSQL (`pip install 'snapstate[postgres]'`): the same SQL
as the embedded SQLite catalog (serializers/_sql/), over psycopg 3 and its connection
pool, with the schema, migrations and transactions of _db.py. Selected by a
postgresql:// store URL (serializers/_location.py)."""

from __future__ import annotations

from .._sql import SqlCatalog
from ._db import CHANNEL, SCHEMA_VERSION, PostgresBase, is_postgres_url, redact

__all__ = ["PostgresCatalog", "SCHEMA_VERSION", "CHANNEL", "is_postgres_url", "redact"]


class PostgresCatalog(PostgresBase, SqlCatalog):
    """The catalog in the PostgreSQL database at `url` (see PostgresBase)."""
