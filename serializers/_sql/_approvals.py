"""The SQLite catalog's approvals (ApprovalCatalog): a pending row per request, decided
once, compare-and-swap."""

from __future__ import annotations

import dataclasses
import time

from ..._errors import StoreError
from .._catalog import ApprovalCatalog
from .._store import ApprovalRow
from ._base import SqlBase
from ._rows import APPROVAL_COLUMNS, APPROVAL_PLACES, approval_row, approval_values

__all__ = ["SqlApprovals"]

_SELECT_ONE = f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE job_id = ? AND approval_id = ?"


class SqlApprovals(SqlBase, ApprovalCatalog):
    def add_approval(self, row: ApprovalRow, *, epoch: int | None) -> ApprovalRow:
        with self._tx() as db:
            if epoch is not None:
                self._check_epoch(db, row.job_id, epoch)
            found = db.execute(_SELECT_ONE, (row.job_id, row.approval_id)).fetchone()
            if found is not None:
                return approval_row(self.sealer, found)
            db.execute(
                f"INSERT INTO approvals ({APPROVAL_COLUMNS}) VALUES {APPROVAL_PLACES}",
                approval_values(self.sealer, row),
            )
            self._event(db, row.job_id, "approval", f"{row.approval_id} requested: {row.name}")
            return row

    def get_approval(self, job_id: str, approval_id: str) -> ApprovalRow | None:
        if self._no_waits:
            return None
        found = self._db().execute(_SELECT_ONE, (job_id, approval_id)).fetchone()
        return approval_row(self.sealer, found) if found else None

    def approvals(self, job_id: str | None = None) -> list[ApprovalRow]:
        if self._no_waits:
            return []
        where, args = ("WHERE job_id = ?", (job_id,)) if job_id is not None else ("", ())
        rows = self._db().execute(
            f"SELECT {APPROVAL_COLUMNS} FROM approvals {where} ORDER BY requested, {self.insertion_order}",
            args,
        )
        return [approval_row(self.sealer, r) for r in rows.fetchall()]

    def decide_approval(
        self,
        job_id: str,
        approval_id: str,
        *,
        granted: bool,
        by: str,
        note: str | None,
        at: float,
    ) -> ApprovalRow:
        with self._tx() as db:
            found = db.execute(_SELECT_ONE, (job_id, approval_id)).fetchone()
            if found is None:
                raise StoreError(
                    f"job {job_id} has no approval {approval_id!r}; `snaprun approvals` lists "
                    "the pending ones"
                )
            row = approval_row(self.sealer, found)
            if row.state != "pending":
                raise StoreError(
                    f"approval {approval_id} of job {job_id} was already {row.state} by "
                    f"{row.decided_by} at {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(row.decided_at or 0))}"
                    "; a decision is final (nothing changed)"
                )
            decided = dataclasses.replace(
                row,
                state="granted" if granted else "rejected",
                decided_by=by,
                decided_at=at,
                note=note,
            )
            db.execute(
                "UPDATE approvals SET state = ?, decided_by = ?, decided_at = ?, note = ? "
                "WHERE job_id = ? AND approval_id = ? AND state = 'pending'",
                (
                    decided.state,
                    *approval_values(self.sealer, decided)[9:12],
                    job_id,
                    approval_id,
                ),
            )
            self._event(db, job_id, "approval", f"{approval_id} {decided.state} by {by}")
            self._notify(db, job_id)
            return decided
