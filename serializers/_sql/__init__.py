"""The catalog contract (serializers/_catalog.py) in SQL, shared by the SQLite and the
PostgreSQL backends: one mixin per capability over `SqlBase` (_base.py), which a backend
completes with its connection, schema and transactions. `SqlCatalog` composes them.

    _jobs.py  _leases.py  _snapshots.py  _chunks.py (chunked snapshot bodies)
    _ledger.py (effects)  _events.py (timeline, metrics)  _approvals.py
    _waits.py (waits and the worker's queries)  _admin.py (fork, import, prune, rebuild)
    _rows.py (table rows <-> row dataclasses, sealing what the agent produced)
    _reseal.py (rewriting every sealed value when encryption is switched)
"""

from __future__ import annotations

from .._catalog import Catalog
from ._admin import SqlAdmin
from ._approvals import SqlApprovals
from ._base import JOB_TABLES, Conn, SqlBase
from ._chunks import SqlChunks
from ._events import SqlEvents
from ._jobs import SqlJobs
from ._leases import SqlLeases
from ._ledger import SqlLedger
from ._reseal import SqlReseal
from ._snapshots import SqlSnapshots
from ._waits import SqlWaits, SqlWorker

__all__ = ["SqlCatalog", "SqlBase", "Conn", "JOB_TABLES"]


class SqlCatalog(
    SqlJobs,
    SqlLeases,
    SqlSnapshots,
    SqlChunks,
    SqlLedger,
    SqlEvents,
    SqlApprovals,
    SqlWaits,
    SqlWorker,
    SqlAdmin,
    SqlReseal,
    Catalog,
):
    """Every capability in SQL; a backend class puts its base (a subclass of SqlBase)
    before this one."""
