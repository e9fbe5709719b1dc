"""What a store holds of a job's chunked snapshots, for the tests that compare it
before and after an operation or scan it for secrets (`from stored import ...`).

tests/chunked.py reaches single manifests and chunks; these read a whole store: the
state that must not change (rows, manifests, chunk rows, pack files), the decoded body
of a snapshot, the raw bytes of every file of the store, and every chunk's content as
an outsider without the keys would decode it from a plaintext store."""

from __future__ import annotations

from pathlib import Path

from chunked import chunk_rows, manifest, stored_bytes

__all__ = ["stored_state", "body", "raw_files", "outsider_chunks"]


def stored_state(store: Path | str, job: str) -> tuple:
    """The job's snapshot rows (seq, epoch, file, size, digest), their manifests, every
    chunk row of the store and every pack file's name and bytes."""
    from snapstate.serializers._sqlite import SqliteCatalog

    store = Path(store)
    catalog = SqliteCatalog(str(store))
    try:
        rows = [(r.seq, r.epoch, r.file, r.size, r.digest) for r in catalog.snapshots(job)]
    finally:
        catalog.close()
    packs = store / "chunks"
    return (
        rows,
        [manifest(store, job, seq) for seq, _, file, _, _ in rows if file == ""],
        sorted(
            (c.chunk_id, c.size, c.data, c.pack, c.offset, c.length, c.base)
            for c in chunk_rows(store)
        ),
        sorted((p.name, p.read_bytes()) for p in packs.iterdir()) if packs.is_dir() else [],
    )


def body(store: Path | str, job: str, seq: int) -> bytes:
    """The verified, decoded pickle of snapshot job@seq (read-only, in this process)."""
    from snapstate.serializers._home import Home

    home = Home(str(store), create=False, writable=False)
    try:
        return bytes(home.read_row(home.catalog.snapshot(job, seq))[1])
    finally:
        home.close()


def raw_files(store: Path | str) -> dict[str, bytes]:
    """Every file of the store (catalog.db and its WAL, packs, keys...) by relative path."""
    store = Path(store)
    return {str(p.relative_to(store)): p.read_bytes() for p in store.rglob("*") if p.is_file()}


def outsider_chunks(store: Path | str) -> list[bytes]:
    """Every chunk's content decoded as an outsider would without the store's keys:
    zstd, or zstd against its base chunk's content (a delta). A sealed chunk does not
    decode: it is left out (the encrypted tests check the raw bytes instead)."""
    import zstandard

    rows = {c.chunk_id: c for c in chunk_rows(store)}
    decoded: dict[bytes, bytes | None] = {}

    def content(chunk_id: bytes, depth: int = 0) -> bytes | None:
        if chunk_id in decoded:
            return decoded[chunk_id]
        chunk = rows.get(chunk_id)
        out = None
        if chunk is not None and depth < 64:
            data = stored_bytes(store, chunk)
            try:
                if chunk.base is None:
                    out = zstandard.ZstdDecompressor().decompress(data, max_output_size=chunk.size)
                else:
                    base = content(chunk.base, depth + 1)
                    if base is not None:
                        dictionary = zstandard.ZstdCompressionDict(
                            base, dict_type=zstandard.DICT_TYPE_RAWCONTENT
                        )
                        out = zstandard.ZstdDecompressor(dict_data=dictionary).decompress(
                            data, max_output_size=chunk.size
                        )
            except zstandard.ZstdError:
                out = None
        decoded[chunk_id] = out
        return out

    return [c for c in (content(i) for i in rows) if c is not None]
