"""The SQLite catalog's waits (WaitCatalog) and what `snaprun worker` asks of it
(WorkerCatalog): which jobs may run now, the worker's advisory claims, giving up on a
job whose runners keep dying."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .._catalog import WaitCatalog, WorkerCatalog
from .._store import LeaseRow, Owner, WaitRow, WorkerRow
from ._base import SqlBase
from ._rows import LEASE_COLUMNS, WAIT_COLUMNS, lease_row, upsert, wait_row, wait_values

__all__ = ["SqlWaits", "SqlWorker"]

# The worker's claims (runtime/_worker.py): a short note that a worker is starting a
# child for a job, so that two workers do not both start one. Correctness comes from
# the job's lease, which the child takes; a claim only saves a wasted child. The
# table is created on first use (no schema change: older snapstates ignore it).
_CLAIMS = (
    "CREATE TABLE IF NOT EXISTS claims (job_id TEXT PRIMARY KEY, host TEXT NOT NULL, "
    "pid INTEGER NOT NULL, started INTEGER NOT NULL, expires REAL NOT NULL)"
)


# The workers' heartbeats (`snaprun worker --status`, `snaprun ls`): one row per worker
# process, refreshed at each beat; its info is the worker's own JSON (never an agent's
# data). A row expired longer than _WORKER_KEEP ago is dropped by the next beat.
_WORKER_COLUMNS = "host, pid, started, info, beat, expires"
_WORKER_KEEP = 3600.0


class SqlWaits(SqlBase, WaitCatalog):
    def hibernate(self, wait: WaitRow, *, epoch: int) -> None:
        with self._tx() as db:
            self._check_epoch(db, wait.job_id, epoch)
            db.execute(upsert("waits", WAIT_COLUMNS, "job_id"), wait_values(self.sealer, wait))
            db.execute(
                "UPDATE jobs SET status = 'waiting', error = NULL, updated = ? WHERE job_id = ?",
                (self.clock(), wait.job_id),
            )
            self._event(db, wait.job_id, "waiting", wait.reason)
            self._notify(db, wait.job_id)

    def get_wait(self, job_id: str) -> WaitRow | None:
        if self._no_waits:
            return None
        row = (
            self._db()
            .execute(f"SELECT {WAIT_COLUMNS} FROM waits WHERE job_id = ?", (job_id,))
            .fetchone()
        )
        return wait_row(self.sealer, row, path=self.path) if row else None

    def waits(self) -> list[WaitRow]:
        if self._no_waits:
            return []
        rows = self._db().execute(f"SELECT {WAIT_COLUMNS} FROM waits ORDER BY since")
        return [wait_row(self.sealer, r, path=self.path, lenient=True) for r in rows.fetchall()]


class SqlWorker(SqlBase, WorkerCatalog):
    def runnable_jobs(self, now: float) -> list[str]:
        if self._no_waits:
            return []
        db = self._db()
        waiting = db.execute(
            "SELECT w.job_id FROM waits w JOIN jobs j ON j.job_id = w.job_id "
            "WHERE j.status = 'waiting' AND ((w.due IS NOT NULL AND w.due <= ?) OR "
            "(w.approval_id IS NOT NULL AND EXISTS (SELECT 1 FROM approvals a WHERE "
            "a.job_id = w.job_id AND a.approval_id = w.approval_id AND a.state != 'pending')))"
            " ORDER BY COALESCE(w.due, w.since)",
            (now,),
        ).fetchall()
        running = db.execute(
            "SELECT job_id FROM jobs WHERE status = 'running' ORDER BY updated"
        ).fetchall()
        out = [r[0] for r in waiting]
        for (job_id,) in running:
            row = db.execute(
                f"SELECT {LEASE_COLUMNS} FROM leases WHERE job_id = ?", (job_id,)
            ).fetchone()
            if row is None or not lease_row(row).is_live(now):
                out.append(job_id)
        return out

    def stopped_jobs(self) -> list[str]:
        rows = self._db().execute(
            "SELECT job_id FROM jobs WHERE status = 'interrupted' ORDER BY updated"
        )
        return [r[0] for r in rows.fetchall()]

    def claim_job(self, job_id: str, owner: Owner, ttl: float) -> bool:
        now = self.clock()
        with self._claim_tx(job_id) as db:
            if db is None:
                return False  # another worker is claiming it this very moment
            db.execute(_CLAIMS)
            row = db.execute(
                "SELECT host, pid, started, expires FROM claims WHERE job_id = ?", (job_id,)
            ).fetchone()
            if row is not None:
                holder = Owner(row[0], row[1], row[2])
                if holder != owner and LeaseRow(job_id, holder, 0, row[3], now).is_live(now):
                    return False
            db.execute(
                upsert("claims", "job_id, host, pid, started, expires", "job_id"),
                (job_id, owner.host, owner.pid, owner.started, now + ttl),
            )
        return True

    def release_claims(self, owner: Owner, job_id: str | None = None) -> None:
        with self._tx() as db:
            db.execute(_CLAIMS)
            db.execute(
                "DELETE FROM claims WHERE host = ? AND pid = ? AND started = ?"
                + (" AND job_id = ?" if job_id is not None else ""),
                (owner.host, owner.pid, owner.started) + ((job_id,) if job_id is not None else ()),
            )

    def beat_worker(self, owner: Owner, info: Mapping[str, Any], ttl: float) -> None:
        now = self.clock()
        text = json.dumps(dict(info), sort_keys=True, default=str)
        with self._tx() as db:
            db.execute("DELETE FROM workers WHERE expires < ?", (now - _WORKER_KEEP,))
            db.execute(
                upsert("workers", _WORKER_COLUMNS, "host, pid, started"),
                (owner.host, owner.pid, owner.started, text, now, now + max(0.0, ttl)),
            )

    def workers(self, now: float) -> list[WorkerRow]:
        if self._no_workers:
            return []
        rows = self._db().execute(
            f"SELECT {_WORKER_COLUMNS} FROM workers WHERE expires > ? ORDER BY host, pid",
            (now,),
        )
        out = []
        for host, pid, started, text, beat, expires in rows.fetchall():
            try:
                info = json.loads(text)
            except (TypeError, ValueError, RecursionError):
                info = None
            row = WorkerRow(
                Owner(str(host), int(pid), int(started)),
                info if isinstance(info, dict) else {},
                float(beat),
                float(expires),
            )
            if row.is_live(now):
                out.append(row)
        return out

    def give_up_job(self, job_id: str, error: str) -> bool:
        now = self.clock()
        with self._tx() as db:
            job = db.execute("SELECT status FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
            if job is None or job[0] not in ("running", "interrupted"):
                return False
            lease = self._live_lease(db, job_id)
            if lease is not None:
                return False  # a runner holds it (again): not abandoned
            db.execute(
                "UPDATE jobs SET status = 'failed', error = ?, updated = ? WHERE job_id = ?",
                (self.sealer.seal(error, "jobs", "error", job_id), now, job_id),
            )
            db.execute("DELETE FROM leases WHERE job_id = ?", (job_id,))
            self._event(db, job_id, "failed", error)
        return True
