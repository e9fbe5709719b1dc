"""The SQLite catalog's snapshot rows (SnapshotCatalog): compare-and-swap commits
under the lease's fence."""

from __future__ import annotations

from ..._errors import StaleWriter, StoreError
from .._catalog import SnapshotCatalog
from .._store import SnapshotBody, SnapshotRow
from ._base import SqlBase
from ._chunks import add_body
from ._rows import INSERT_SNAPSHOT, snapshot_row, snapshot_values

__all__ = ["SqlSnapshots"]


class SqlSnapshots(SqlBase, SnapshotCatalog):
    def commit_snapshot(self, row: SnapshotRow, body: SnapshotBody | None = None) -> None:
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
            db.execute(INSERT_SNAPSHOT, snapshot_values(self.sealer, row))
            if body is not None:
                add_body(db, row.job_id, row.seq, body)
            db.execute("UPDATE jobs SET updated = ? WHERE job_id = ?", (row.created, row.job_id))
            self._event(
                db, row.job_id, "snapshot", f"{row.seq}" + (f" ({row.label})" if row.label else "")
            )

    def snapshots(self, job_id: str) -> list[SnapshotRow]:
        rows = self._db().execute(
            f"{self._select_snapshots} WHERE job_id = ? ORDER BY seq", (job_id,)
        )
        return [snapshot_row(self.sealer, r) for r in rows]

    def delete_snapshot(self, job_id: str, seq: int) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM snapshots WHERE job_id = ? AND seq = ?", (job_id, seq))

    def add_snapshot_unfenced(self, row: SnapshotRow, body: SnapshotBody | None = None) -> None:
        """Record a snapshot copied in by fork or import (no runner, no lease)."""
        with self._tx() as db:
            try:
                db.execute(INSERT_SNAPSHOT, snapshot_values(self.sealer, row))
            except self.integrity_error:
                raise StoreError(f"job {row.job_id} already has snapshot {row.seq}") from None
            if body is not None:
                add_body(db, row.job_id, row.seq, body)
