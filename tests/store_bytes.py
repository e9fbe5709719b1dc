"""Reading a store's files as an outsider would, for the tests that check no secret is
written: every zstd frame found in a file, and a snapshot file's decompressed body
(serializers/_snapfile.py's layout), without the store's keys."""

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
