"""The SQLite catalog's jobs (JobCatalog)."""

from __future__ import annotations

import json
from typing import Any

from ..._errors import JobExists, JobNotFound
from .._catalog import JobCatalog
from .._sealing import Sealer
from .._store import JobRow
from ._base import JOB_TABLES, Conn, SqlBase
from ._rows import JOB_COLUMNS, job_row

__all__ = ["SqlJobs", "insert_job", "read_job"]


def insert_job(
    db: Conn,
    sealer: Sealer,
    directory: str,
    job_id: str,
    entry: dict[str, Any],
    argv: list[str],
    parent: str | None,
    fork_seq: int | None,
    now: float,
) -> None:
    """Insert a new running job in the caller's transaction; JobExists if the id is
    taken."""
    if db.execute("SELECT 1 FROM jobs WHERE job_id = ?", (job_id,)).fetchone():
        raise JobExists(f"a job named {job_id!r} already exists in {directory}; choose another id")
    db.execute(
        "INSERT INTO jobs (job_id, entry, argv, status, created, updated, parent,"
        " fork_seq) VALUES (?, ?, ?, 'running', ?, ?, ?, ?)",
        (
            job_id,
            json.dumps(entry),
            sealer.seal(json.dumps(argv), "jobs", "argv", job_id),
            now,
            now,
            parent,
            fork_seq,
        ),
    )


def read_job(db: Conn, sealer: Sealer, directory: str, job_id: str) -> JobRow:
    """The job, or JobNotFound."""
    row = db.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
    if row is None:
        raise JobNotFound(f"no job {job_id!r} in {directory} (`snaprun ls` lists the jobs)")
    return job_row(sealer, row)


class SqlJobs(SqlBase, JobCatalog):
    def create_job(
        self,
        job_id: str,
        entry: dict[str, Any],
        argv: list[str],
        *,
        parent: str | None = None,
        fork_seq: int | None = None,
    ) -> JobRow:
        now = self.clock()
        with self._tx() as db:
            insert_job(db, self.sealer, self.directory, job_id, entry, argv, parent, fork_seq, now)
            self._event(
                db,
                job_id,
                "created",
                f"forked from {parent}@{fork_seq}"
                if parent
                else f"entry {entry.get('path') or entry.get('module')}",
            )
        return self.get_job(job_id)

    def get_job(self, job_id: str) -> JobRow:
        return read_job(self._db(), self.sealer, self.directory, job_id)

    def list_jobs(self) -> list[JobRow]:
        rows = self._db().execute(f"SELECT {JOB_COLUMNS} FROM jobs ORDER BY created, job_id")
        return [job_row(self.sealer, r) for r in rows]

    def set_status(
        self, job_id: str, status: str, *, epoch: int | None = None, error: str | None = None
    ) -> None:
        with self._tx() as db:
            if epoch is not None:
                self._check_epoch(db, job_id, epoch)
            cur = db.execute(
                "UPDATE jobs SET status = ?, error = ?, updated = ? WHERE job_id = ?",
                (status, self.sealer.seal(error, "jobs", "error", job_id), self.clock(), job_id),
            )
            if cur.rowcount == 0:
                raise JobNotFound(f"no job {job_id!r}")
            self._event(db, job_id, status, error or "")

    def delete_job(self, job_id: str) -> None:
        with self._tx() as db:
            for table in (*JOB_TABLES, "jobs"):
                db.execute(f"DELETE FROM {table} WHERE job_id = ?", (job_id,))
