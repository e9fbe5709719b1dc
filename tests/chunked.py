"""A store's chunked snapshots as the tests reach them (`from chunked import ...`).

A job's snapshots are no longer files: each is a signed manifest in catalog.db's
`manifests` table over content-defined chunks in its `chunks` table (encoded bytes
inline, or at (offset, length) of a pack file in <store>/chunks/). These helpers read
and edit those rows directly with sqlite3, as an attacker with write access to
catalog.db would, and export a snapshot to a snapshot file (format 2) for the tests of
the file format (`resume FILE`, `inspect FILE`, `verify FILE`, import).
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ChunkRow",
    "snapshot_seqs",
    "manifest",
    "manifest_header",
    "set_manifest",
    "chunk_ids",
    "chunk_rows",
    "stored_bytes",
    "set_stored_bytes",
    "tamper_chunk",
    "export_file",
    "to_file_rows",
]


def _db(store: Path | str, write: bool = False) -> sqlite3.Connection:
    path = Path(store) / "catalog.db"
    if write:
        return sqlite3.connect(path, isolation_level=None)
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def snapshot_seqs(store: Path | str, job: str) -> list[int]:
    """The job's snapshot sequence numbers (file rows and chunked ones), in order."""
    with closing(_db(store)) as db:
        return [
            r[0]
            for r in db.execute("SELECT seq FROM snapshots WHERE job_id = ? ORDER BY seq", (job,))
        ]


def manifest(store: Path | str, job: str, seq: int) -> bytes:
    with closing(_db(store)) as db:
        row = db.execute(
            "SELECT data FROM manifests WHERE job_id = ? AND seq = ?", (job, seq)
        ).fetchone()
    assert row is not None, f"no manifest for {job}@{seq}"
    return bytes(row[0])


def manifest_header(store: Path | str, job: str, seq: int) -> dict:
    """The snapshot's manifest header (JSON), unverified: key_id, codecs, the job header
    (sealed fields in an encrypted store)..."""
    import json
    import struct

    data = manifest(store, job, seq)
    (length,) = struct.unpack_from("<I", data, 12)
    header: dict = json.loads(data[16 : 16 + length])
    return header


def set_manifest(store: Path | str, job: str, seq: int, data: bytes) -> None:
    with closing(_db(store, write=True)) as db:
        db.execute("UPDATE manifests SET data = ? WHERE job_id = ? AND seq = ?", (data, job, seq))


def chunk_ids(store: Path | str, job: str, seq: int) -> list[bytes]:
    """The chunk ids the snapshot's manifest lists, in order (serializers/_manifest.py)."""
    import struct

    data = manifest(store, job, seq)
    (length,) = struct.unpack_from("<I", data, 12)
    at = 16 + length
    (count,) = struct.unpack_from("<I", data, at)
    return [data[at + 4 + i * 20 : at + 4 + i * 20 + 16] for i in range(count)]


@dataclass
class ChunkRow:
    chunk_id: bytes
    size: int
    data: bytes | None
    pack: str | None
    offset: int
    length: int
    base: bytes | None


def chunk_rows(store: Path | str) -> list[ChunkRow]:
    with closing(_db(store)) as db:
        return [
            ChunkRow(
                bytes(r[0]),
                r[1],
                None if r[2] is None else bytes(r[2]),
                r[3],
                r[4],
                r[5],
                None if r[6] is None else bytes(r[6]),
            )
            for r in db.execute("SELECT id, size, data, pack, offset, length, base FROM chunks")
        ]


def stored_bytes(store: Path | str, chunk: ChunkRow) -> bytes:
    """A chunk's encoded bytes, from the catalog or its pack file."""
    if chunk.pack is None:
        assert chunk.data is not None
        return chunk.data
    with open(Path(store) / "chunks" / chunk.pack, "rb") as f:
        f.seek(chunk.offset)
        return f.read(chunk.length)


def set_stored_bytes(store: Path | str, chunk: ChunkRow, data: bytes) -> None:
    """Overwrite a chunk's encoded bytes where they are stored (same length in a pack)."""
    if chunk.pack is None:
        with closing(_db(store, write=True)) as db:
            db.execute("UPDATE chunks SET data = ? WHERE id = ?", (data, chunk.chunk_id))
        return
    assert len(data) == chunk.length
    with open(Path(store) / "chunks" / chunk.pack, "r+b") as f:
        f.seek(chunk.offset)
        f.write(data)


def tamper_chunk(
    store: Path | str, job: str, seq: int, index: int = 0, at: int | None = None
) -> ChunkRow:
    """Flip one byte of the stored bytes of the snapshot's `index`-th chunk (its middle
    by default); returns the chunk."""
    wanted = chunk_ids(store, job, seq)[index]
    chunk = next(c for c in chunk_rows(store) if c.chunk_id == wanted)
    data = bytearray(stored_bytes(store, chunk))
    data[len(data) // 2 if at is None else at] ^= 0x01
    set_stored_bytes(store, chunk, bytes(data))
    return chunk


def export_file(store: Path | str, job: str, seq: int, output: Path | str) -> Path:
    """Export snapshot job@seq to a snapshot file (format 2) with the store's own code,
    in this process (no agent code runs)."""
    from snapstate.serializers._home import Home

    home = Home(str(store), create=False, writable=False)
    try:
        home.export_row(home.catalog.snapshot(job, seq), str(output))
    finally:
        home.close()
    return Path(output)


def to_file_rows(store: Path | str, job: str) -> list[Path]:
    """Turn the job's chunked snapshots into file rows, as a store of an earlier
    release holds them: each exported to <store>/snapshots/<job>/<seq>-e<epoch>.snap
    (format 2, the same header), its row's `file`, `size` and `digest` set to it (the
    file's digest binds it as the manifest's did), its manifest deleted (the chunks
    stay until a prune). Returns the files, by seq."""
    from snapstate.serializers import _snapfile
    from snapstate.serializers._keys import KeyRing

    folder = Path(store) / "snapshots" / job
    folder.mkdir(parents=True, exist_ok=True)
    with closing(_db(store)) as db:
        rows = list(
            db.execute("SELECT seq, epoch FROM snapshots WHERE job_id = ? ORDER BY seq", (job,))
        )
    files = [
        export_file(store, job, seq, folder / f"{seq:06d}-e{epoch}.snap") for seq, epoch in rows
    ]
    keys = KeyRing(str(store))
    digests = [_snapfile.verify_digest(str(path), keys)[1] for path in files]
    with closing(_db(store, write=True)) as db:
        for (seq, _), path, digest in zip(rows, files, digests):
            db.execute(
                "UPDATE snapshots SET file = ?, size = ?, digest = ? WHERE job_id = ? AND seq = ?",
                (str(path.relative_to(store)), path.stat().st_size, digest, job, seq),
            )
            db.execute("DELETE FROM manifests WHERE job_id = ? AND seq = ?", (job, seq))
    return files
