"""The SQL catalog's operations on whole jobs (AdminCatalog): fork, import, prune,
rebuild, and a whole job's rows read and written for `snaprun migrate-store`. Each is
one transaction with its checks inside it."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from ..._errors import JobExists, JobNotFound, LeaseHeld, SnapshotNotFound, StoreError
from .._catalog import AdminCatalog
from .._store import EventRow, JobCopy, JobRow, SnapshotBody, SnapshotRow
from ._base import JOB_TABLES, SqlBase
from ._chunks import add_body
from ._jobs import insert_job, read_job
from ._rows import (
    APPROVAL_COLUMNS,
    APPROVAL_PLACES,
    EFFECT_COLUMNS,
    EFFECT_PLACES,
    INSERT_SNAPSHOT,
    LEASE_COLUMNS,
    WAIT_COLUMNS,
    approval_row,
    approval_values,
    effect_row,
    effect_values,
    job_mac,
    lease_row,
    snapshot_row,
    snapshot_values,
    wait_row,
    wait_values,
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
            # the parent's row, its signature checked (JobNotFound, StoreDamaged)
            source = read_job(db, self.sealer, self.directory, parent, self.path)
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
            insert_job(
                db,
                self.sealer,
                self.directory,
                job_id,
                source.entry,
                source.argv,
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
        entry_text, argv_text = json.dumps(job.entry), json.dumps(job.argv)
        with self._tx() as db:
            if db.execute("SELECT 1 FROM jobs WHERE job_id = ?", (job.job_id,)).fetchone():
                raise JobExists(f"a job named {job.job_id!r} already exists in {self.directory}")
            db.execute(
                "INSERT INTO jobs (job_id, entry, argv, status, created, updated, "
                "resume_count, parent, fork_seq, error, epoch, mac) VALUES "
                "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    job.job_id,
                    entry_text,
                    self.sealer.seal(argv_text, "jobs", "argv", job.job_id),
                    job.status,
                    job.created,
                    job.updated,
                    job.resume_count,
                    job.parent,
                    job.fork_seq,
                    self.sealer.seal(job.error, "jobs", "error", job.job_id),
                    epoch,
                    job_mac(
                        self.sealer, job.job_id, entry_text, argv_text, job.parent, job.fork_seq
                    ),
                ),
            )
            db.executemany(INSERT_SNAPSHOT, [snapshot_values(self.sealer, r) for r in rows])
            db.executemany(
                "INSERT INTO metrics (job_id, name, value) VALUES (?, ?, ?)",
                [(job.job_id, k, v) for k, v in (metrics or {}).items()],
            )
            self._event(db, job.job_id, "rebuilt", job.error or "")

    # ------------------------------------------------------------ migrate-store
    def read_job_copy(self, job_id: str) -> JobCopy:
        sealer, path = self.sealer, self.path
        with self._read_tx() as db:
            job = read_job(db, sealer, self.directory, job_id, path)
            epoch = int(
                db.execute("SELECT epoch FROM jobs WHERE job_id = ?", (job_id,)).fetchone()[0]
            )
            snapshots = tuple(
                snapshot_row(sealer, r)
                for r in db.execute(
                    f"{self._select_snapshots} WHERE job_id = ? ORDER BY seq", (job_id,)
                ).fetchall()
            )
            effects = tuple(
                effect_row(sealer, path, r)
                for r in db.execute(
                    f"SELECT {EFFECT_COLUMNS} FROM effects WHERE job_id = ? ORDER BY ordinal",
                    (job_id,),
                ).fetchall()
            )
            approvals: tuple[Any, ...] = ()
            wait = None
            if not self._no_waits:
                approvals = tuple(
                    approval_row(sealer, r, path=path)
                    for r in db.execute(
                        f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE job_id = ? "
                        f"ORDER BY requested, {self.insertion_order}",
                        (job_id,),
                    ).fetchall()
                )
                found = db.execute(
                    f"SELECT {WAIT_COLUMNS} FROM waits WHERE job_id = ?", (job_id,)
                ).fetchone()
                wait = wait_row(sealer, found, path=path) if found else None
            events = tuple(
                EventRow(
                    r[0], r[1], r[2], sealer.open(r[3], "events", "detail", r[0], r[2], repr(r[1]))
                )
                for r in db.execute(
                    "SELECT job_id, at, kind, detail FROM events WHERE job_id = ? ORDER BY id",
                    (job_id,),
                ).fetchall()
            )
            metrics = {
                str(r[0]): float(r[1])
                for r in db.execute(
                    "SELECT name, value FROM metrics WHERE job_id = ? ORDER BY name", (job_id,)
                ).fetchall()
            }
            held = db.execute(
                f"SELECT {LEASE_COLUMNS} FROM leases WHERE job_id = ?", (job_id,)
            ).fetchone()
        return JobCopy(
            job,
            epoch,
            snapshots,
            effects,
            approvals,
            wait,
            events,
            metrics,
            lease_row(held) if held else None,
        )

    def insert_job_copy(
        self, copy: JobCopy, bodies: Mapping[int, SnapshotBody], note: str
    ) -> JobRow:
        job, sealer = copy.job, self.sealer
        job_id = job.job_id
        rows = (copy.effects, copy.approvals, copy.events, copy.snapshots)
        if any(r.job_id != job_id for group in rows for r in group) or (
            copy.wait is not None and copy.wait.job_id != job_id
        ):
            raise StoreError(f"the rows given for job {job_id} belong to other jobs too")
        entry_text, argv_text = json.dumps(job.entry), json.dumps(job.argv)
        with self._tx() as db:
            if db.execute("SELECT 1 FROM jobs WHERE job_id = ?", (job_id,)).fetchone():
                raise JobExists(f"a job named {job_id!r} already exists in {self.directory}")
            db.execute(
                "INSERT INTO jobs (job_id, entry, argv, status, created, updated, "
                "resume_count, parent, fork_seq, error, epoch, mac) VALUES "
                "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    job_id,
                    entry_text,
                    sealer.seal(argv_text, "jobs", "argv", job_id),
                    job.status,
                    job.created,
                    job.updated,
                    job.resume_count,
                    job.parent,
                    job.fork_seq,
                    sealer.seal(job.error, "jobs", "error", job_id),
                    copy.epoch,
                    job_mac(sealer, job_id, entry_text, argv_text, job.parent, job.fork_seq),
                ),
            )
            for snap in copy.snapshots:
                db.execute(INSERT_SNAPSHOT, snapshot_values(sealer, snap))
                body = bodies.get(snap.seq)
                if body is not None:
                    add_body(db, job_id, snap.seq, body)
            if copy.effects:
                db.executemany(
                    f"INSERT INTO effects ({EFFECT_COLUMNS}) VALUES {EFFECT_PLACES}",
                    [effect_values(sealer, e) for e in copy.effects],
                )
            if copy.approvals:
                db.executemany(
                    f"INSERT INTO approvals ({APPROVAL_COLUMNS}) VALUES {APPROVAL_PLACES}",
                    [approval_values(sealer, a) for a in copy.approvals],
                )
            if copy.wait is not None:
                places = ", ".join("?" * len(WAIT_COLUMNS.split(",")))
                db.execute(
                    f"INSERT INTO waits ({WAIT_COLUMNS}) VALUES ({places})",
                    wait_values(sealer, copy.wait),
                )
            db.executemany(
                "INSERT INTO events (job_id, at, kind, detail) VALUES (?, ?, ?, ?)",
                [
                    (
                        job_id,
                        e.at,
                        e.kind,
                        sealer.seal(e.detail, "events", "detail", job_id, e.kind, repr(e.at)),
                    )
                    for e in copy.events
                ],
            )
            db.executemany(
                "INSERT INTO metrics (job_id, name, value) VALUES (?, ?, ?)",
                [(job_id, k, v) for k, v in copy.metrics.items()],
            )
            self._event(db, job_id, "migrated", note)
            self._notify(db, job_id)
        return read_job(self._db(), sealer, self.directory, job_id, self.path)
