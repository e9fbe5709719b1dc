"""The SQLite catalog's leases (LeaseCatalog): one runner per job, fenced by an epoch
kept on the job's row, so it grows with each acquisition even after a release."""

from __future__ import annotations

from ..._errors import JobFinished, JobNotFound, LeaseHeld
from .._catalog import LeaseCatalog
from .._store import LeaseRow, Owner
from ._base import SqlBase
from ._rows import LEASE_COLUMNS, lease_row, upsert

__all__ = ["SqlLeases"]


class SqlLeases(SqlBase, LeaseCatalog):
    def get_lease(self, job_id: str) -> LeaseRow | None:
        row = (
            self._db()
            .execute(f"SELECT {LEASE_COLUMNS} FROM leases WHERE job_id = ?", (job_id,))
            .fetchone()
        )
        return lease_row(row) if row else None

    def acquire_lease(
        self, job_id: str, owner: Owner, ttl: float, *, force: bool = False, resuming: bool = False
    ) -> int:
        now = self.clock()
        with self._tx() as db:
            job = db.execute(
                "SELECT epoch, status FROM jobs WHERE job_id = ?", (job_id,)
            ).fetchone()
            if job is None:
                raise JobNotFound(f"no job {job_id!r} in {self.directory}")
            if job[1] == "done":  # checked where the lease is taken: no race with a finish
                raise JobFinished(
                    f"job {job_id} is done; it never runs again (`snaprun fork "
                    f"{job_id}@SEQ` starts a copy from one of its snapshots)"
                )
            row = db.execute(
                f"SELECT {LEASE_COLUMNS} FROM leases WHERE job_id = ?", (job_id,)
            ).fetchone()
            if row is not None:
                lease = lease_row(row)
                if lease.is_live(now):
                    # Never over a live lease, force or not: a holder that is alive but
                    # silent (paused, partitioned) may still send what it has
                    # dispatched until its lease expires. `--force` waits it out
                    # (runtime/_lease.py); a holder whose process is gone is not live.
                    holder_ttl = lease.expires - lease.heartbeat
                    age = now - lease.heartbeat
                    raise LeaseHeld(
                        f"job {job_id} is held by a live runner ({lease.owner}, lease epoch "
                        f"{lease.epoch}, last heartbeat {age:.0f}s ago, expires in "
                        f"{lease.expires - now:.0f}s); only one runner per job. "
                        + (
                            "--force never takes over a runner that is heartbeating; it waits "
                            "out the lease of one that is silent (no heartbeat for "
                            f"{2 * holder_ttl / 3:.0f}s)"
                            if force
                            else "Wait for it to finish, or use --force to wait out its lease "
                            "once its heartbeat is silent"
                        )
                    )
            epoch: int = job[0] + 1
            db.execute("DELETE FROM waits WHERE job_id = ?", (job_id,))  # polled again
            db.execute(
                "UPDATE jobs SET epoch = ?, status = 'running', error = NULL, updated = ?,"
                " resume_count = resume_count + ? WHERE job_id = ?",
                (epoch, now, int(resuming), job_id),
            )
            db.execute(
                upsert("leases", LEASE_COLUMNS, "job_id"),
                (job_id, owner.host, owner.pid, owner.started, epoch, now + ttl, now),
            )
            self._event(
                db,
                job_id,
                "lease",
                f"epoch {epoch} taken by {owner}"
                + (
                    " (forced, after the previous lease expired)"
                    if force and row is not None and row[5] <= now
                    else ""
                ),
            )
        return epoch

    def record_resume(self, job_id: str, epoch: int, detail: str) -> None:
        with self._tx() as db:
            self._check_epoch(db, job_id, epoch)
            db.execute(
                "UPDATE jobs SET resume_count = resume_count + 1 WHERE job_id = ?", (job_id,)
            )
            self._event(db, job_id, "resumed", detail)

    def heartbeat(self, job_id: str, epoch: int, ttl: float) -> None:
        now = self.clock()
        with self._tx() as db:
            self._check_epoch(db, job_id, epoch)
            db.execute(
                "UPDATE leases SET expires = ?, heartbeat = ? WHERE job_id = ?",
                (now + ttl, now, job_id),
            )

    def release_lease(self, job_id: str, epoch: int) -> None:
        with self._tx() as db:
            if db.execute(
                "DELETE FROM leases WHERE job_id = ? AND epoch = ?", (job_id, epoch)
            ).rowcount:
                self._notify(db, job_id)
