"""The manifest of a chunked snapshot: its header and its ordered chunk list, signed.

    magic       b"SNAPSTATE\\0" (a snapshot file's)
    version     u16, MANIFEST_FORMAT (3; a snapshot file is format 2)
    header      u32 length + UTF-8 JSON: the job header (sealed fields in an encrypted
                store), key id, codecs, the body's size and the chunker's parameters
    chunks      u32 count + count x (16-byte chunk id, u32 decoded size), in body order
    signature   HMAC-SHA256 over everything before it, with the key named in the header

A manifest lives in the catalog beside its snapshot row; its signature (hex) is the
snapshot's digest, which the row records, so a row and its manifest are bound as a
row and its file are. The signature covers every chunk id in order, so swapping,
dropping or reordering chunks, or editing any chunk (its id is a keyed hash of its
content, serializers/_chunks.py), is detected before anything is decoded.
"""

from __future__ import annotations

import hmac
import json
import struct
from dataclasses import dataclass
from typing import Any

from .._errors import (
    CorruptSnapshot,
    HeaderMismatch,
    TamperedSnapshot,
)
from . import _chunks
from ._keys import Key, KeyRing
from ._snapfile import MAGIC, signing_key

__all__ = ["MANIFEST_FORMAT", "CODECS", "SEALED", "Manifest", "build", "parse", "chunk_ids"]

MANIFEST_FORMAT = 3
CODECS = ["pickle-5", "fastcdc", "zstd"]
SEALED = "aes-256-gcm"
_FIXED = struct.Struct("<HI")
_COUNT = struct.Struct("<I")
_REF = struct.Struct(f"<{_chunks.ID_SIZE}sI")
_MAC = 32
_MAX_HEADER = 16 << 20
_MAX_REFS = 1 << 26  # 64 Mi chunks: far beyond any body (4 KiB each at least but the last)


@dataclass(frozen=True)
class Manifest:
    header: dict[str, Any]
    refs: list[tuple[bytes, int]]  # (chunk id, decoded size), in body order
    digest: str  # the signature, hex: the snapshot's digest
    key: Key

    @property
    def sealed(self) -> bool:
        return SEALED in self.header["codecs"]


def build(
    header: dict[str, Any], refs: list[tuple[bytes, int]], key: Key, sealed: bool
) -> tuple[bytes, str]:
    """The signed manifest and its digest (hex)."""
    header = dict(
        header,
        key_id=key.key_id,
        codecs=CODECS + ([SEALED] if sealed else []),
        size=sum(size for _, size in refs),
        chunker={"avg": _chunks.AVG_SIZE, "min": _chunks.MIN_SIZE, "max": _chunks.MAX_SIZE},
    )
    header_bytes = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    parts = [
        MAGIC,
        _FIXED.pack(MANIFEST_FORMAT, len(header_bytes)),
        header_bytes,
        _COUNT.pack(len(refs)),
        b"".join(_REF.pack(chunk_id, size) for chunk_id, size in refs),
    ]
    body = b"".join(parts)
    mac = hmac.digest(key.mac_key, body, "sha256")
    return body + mac, mac.hex()


def _layout(data: bytes, where: str) -> tuple[bytes, int, int]:
    """(header bytes, offset of the chunk list, count), checking the structure only."""
    fixed_end = len(MAGIC) + _FIXED.size
    if len(data) < fixed_end + _COUNT.size + _MAC or not data.startswith(MAGIC):
        raise CorruptSnapshot(f"{where}: the manifest is damaged (not a manifest)")
    version, length = _FIXED.unpack_from(data, len(MAGIC))
    if version != MANIFEST_FORMAT:
        raise CorruptSnapshot(
            f"{where}: the manifest has format {version}; this snapstate reads format "
            f"{MANIFEST_FORMAT}. Use the snapstate release that wrote it."
        )
    if length > _MAX_HEADER or fixed_end + length + _COUNT.size + _MAC > len(data):
        raise CorruptSnapshot(f"{where}: the manifest is damaged (its header length)")
    list_at = fixed_end + length
    (count,) = _COUNT.unpack_from(data, list_at)
    if count > _MAX_REFS or list_at + _COUNT.size + count * _REF.size + _MAC != len(data):
        raise CorruptSnapshot(f"{where}: the manifest is damaged (its chunk list)")
    return data[fixed_end:list_at], list_at + _COUNT.size, count


def chunk_ids(data: bytes) -> set[bytes]:
    """The chunk ids a manifest lists, unverified (for marking what a prune keeps:
    keeping too much is harmless). Empty for bytes that are no manifest."""
    try:
        _, at, count = _layout(data, "")
    except CorruptSnapshot:
        return set()
    return {data[at + i * _REF.size : at + i * _REF.size + _chunks.ID_SIZE] for i in range(count)}


def parse(data: bytes, keys: KeyRing, *, require_encryption: bool, where: str) -> Manifest:
    """A verified manifest: structure, key, signature; then its header and list.
    Nothing of the snapshot is decoded here."""
    if not isinstance(data, (bytes, bytearray)):
        raise CorruptSnapshot(f"{where}: the manifest is damaged (not bytes)")
    data = bytes(data)
    header_bytes, at, count = _layout(data, where)
    try:
        header = json.loads(header_bytes)
    except (ValueError, RecursionError):
        header = None
    if (
        not isinstance(header, dict)
        or not isinstance(header.get("key_id"), str)
        or not isinstance(header.get("codecs"), list)
    ):
        raise HeaderMismatch(
            f"{where}: the manifest's header is damaged; it was edited or replaced"
        )
    sealed = SEALED in header["codecs"]
    key = signing_key(
        header, keys, sealed=sealed, require_encryption=require_encryption, where=where
    )
    mac = hmac.digest(key.mac_key, data[:-_MAC], "sha256")
    if not hmac.compare_digest(mac, data[-_MAC:]):
        raise TamperedSnapshot(
            f"{where}: the manifest's signature does not match; it was modified after it "
            "was written (or signed by another key with the same id). Refusing it."
        )
    if header["codecs"] != CODECS + ([SEALED] if sealed else []):
        raise CorruptSnapshot(f"{where}: the manifest names codecs {header['codecs']!r}")
    refs = [_REF.unpack_from(data, at + i * _REF.size) for i in range(count)]
    if any(not 0 < size <= _chunks.MAX_SIZE for _, size in refs) or header.get("size") != sum(
        size for _, size in refs
    ):
        raise CorruptSnapshot(f"{where}: the manifest's chunk sizes do not add up")
    return Manifest(header, refs, mac.hex(), key)
