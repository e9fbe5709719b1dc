"""The SQLite catalog's jobs (JobCatalog)."""

from __future__ import annotations

import json
from typing import Any

from ..._errors import JobExists, JobNotFound, LeaseHeld
from .._catalog import JobCatalog
from .._sealing import Sealer
from .._store import JobListing, JobRow, LeaseRow, SnapshotRow, WaitRow
from ._base import JOB_TABLES, Conn, SqlBase
from ._rows import (
    JOB_COLUMNS,
    LEASE_COLUMNS,
    WAIT_COLUMNS,
    job_mac,
    job_row,
    lease_row,
    snapshot_row,
    wait_row,
)

__all__ = ["SqlJobs", "insert_job", "read_job", "set_entry"]


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
    entry_text, argv_text = json.dumps(entry), json.dumps(argv)
    db.execute(
        "INSERT INTO jobs (job_id, entry, argv, status, created, updated, parent,"
        " fork_seq, mac) VALUES (?, ?, ?, 'running', ?, ?, ?, ?, ?)",
        (
            job_id,
            entry_text,
            sealer.seal(argv_text, "jobs", "argv", job_id),
            now,
            now,
            parent,
            fork_seq,
            job_mac(sealer, job_id, entry_text, argv_text, parent, fork_seq),
        ),
    )


def read_job(
    db: Conn, sealer: Sealer, directory: str, job_id: str, path: str | None = None
) -> JobRow:
    """The job, or JobNotFound; StoreDamaged naming the row if its signature does not
    verify."""
    row = db.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
    if row is None:
        raise JobNotFound(f"no job {job_id!r} in {directory} (`snaprun ls` lists the jobs)")
    return job_row(sealer, row, path=path)


def set_entry(db: Conn, sealer: Sealer, job: JobRow, entry: dict[str, Any]) -> None:
    """Record a new entry point for a job (`snaprun set-entry`), signed, in the
    caller's transaction."""
    entry_text, argv_text = json.dumps(entry), json.dumps(job.argv)
    db.execute(
        "UPDATE jobs SET entry = ?, mac = ? WHERE job_id = ?",
        (
            entry_text,
            job_mac(sealer, job.job_id, entry_text, argv_text, job.parent, job.fork_seq),
            job.job_id,
        ),
    )


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
        return read_job(self._db(), self.sealer, self.directory, job_id, self.path)

    def list_jobs(self) -> list[JobRow]:
        rows = self._db().execute(f"SELECT {JOB_COLUMNS} FROM jobs ORDER BY created, job_id")
        return [job_row(self.sealer, r, path=self.path, lenient=True) for r in rows]

    def job_listing(self, limit: int | None = None) -> JobListing:
        # Four set-based reads in one transaction, whatever the number of jobs: the
        # newest jobs, then the snapshots, leases and waits of exactly those jobs.
        newest = "SELECT job_id FROM jobs ORDER BY created DESC, job_id DESC"
        args: tuple[int, ...] = ()
        if limit is None:
            chosen = ""
        else:
            chosen, args = f" WHERE job_id IN ({newest} LIMIT ?)", (limit,)
        with self._read_tx() as db:
            total = db.execute("SELECT COUNT(*) FROM jobs").fetchone()[0]
            jobs = [
                job_row(self.sealer, r, path=self.path, lenient=True)
                for r in db.execute(
                    f"SELECT {JOB_COLUMNS} FROM jobs{chosen} ORDER BY created, job_id", args
                ).fetchall()
            ]
            snapshots: dict[str, list[SnapshotRow]] = {}
            for r in db.execute(
                f"{self._select_snapshots}{chosen} ORDER BY job_id, seq", args
            ).fetchall():
                snapshots.setdefault(r[0], []).append(snapshot_row(self.sealer, r))
            leases: dict[str, LeaseRow] = {
                r[0]: lease_row(r)
                for r in db.execute(f"SELECT {LEASE_COLUMNS} FROM leases{chosen}", args).fetchall()
            }
            waits: dict[str, WaitRow] = {}
            if not self._no_waits:
                waits = {
                    r[0]: wait_row(self.sealer, r, path=self.path, lenient=True)
                    for r in db.execute(
                        f"SELECT {WAIT_COLUMNS} FROM waits{chosen}", args
                    ).fetchall()
                }
        return JobListing(
            total=int(total),
            jobs=tuple(jobs),
            snapshots={job_id: tuple(rows) for job_id, rows in snapshots.items()},
            leases=leases,
            waits=waits,
        )

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

    def set_entry(self, job_id: str, entry: dict[str, Any]) -> JobRow:
        with self._tx() as db:
            job = read_job(db, self.sealer, self.directory, job_id, self.path)
            lease = self._live_lease(db, job_id)
            if lease is not None:
                raise LeaseHeld(
                    f"job {job_id} is running ({lease.owner}); change its entry point once "
                    "it has stopped"
                )
            set_entry(db, self.sealer, job, entry)
            self._event(
                db,
                job_id,
                "entry",
                f"entry point set to {entry.get('path') or entry.get('module')} "
                f"(was {job.entry.get('path') or job.entry.get('module')})",
            )
        return job

    def delete_job(self, job_id: str) -> None:
        with self._tx() as db:
            for table in (*JOB_TABLES, "jobs"):
                db.execute(f"DELETE FROM {table} WHERE job_id = ?", (job_id,))
