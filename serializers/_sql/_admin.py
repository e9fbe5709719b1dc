"""The SQLite catalog's operations on whole jobs (AdminCatalog): fork, import, prune,
rebuild. Each is one transaction with its checks inside it."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from ..._errors import JobExists, JobNotFound, LeaseHeld, SnapshotNotFound, StoreError
from .._catalog import AdminCatalog
from .._store import JobRow, SnapshotBody, SnapshotRow
from ._base import JOB_TABLES, SqlBase
from ._chunks import add_body
from ._jobs import insert_job, read_job
from ._rows import (
    EFFECT_COLUMNS,
    EFFECT_PLACES,
    INSERT_SNAPSHOT,
    effect_row,
    effect_values,
    snapshot_row,
    snapshot_values,
)

__all__ = ["SqlAdmin"]


class SqlAdmin(SqlBase, AdminCatalog):
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
                snapshot_row(self.sealer, r)
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
            insert_job(
                db,
                self.sealer,
                self.directory,
                job_id,
                json.loads(source[0]),
                argv,
                parent,
                fork_seq,
                now,
            )
            db.executemany(
                INSERT_SNAPSHOT, [snapshot_values(self.sealer, copies[r.seq]) for r in rows]
            )
            # A chunked snapshot's copy is its manifest (the same bytes, the same digest)
            # over the same chunks.
            db.execute(
                "INSERT INTO manifests (job_id, seq, data) SELECT ?, seq, data FROM manifests "
                "WHERE job_id = ? AND seq <= ?",
                (job_id, parent, fork_seq),
            )
            # Effects before the fork point are the new job's history; those after it
            # are the original's future: the fork makes its own, with its own keys.
            # Re-sealed for the new job (a sealed value is bound to its row).
            inherited = [
                effect_row(self.sealer, self.path, r)
                for r in db.execute(
                    f"SELECT {EFFECT_COLUMNS} FROM effects WHERE job_id = ? AND ordinal <= ? "
                    "ORDER BY ordinal",
                    (parent, inherited_effects),
                )
            ]
            db.executemany(
                f"INSERT INTO effects ({EFFECT_COLUMNS}) VALUES {EFFECT_PLACES}",
                [
                    effect_values(self.sealer, dataclasses.replace(e, job_id=job_id))
                    for e in inherited
                ],
            )
            self._event(db, job_id, "created", f"forked from {parent}@{fork_seq}")
            self._event(db, parent, "forked", f"snapshot {fork_seq} as job {job_id}")
        return read_job(self._db(), self.sealer, self.directory, job_id)

    def import_job(
        self,
        job_id: str,
        entry: dict[str, Any],
        argv: list[str],
        row: SnapshotRow,
        *,
        parent: str | None,
        source: str,
        body: SnapshotBody | None = None,
    ) -> JobRow:
        now = self.clock()
        with self._tx() as db:
            insert_job(db, self.sealer, self.directory, job_id, entry, argv, parent, row.seq, now)
            db.execute(INSERT_SNAPSHOT, snapshot_values(self.sealer, row))
            if body is not None:
                add_body(db, job_id, row.seq, body)
            self._event(db, job_id, "created", f"imported snapshot {row.seq} of {parent}")
            self._event(db, job_id, "imported", f"from {source}")
        return read_job(self._db(), self.sealer, self.directory, job_id)

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
                snapshot_row(self.sealer, r)
                for r in db.execute(
                    f"{self._select_snapshots} WHERE job_id = ? ORDER BY seq", (job_id,)
                )
            ]
            if finished and job[0] in ("done", "failed"):
                for table in (*JOB_TABLES, "jobs"):
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
            db.executemany(INSERT_SNAPSHOT, [snapshot_values(self.sealer, r) for r in rows])
            db.executemany(
                "INSERT INTO metrics (job_id, name, value) VALUES (?, ?, ?)",
                [(job.job_id, k, v) for k, v in (metrics or {}).items()],
            )
            self._event(db, job.job_id, "rebuilt", job.error or "")
