"""The embedded catalog: SQLite in WAL mode with synchronous=FULL, one file in the
store directory. Writes run in BEGIN IMMEDIATE transactions, so compare-and-swap
checks and their writes are atomic across processes.

One module per capability of the catalog contract (serializers/_catalog.py), each a
mixin over the one connection and transaction helper in _db.py: _jobs.py, _leases.py,
_snapshots.py, _chunks.py (chunked snapshot bodies), _ledger.py (effects), _events.py (timeline and metrics), _approvals.py,
_waits.py (waits and the worker's queries), _admin.py (fork, import, prune, rebuild);
_rows.py converts between table rows and row dataclasses (sealing what the agent
produced); _reseal.py rewrites the sealed columns (a SQLite catalog's own operation)."""

from __future__ import annotations

from .._catalog import Catalog
from ._admin import SqliteAdmin
from ._approvals import SqliteApprovals
from ._chunks import SqliteChunks
from ._db import SCHEMA_VERSION, store_failure
from ._events import SqliteEvents
from ._jobs import SqliteJobs
from ._leases import SqliteLeases
from ._ledger import SqliteLedger
from ._reseal import SqliteReseal
from ._snapshots import SqliteSnapshots
from ._waits import SqliteWaits, SqliteWorker

__all__ = ["SqliteCatalog", "SCHEMA_VERSION", "store_failure"]


class SqliteCatalog(
    SqliteJobs,
    SqliteLeases,
    SqliteSnapshots,
    SqliteChunks,
    SqliteLedger,
    SqliteEvents,
    SqliteApprovals,
    SqliteWaits,
    SqliteWorker,
    SqliteAdmin,
    SqliteReseal,
    Catalog,
):
    """The catalog in `directory`/catalog.db. `sealer` seals what the agent produced
    (argv, errors, labels, event details, effect arguments, results, notes, external
    ids) on write and opens it on read, so callers see plain rows
    (serializers/_sealing.py; a pass-through in a plaintext store). `create=False`: the
    catalog must already exist with its schema (an existing store's catalog is never
    re-created: StoreDamaged instead). `writable=False`: open for reading only (no
    schema upgrade). `clock` is the catalog's time (tests inject one)."""
