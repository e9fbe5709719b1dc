"""Signing the rows of a catalog written before rows carried signatures (schema 5,
serializers/_sql/_rows.py): once, by the store that upgrades it, with its key
(serializers/_home.py records the fact in the key file afterwards, where whoever can
write the catalog cannot erase it). Shared SQL: a backend whose catalogs are born
signed never has such rows."""

from __future__ import annotations

from ..._errors import StoreDamaged
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
    job_mac,
    job_row,
    wait_row,
    wait_values,
)

__all__ = ["SqlSigning"]


class SqlSigning(SqlBase):
    def sign_rows(self) -> int:
        """Sign every row without a signature with the catalog's sealer, in one
        transaction; returns how many. A row that cannot be read (a sealed value that
        does not open, a malformed value) is left unsigned: it stays refused."""
        sealer = self.sealer
        reader = self._column_sealer(
            Sealer(sealer.keys, sealer.enabled, tolerant=sealer.tolerant, signed=False)
        )
        signed = 0
        with self._tx() as db:
            for r in db.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE mac IS NULL").fetchall():
                try:
                    job = job_row(reader, r, path=self.path)
                    argv = reader.open(r[2], "jobs", "argv", r[0])
                except StoreDamaged:
                    continue
                mac = job_mac(sealer, job.job_id, r[1], argv, job.parent, job.fork_seq)
                db.execute("UPDATE jobs SET mac = ? WHERE job_id = ?", (mac, job.job_id))
                signed += 1
            for r in db.execute(
                f"SELECT {EFFECT_COLUMNS} FROM effects WHERE mac IS NULL"
            ).fetchall():
                try:
                    effect = effect_row(reader, self.path, r)
                except StoreDamaged:
                    continue
                db.execute(
                    "UPDATE effects SET mac = ? WHERE job_id = ? AND ordinal = ?",
                    (effect_values(sealer, effect)[-1], effect.job_id, effect.ordinal),
                )
                signed += 1
            if self._no_waits:
                return signed
            for r in db.execute(f"SELECT {WAIT_COLUMNS} FROM waits WHERE mac IS NULL").fetchall():
                try:
                    wait = wait_row(reader, r, path=self.path)
                except StoreDamaged:
                    continue
                db.execute(
                    "UPDATE waits SET mac = ? WHERE job_id = ?",
                    (wait_values(sealer, wait)[-1], wait.job_id),
                )
                signed += 1
            for r in db.execute(
                f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE mac IS NULL"
            ).fetchall():
                try:
                    approval = approval_row(reader, r, path=self.path)
                except StoreDamaged:
                    continue
                db.execute(
                    "UPDATE approvals SET mac = ? WHERE job_id = ? AND approval_id = ?",
                    (approval_values(sealer, approval)[-1], approval.job_id, approval.approval_id),
                )
                signed += 1
        return signed
