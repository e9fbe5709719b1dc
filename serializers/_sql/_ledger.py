"""The SQLite catalog's effect ledger (LedgerCatalog): rows recorded under the lease's
fence (a dispatch also under its deadline), and settled by hand once no runner holds
the job."""

from __future__ import annotations

import contextlib
import dataclasses

from ..._errors import JobNotFound, LeaseHeld, StoreError
from .._catalog import LedgerCatalog
from .._store import EffectKind, EffectRow, EffectState, effect_label
from ._base import SqlBase
from ._rows import EFFECT_COLUMNS, EFFECT_PLACES, effect_row, effect_values, upsert

__all__ = ["SqlLedger"]


class SqlLedger(SqlBase, LedgerCatalog):
    def effect(self, job_id: str, ordinal: int) -> EffectRow | None:
        row = (
            self._db()
            .execute(
                f"SELECT {EFFECT_COLUMNS} FROM effects WHERE job_id = ? AND ordinal = ?",
                (job_id, ordinal),
            )
            .fetchone()
        )
        return effect_row(self.sealer, self.path, row) if row else None

    def effect_by_key(self, job_id: str, key: str) -> EffectRow | None:
        row = (
            self._db()
            .execute(
                f"SELECT {EFFECT_COLUMNS} FROM effects WHERE job_id = ? "
                "AND key = ? ORDER BY ordinal LIMIT 1",
                (job_id, key),
            )
            .fetchone()
        )
        return effect_row(self.sealer, self.path, row) if row else None

    def effects(self, job_id: str) -> list[EffectRow]:
        rows = self._db().execute(
            f"SELECT {EFFECT_COLUMNS} FROM effects WHERE job_id = ? ORDER BY ordinal",
            (job_id,),
        )
        return [effect_row(self.sealer, self.path, r) for r in rows]

    def record_effects(
        self,
        rows: list[EffectRow],
        *,
        epoch: int | None,
        replace: bool = False,
        ttl: float | None = None,
        margin: float = 0.0,
        ordered: bool = False,
    ) -> float | None:
        if not rows:
            return None
        insert = (
            upsert("effects", EFFECT_COLUMNS, "job_id, ordinal")
            if replace
            else f"INSERT INTO effects ({EFFECT_COLUMNS}) VALUES {EFFECT_PLACES}"
        )
        deadline = None
        with self._unsynced() if ordered else contextlib.nullcontext(), self._tx() as db:
            if ttl is not None:
                deadline = self._fence_dispatch(
                    db,
                    rows[0].job_id,
                    epoch,
                    ttl,
                    margin,
                    f"effect {rows[-1].ordinal} ({rows[-1].name})",
                )
            elif epoch is not None:
                self._check_epoch(db, rows[0].job_id, epoch)
            try:
                db.executemany(
                    insert,
                    [effect_values(self.sealer, r) for r in rows],
                )
            except self.integrity_error:
                raise StoreError(
                    f"job {rows[0].job_id}: effect {rows[0].ordinal} is already recorded"
                ) from None
        return deadline

    def reconcile_effect(
        self, job_id: str, ordinal: int, *, state: EffectState, result: bytes | None, note: str
    ) -> EffectRow:
        now = self.clock()
        with self._tx() as db:
            job = db.execute("SELECT status FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
            if job is None:
                raise JobNotFound(
                    f"no job {job_id!r} in {self.directory} (`snaprun ls` lists the jobs)"
                )
            lease = self._live_lease(db, job_id)
            if lease is not None:
                raise LeaseHeld(
                    f"job {job_id} is running ({lease.owner}); reconcile it once it has stopped"
                )
            found = db.execute(
                f"SELECT {EFFECT_COLUMNS} FROM effects WHERE job_id = ? AND ordinal = ?",
                (job_id, ordinal),
            ).fetchone()
            effect = effect_row(self.sealer, self.path, found) if found else None
            if effect is None or effect.kind == EffectKind.VALUE:
                raise StoreError(
                    f"job {job_id} has no effect {ordinal} (`snaprun effects {job_id}`)"
                )
            name = effect_label(ordinal, effect.call_site)[0]
            if effect.state not in (
                EffectState.AMBIGUOUS,
                EffectState.DISPATCHED,
                EffectState.FAILED,
            ):
                raise StoreError(
                    f"effect {name} of job {job_id} is {effect.state}; only an "
                    "ambiguous or failed effect can be reconciled"
                )
            settled = dataclasses.replace(
                effect, state=state, result=result, note=note, updated=now
            )
            db.execute(
                upsert("effects", EFFECT_COLUMNS, "job_id, ordinal"),
                effect_values(self.sealer, settled),
            )
            db.execute(
                "INSERT INTO metrics (job_id, name, value) VALUES (?, 'reconciled', 1) "
                "ON CONFLICT (job_id, name) DO UPDATE SET value = metrics.value + 1",
                (job_id,),
            )
            self._event(db, job_id, "reconciled", f"effect {name}: {note}")
            self._notify(db, job_id)
            if job[0] == "parked":
                db.execute(
                    "UPDATE jobs SET status = 'interrupted', error = NULL, updated = ? "
                    "WHERE job_id = ?",
                    (now, job_id),
                )
                self._event(db, job_id, "interrupted", "")
        return settled
