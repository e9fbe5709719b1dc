"""Rewriting every sealed column of a catalog (`snaprun init --encrypt` over a store
that has rows): not part of the catalog contract; shared by the SQL backends, each
sealing as its columns need (SqlBase._column_sealer)."""

from __future__ import annotations

import json

from .._sealing import Sealer
from ._base import SqlBase
from ._rows import (
    APPROVAL_COLUMNS,
    EFFECT_COLUMNS,
    JOB_COLUMNS,
    WAIT_COLUMNS,
    approval_row,
    approval_values,
    effect_row,
    effect_values,
    job_row,
    sealed_label,
    snapshot_row,
    upsert,
    wait_row,
    wait_values,
)

__all__ = ["SqlReseal"]


class SqlReseal(SqlBase):
    def reseal(self, sealer: Sealer) -> None:
        """Rewrite every sealed column with `sealer` in one transaction (encryption
        turned on or off for a store that has rows; values already in the new form are
        taken as they are), then compact the catalog and empty its WAL, so no earlier
        form of a value stays in the files."""
        reader = self._column_sealer(
            Sealer(
                sealer.keys if sealer.enabled else self.sealer.keys,
                sealer.enabled or self.sealer.enabled,
                tolerant=True,
            )
        )
        sealer = self._column_sealer(sealer)
        old = self.sealer
        try:
            with self._tx() as db:
                jobs = [
                    job_row(reader, r, path=self.path)
                    for r in db.execute(f"SELECT {JOB_COLUMNS} FROM jobs").fetchall()
                ]
                snaps = [
                    snapshot_row(reader, r) for r in db.execute(self._select_snapshots).fetchall()
                ]
                effects = [
                    effect_row(reader, self.path, r)
                    for r in db.execute(f"SELECT {EFFECT_COLUMNS} FROM effects").fetchall()
                ]
                events = [
                    (
                        i,
                        job_id,
                        at,
                        kind,
                        reader.open(detail, "events", "detail", job_id, kind, repr(at)),
                    )
                    for i, job_id, at, kind, detail in db.execute(
                        "SELECT id, job_id, at, kind, detail FROM events"
                    ).fetchall()
                ]
                waits = [
                    wait_row(reader, r, path=self.path)
                    for r in db.execute(f"SELECT {WAIT_COLUMNS} FROM waits").fetchall()
                ]
                approvals = [
                    approval_row(reader, r, path=self.path)
                    for r in db.execute(f"SELECT {APPROVAL_COLUMNS} FROM approvals").fetchall()
                ]
                self.sealer = sealer
                db.executemany(
                    upsert("waits", WAIT_COLUMNS, "job_id"),
                    [wait_values(sealer, w) for w in waits],
                )
                db.executemany(
                    upsert("approvals", APPROVAL_COLUMNS, "job_id, approval_id"),
                    [approval_values(sealer, a) for a in approvals],
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
                        (sealed_label(sealer, snap), snap.job_id, snap.seq),
                    )
                for i, job_id, at, kind, detail in events:
                    db.execute(
                        "UPDATE events SET detail = ? WHERE id = ?",
                        (sealer.seal(detail, "events", "detail", job_id, kind, repr(at)), i),
                    )
                db.executemany(
                    upsert("effects", EFFECT_COLUMNS, "job_id, ordinal"),
                    [effect_values(sealer, r) for r in effects],
                )
        except BaseException:
            self.sealer = old
            raise
        self._after_reseal()
