"""Content-defined chunks of a snapshot body: cutting, naming, encoding, decoding.

A body (the pickle) is cut by FastCDC (pyfastcdc: the FastCDC 2020 algorithm, a
rolling gear hash) into chunks of 4-64 KiB, about 20 KiB on average, so bytes that did
not change between two snapshots of a job fall into the same chunks even when bytes
before them grew or shrank. Each chunk is named by its id and stored once per store:

    id       HMAC-SHA256(id key, content)[:16], the id key derived from the store key
             named in the manifest and from the store's mode (plain or sealed): no
             unkeyed hash of the content is ever stored, an id cannot be forged or a
             collision crafted without the key, and a sealed snapshot never shares a
             chunk with a plaintext one
    encoded  zstd (level 1) of the content, or of the content against a base chunk (a
             delta: zstd with the base's content as its dictionary, for a chunk that
             replaces one of the job's previous snapshot; at most MAX_DEPTH deltas
             deep); in an encrypted store then sealed with AES-256-GCM (12-byte random
             nonce first, associated data = the id), so the same content is encrypted
             once, when the store first holds it
    cut      in an encrypted store the gear table is seeded from the key, so the chunk
             boundaries (and so the chunk sizes) depend on the key too

Equal chunks share an id within one store and one key: someone who can read the
catalog sees which snapshots share content (not what it is). That is the price of
storing each chunk once; a store whose snapshots must not reveal even that keeps
`snaprun prune` close behind, or is not shared.

Decoding trusts nothing: the stored bytes are authenticated (sealed chunks) or
decompressed into at most the size the signed manifest gives, then the id is
recomputed over the content and compared, before any byte of it is used.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import threading
from collections.abc import Iterator

import zstandard
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pyfastcdc import FastCDC

from .._errors import CorruptSnapshot, TamperedSnapshot
from ._keys import Key

__all__ = [
    "AVG_SIZE",
    "MIN_SIZE",
    "MAX_SIZE",
    "ID_SIZE",
    "MAX_ENCODED",
    "MAX_DEPTH",
    "Codec",
    "codec",
]

AVG_SIZE, MIN_SIZE, MAX_SIZE = 16 << 10, 4 << 10, 64 << 10
ID_SIZE = 16
_PARALLEL_FROM = 8  # chunks: fewer are compressed in this thread
MAX_DEPTH = 32  # a delta's base may itself be a delta, up to this many deep
_NONCE = 12
_ZSTD_LEVEL = 1
# The largest encoded chunk: zstd's worst case for MAX_SIZE bytes, a nonce and a tag.
MAX_ENCODED = MAX_SIZE + (MAX_SIZE >> 7) + 512 + _NONCE + 16


class Codec:
    """The chunking and encoding of one key in one mode (plain or sealed)."""

    def __init__(self, key: Key, sealed: bool):
        self.key, self.sealed = key, sealed
        mode = b"sealed" if sealed else b"plain"
        self._id_key = hmac.digest(key.mac_key, b"snapstate chunk id\0" + mode, "sha256")
        seed = 0
        if sealed:
            seed = (
                int.from_bytes(
                    hmac.digest(key.mac_key, b"snapstate chunk cut", "sha256")[:8], "little"
                )
                >> 1
            )  # pyfastcdc takes a signed 64-bit seed
        self._seed = seed
        self._aead = AESGCM(key.aead_key) if sealed else None
        self._local = threading.local()  # zstd contexts are not shared between threads

    def _zstd(self) -> tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]:
        pair: tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor] | None = getattr(
            self._local, "zstd", None
        )
        if pair is None:
            pair = self._local.zstd = (
                zstandard.ZstdCompressor(level=_ZSTD_LEVEL),
                zstandard.ZstdDecompressor(),
            )
        return pair

    def chunk_id(self, content: bytes | memoryview) -> bytes:
        return hmac.digest(self._id_key, content, "sha256")[:ID_SIZE]

    def encode(
        self, chunk_id: bytes, content: bytes | memoryview, base: bytes | memoryview | None = None
    ) -> bytes:
        """The stored bytes of a chunk; with `base`, a delta against that content."""
        if base is None:
            compressed = self._zstd()[0].compress(content)
        else:
            dictionary = zstandard.ZstdCompressionDict(
                bytes(base), dict_type=zstandard.DICT_TYPE_RAWCONTENT
            )
            compressed = zstandard.ZstdCompressor(level=_ZSTD_LEVEL, dict_data=dictionary).compress(
                content
            )
        if self._aead is None:
            return compressed
        nonce = os.urandom(_NONCE)
        return nonce + self._aead.encrypt(nonce, compressed, b"snapstate chunk " + chunk_id)

    def encode_many(self, chunks: list[tuple[bytes, memoryview]]) -> list[bytes]:
        """encode() of many whole chunks, compressed in parallel by zstd's own threads
        where the zstandard build offers it (a first snapshot of a large state)."""
        multi = getattr(self._zstd()[0], "multi_compress_to_buffer", None)
        if multi is None or len(chunks) < _PARALLEL_FROM:
            return [self.encode(chunk_id, content) for chunk_id, content in chunks]
        try:
            result = multi([content for _, content in chunks], threads=-1)
            compressed = [result[i].tobytes() for i in range(len(result))]
        except (zstandard.ZstdError, NotImplementedError, TypeError):
            return [self.encode(chunk_id, content) for chunk_id, content in chunks]
        if self._aead is None:
            return compressed
        sealed = []
        for (chunk_id, _), data in zip(chunks, compressed, strict=True):
            nonce = os.urandom(_NONCE)
            sealed.append(nonce + self._aead.encrypt(nonce, data, b"snapstate chunk " + chunk_id))
        return sealed

    def decode(
        self,
        chunk_id: bytes,
        encoded: bytes | memoryview,
        size: int,
        where: str,
        base: bytes | None = None,
    ) -> bytes:
        """The content of a stored chunk (a delta: against `base`, the verified content
        of its base), proven to be the chunk `chunk_id` of `size` bytes
        (TamperedSnapshot or CorruptSnapshot naming `where` otherwise)."""
        if len(encoded) > MAX_ENCODED:
            raise CorruptSnapshot(f"{where}: a chunk is {len(encoded)} bytes, more than any")
        if self._aead is not None:
            if len(encoded) < _NONCE + 16:
                raise TamperedSnapshot(f"{where}: a chunk is too short to be sealed")
            view = memoryview(encoded)
            try:
                encoded = self._aead.decrypt(
                    bytes(view[:_NONCE]), bytes(view[_NONCE:]), b"snapstate chunk " + chunk_id
                )
            except InvalidTag:
                raise TamperedSnapshot(
                    f"{where}: a chunk fails authentication (modified, swapped or not "
                    "sealed by this store's key); refusing the snapshot"
                ) from None
        try:
            # The frame says its size: decompress only one that says the signed size
            # (zstd allocates what the frame header says, whatever the bound).
            if zstandard.frame_content_size(encoded) != size:
                raise zstandard.ZstdError(f"its frame does not hold {size} bytes")
            if base is None:
                content = self._zstd()[1].decompress(encoded, max_output_size=size)
            else:
                dictionary = zstandard.ZstdCompressionDict(
                    base, dict_type=zstandard.DICT_TYPE_RAWCONTENT
                )
                content = zstandard.ZstdDecompressor(dict_data=dictionary).decompress(
                    encoded, max_output_size=size
                )
        except zstandard.ZstdError as exc:
            raise CorruptSnapshot(
                f"{where}: a chunk does not decompress ({exc}); it was damaged"
            ) from None
        if len(content) != size or not hmac.compare_digest(self.chunk_id(content), chunk_id):
            raise TamperedSnapshot(
                f"{where}: a chunk's content does not match its id (modified or swapped "
                "in the catalog); refusing the snapshot"
            )
        return content

    def cuts(self, view: memoryview) -> Iterator[int]:
        """The end offset of each chunk of `view`, in order (lazily: a caller that
        recognises the rest stops early)."""
        cdc: FastCDC | None = getattr(self._local, "cdc", None)
        if cdc is None:  # one per thread: a FastCDC object is not shared between threads
            cdc = self._local.cdc = FastCDC(
                AVG_SIZE, min_size=MIN_SIZE, max_size=MAX_SIZE, seed=self._seed
            )
        for chunk in cdc.cut_buf(view):
            yield chunk.offset + chunk.length


_CODECS: dict[tuple[str, bytes, bool], Codec] = {}


def codec(key: Key, sealed: bool) -> Codec:
    """The codec of a key and mode (made once per process)."""
    ident = (key.key_id, hashlib.sha256(key.mac_key).digest(), sealed)
    found = _CODECS.get(ident)
    if found is None:
        found = _CODECS[ident] = Codec(key, sealed)
    return found
