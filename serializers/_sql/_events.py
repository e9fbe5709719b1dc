"""The SQLite catalog's timeline and counters (EventCatalog)."""

from __future__ import annotations

from .._catalog import EventCatalog
from .._store import EventRow
from ._base import SqlBase
from ._rows import upsert

__all__ = ["SqlEvents"]


class SqlEvents(SqlBase, EventCatalog):
    def log_event(self, job_id: str, kind: str, detail: str = "") -> None:
        with self._tx() as db:
            self._event(db, job_id, kind, detail)

    def events(self, job_id: str) -> list[EventRow]:
        rows = self._db().execute(
            "SELECT job_id, at, kind, detail FROM events WHERE job_id = ? ORDER BY id", (job_id,)
        )
        return [
            EventRow(
                r[0], r[1], r[2], self.sealer.open(r[3], "events", "detail", r[0], r[2], repr(r[1]))
            )
            for r in rows
        ]

    def bump_metric(self, job_id: str, name: str, by: int = 1) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO metrics (job_id, name, value) VALUES (?, ?, ?) ON CONFLICT "
                "(job_id, name) DO UPDATE SET value = metrics.value + excluded.value",
                (job_id, name, by),
            )

    def set_metric(self, job_id: str, name: str, value: float) -> None:
        with self._tx() as db:
            db.execute(
                upsert("metrics", "job_id, name, value", "job_id, name"),
                (job_id, name, value),
            )

    def metrics(self, job_id: str) -> dict[str, float]:
        return dict(
            self._db()
            .execute("SELECT name, value FROM metrics WHERE job_id = ?", (job_id,))
            .fetchall()
        )
