"""Reading a store's files as an outsider would, for the tests that check no secret is
written: every zstd frame found in a file, a snapshot file's decompressed body
(serializers/_snapfile.py's layout), and the decoded content of a plaintext store's
chunks (serializers/_chunks.py: zstd, or a zstd delta against a base chunk), without
the store's keys."""

from __future__ import annotations

import json
import struct

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
SNAP_MAGIC = b"SNAPSTATE\0"


def zstd_frames(data: bytes) -> list[bytes]:
    """Whatever decompresses from each zstd magic number found in data."""
    import zstandard

    out = []
    start = data.find(ZSTD_MAGIC)
    while start != -1:
        try:
            out.append(zstandard.ZstdDecompressor().decompressobj().decompress(data[start:]))
        except zstandard.ZstdError:
            pass
        start = data.find(ZSTD_MAGIC, start + 1)
    return out


def snapshot_body(data: bytes) -> bytes | None:
    """A snapshot file's decompressed body (serializers/_snapfile.py: magic, u16 version,
    u32 header length, header, then u32-length chunks ended by a zero length), or None
    when the body is encrypted or the layout is not recognised."""
    import zstandard

    if not data.startswith(SNAP_MAGIC):
        return None
    try:
        at = len(SNAP_MAGIC)
        _, length = struct.unpack_from("<HI", data, at)
        at += 6
        header = json.loads(data[at : at + length])
        at += length
        chunks = []
        while True:
            (size,) = struct.unpack_from("<I", data, at)
            at += 4
            if size == 0:
                break
            chunks.append(data[at : at + size])
            at += size
        if "aes-256-gcm" in header.get("codecs", ()):
            return None
        return zstandard.ZstdDecompressor().decompressobj().decompress(b"".join(chunks))
    except (ValueError, struct.error, zstandard.ZstdError):
        return None


def chunk_contents(store) -> list[bytes]:
    """The content of every chunk of the store that decodes without a key (a plaintext
    store's: zstd, or a zstd delta whose base decodes), read from catalog.db's `chunks`
    table and the pack files as an outsider would. A sealed chunk decodes to nothing."""
    import sqlite3
    from contextlib import closing
    from pathlib import Path

    import zstandard

    store = Path(store)
    with closing(sqlite3.connect(f"file:{store / 'catalog.db'}?mode=ro", uri=True)) as db:
        rows = {
            bytes(r[0]): r[1:]
            for r in db.execute("SELECT id, size, data, pack, offset, length, base FROM chunks")
        }

    def stored(row) -> bytes:
        _, data, pack, offset, length, _ = row
        if pack is None:
            return bytes(data or b"")
        with open(store / "chunks" / pack, "rb") as f:
            f.seek(offset)
            return f.read(length)

    decoded: dict[bytes, bytes | None] = {}

    def decode(chunk_id: bytes, depth: int = 0) -> bytes | None:
        if chunk_id in decoded:
            return decoded[chunk_id]
        row = rows.get(chunk_id)
        content = None
        if row is not None and depth < 64:
            size, base = row[0], row[5]
            try:
                if base is None:
                    content = zstandard.ZstdDecompressor().decompress(
                        stored(row), max_output_size=size
                    )
                else:
                    base_content = decode(bytes(base), depth + 1)
                    if base_content is not None:
                        dictionary = zstandard.ZstdCompressionDict(
                            base_content, dict_type=zstandard.DICT_TYPE_RAWCONTENT
                        )
                        content = zstandard.ZstdDecompressor(dict_data=dictionary).decompress(
                            stored(row), max_output_size=size
                        )
            except (zstandard.ZstdError, OSError):
                content = None
        decoded[chunk_id] = content
        return content

    return [c for c in (decode(chunk_id) for chunk_id in rows) if c is not None]
