"""The SQLite catalog's chunked snapshot bodies (ChunkCatalog): the manifests and the
chunks tables, and the mark and sweep that drops chunks no manifest lists."""

from __future__ import annotations

from collections.abc import Collection, Iterator

from ..._errors import ChunksMissing
from .. import _manifest
from .._catalog import ChunkCatalog
from .._store import SnapshotBody, StoredChunk
from ._base import Conn, SqlBase

__all__ = ["SqlChunks", "add_body"]

_BATCH = 500  # ids per IN (...) list, well under SQLite's variable limit


def _batches(ids: Collection[bytes]) -> Iterator[list[bytes]]:
    items = list(ids)
    for start in range(0, len(items), _BATCH):
        yield items[start : start + _BATCH]


def _held(db: Conn, ids: Collection[bytes]) -> set[bytes]:
    held: set[bytes] = set()
    for batch in _batches(ids):
        places = ",".join("?" * len(batch))
        held.update(
            r[0] for r in db.execute(f"SELECT id FROM chunks WHERE id IN ({places})", batch)
        )
    return held


def add_body(db: Conn, job_id: str, seq: int, body: SnapshotBody) -> None:
    """Inside the caller's transaction: add the body's new chunks (one already held is
    kept), check that every chunk it lists is held (ChunksMissing otherwise: the
    transaction must roll back), record its manifest."""
    db.executemany(
        'INSERT INTO chunks (id, size, data, pack, "offset", length, base) '
        "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
        [(c.chunk_id, c.size, c.data, c.pack, c.offset, c.length, c.base) for c in body.new],
    )
    needed = body.refs | {c.base for c in body.new if c.base is not None}
    missing = frozenset(needed - _held(db, needed))
    if missing:
        raise ChunksMissing(
            f"job {job_id}: snapshot {seq} refers to {len(missing)} chunk(s) the store no "
            "longer holds (swept by a concurrent prune); nothing was committed",
            ids=missing,
        )
    db.execute(
        "INSERT INTO manifests (job_id, seq, data) VALUES (?, ?, ?)", (job_id, seq, body.manifest)
    )


class SqlChunks(SqlBase, ChunkCatalog):
    def missing_chunks(self, ids: Collection[bytes]) -> set[bytes]:
        if self._no_chunks:
            return set(ids)
        return set(ids) - _held(self._db(), ids)

    def get_chunks(self, ids: Collection[bytes]) -> dict[bytes, StoredChunk]:
        if self._no_chunks:
            return {}
        found: dict[bytes, StoredChunk] = {}
        db = self._db()
        for batch in _batches(ids):
            places = ",".join("?" * len(batch))
            for r in db.execute(
                'SELECT id, size, data, pack, "offset", length, base FROM chunks '
                f"WHERE id IN ({places})",
                batch,
            ):
                found[r[0]] = StoredChunk(r[0], r[1], r[2], r[3], r[4], r[5], r[6])
        return found

    def manifest(self, job_id: str, seq: int) -> bytes | None:
        if self._no_chunks:
            return None
        row = (
            self._db()
            .execute("SELECT data FROM manifests WHERE job_id = ? AND seq = ?", (job_id, seq))
            .fetchone()
        )
        return None if row is None else bytes(row[0])

    def sweep_chunks(self) -> tuple[int, set[str]]:
        if self._no_chunks:
            return 0, set()
        with self._tx() as db:
            marked: set[bytes] = set()
            for (data,) in db.execute("SELECT data FROM manifests"):
                marked |= _manifest.chunk_ids(bytes(data))
            bases = {
                bytes(c): bytes(b)
                for c, b in db.execute("SELECT id, base FROM chunks WHERE base IS NOT NULL")
            }
            todo = list(marked)
            while todo:  # a kept delta keeps its base, and that base's base...
                base = bases.get(todo.pop())
                if base is not None and base not in marked:
                    marked.add(base)
                    todo.append(base)
            dead = [
                (chunk_id,)
                for (chunk_id,) in db.execute("SELECT id FROM chunks")
                if bytes(chunk_id) not in marked
            ]
            db.executemany("DELETE FROM chunks WHERE id = ?", dead)
            packs = {
                r[0] for r in db.execute("SELECT DISTINCT pack FROM chunks WHERE pack IS NOT NULL")
            }
        return len(dead), packs

    def packs(self) -> set[str]:
        if self._no_chunks:
            return set()
        return {
            r[0]
            for r in self._db().execute("SELECT DISTINCT pack FROM chunks WHERE pack IS NOT NULL")
        }
