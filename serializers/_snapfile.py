"""The snapshot file: a readable header, a streamed body, a signed trailer.

    magic       b"SNAPSTATE\\0"
    version     u16, FORMAT_VERSION
    header      u32 length + UTF-8 JSON: job id, sequence, lease epoch, created-at,
                Python and library versions, code identities, key id, codec names, ...
    body        chunks, each u32 length + bytes, ended by a zero length: the pickle,
                zstd-compressed, then (when encrypted) each chunk sealed with AES-256-GCM
                (nonce = 8 random bytes of this file + chunk number; associated data =
                SHA-256 of the header, chunk number and a last-chunk flag)
    trailer     xxh3-128 of the header, xxh3-128 of the body, HMAC-SHA256 over header
                and body (keys derived from the key named in the header)

Reading verifies everything (structure, key, digests, signature) in a first pass that
decodes nothing and holds one chunk at a time (constant memory, whatever the file's
size or shape: every chunk but the last has the writer's chunk size); only then is
the body decrypted and decompressed for unpickling, from the same open file, its MAC
recomputed and compared before the payload is handed out: unpickling is code
execution, so nothing unauthenticated ever reaches it. The digests tell apart a
damaged body, a header that belongs to another body, and a signature that does not
match, so each gets its own error.

The body is produced and consumed in chunks, so bodies over 2 GiB work.

open_verified() is the streaming form for the inert decoder only (`snaprun inspect`,
`snaprun diff`; serializers/_inert.py): after the same constant-memory verification
pass, the body is decrypted and decompressed piece by piece as the decoder reads it,
the MAC recomputed as it goes; at the end (StreamReader.rest()) the MAC must equal the
verified one, or TamperedSnapshot. The decoder thus sees bytes before that last
comparison, which is safe because it imports nothing and calls nothing the pickle names
(no code runs, whatever the bytes); its result is discarded if the comparison fails.
Unpickling that runs code (resume) still goes through read_verified().
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import stat
import struct
from collections.abc import Iterable, Iterator
from typing import IO, Any, BinaryIO, Protocol, cast

import xxhash
import zstandard
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .._errors import (
    CorruptSnapshot,
    HeaderMismatch,
    PlaintextRefused,
    SnapshotRejected,
    TamperedSnapshot,
    TruncatedSnapshot,
)
from .._version import __version__
from . import _fs
from ._buffer import StreamReader
from ._keys import Key, KeyRing

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "write",
    "write_signed",
    "verify",
    "verify_digest",
    "read_payload",
    "read_verified",
    "open_verified",
    "peek_header",
    "signing_key",
    "CHUNK_SIZE",
]

MAGIC = b"SNAPSTATE\0"
# The file format (the u16 after the magic; "format" in a job snapshot's header too).
# Bumped when a reader of the previous format could not read the new files correctly; a
# release that bumps it still reads every format since 2, the first release's
# (CHANGELOG.md, "Versions and compatibility"; tests/golden/ holds each release's files).
FORMAT_VERSION = 2
CHUNK_SIZE = 1 << 20
_FIXED = struct.Struct("<HI")  # format version, header length
_LEN = struct.Struct("<I")
_TRAILER = 16 + 16 + 32
_PICKLE, _ZSTD, _AEAD = "pickle-5", "zstd", "aes-256-gcm"
_ZSTD_LEVEL = 1


# ------------------------------------------------------------------------ writing
def _aad(header_sha: bytes, index: int, last: bool) -> bytes:
    return header_sha + struct.pack("<IB", index, last)


def _sealed(
    chunks: Iterable[bytes], key: bytes, prefix: bytes, header_sha: bytes
) -> Iterator[bytes]:
    """AES-GCM each chunk; the last one is flagged so a cut at a chunk boundary fails."""
    aead = AESGCM(key)
    index, pending = 0, None
    for chunk in chunks:
        if pending is not None:
            yield aead.encrypt(
                prefix + struct.pack("<I", index), pending, _aad(header_sha, index, False)
            )
            index += 1
        pending = chunk
    yield aead.encrypt(
        prefix + struct.pack("<I", index), pending or b"", _aad(header_sha, index, True)
    )


def _compressed(payload: bytes) -> Iterator[bytes]:
    chunker = zstandard.ZstdCompressor(level=_ZSTD_LEVEL).chunker(chunk_size=CHUNK_SIZE)
    view = memoryview(payload)
    for start in range(0, len(view), 4 * CHUNK_SIZE):
        yield from chunker.compress(view[start : start + 4 * CHUNK_SIZE])
    yield from chunker.finish()  # type: ignore[no-untyped-call]  # (zstandard's stub)


def _file_bytes(
    header_bytes: bytes, body_chunks: Iterable[bytes], mac_key: bytes, out: list[str] | None = None
) -> Iterator[bytes]:
    header_digest = xxhash.xxh3_128_digest(header_bytes)
    body_hash = xxhash.xxh3_128()
    mac = hmac.new(mac_key, header_bytes, hashlib.sha256)
    yield MAGIC + _FIXED.pack(FORMAT_VERSION, len(header_bytes)) + header_bytes
    for chunk in body_chunks:
        piece = _LEN.pack(len(chunk)) + chunk
        body_hash.update(piece)
        mac.update(piece)
        yield piece
    end = _LEN.pack(0)
    body_hash.update(end)
    mac.update(end)
    if out is not None:
        out.append(mac.hexdigest())
    yield end + header_digest + body_hash.digest() + mac.digest()


def write(
    path: str,
    header: dict[str, Any],
    payload: bytes,
    keys: KeyRing,
    *,
    encrypt: bool = False,
    fs: _fs.FileSystem = _fs.OS,
) -> int:
    """Write a signed (and optionally encrypted) snapshot file atomically and durably;
    returns its size. `payload` is the pickle."""
    return write_signed(path, header, payload, keys, encrypt=encrypt, fs=fs)[0]


def write_signed(
    path: str,
    header: dict[str, Any],
    payload: bytes,
    keys: KeyRing,
    *,
    encrypt: bool = False,
    fs: _fs.FileSystem = _fs.OS,
) -> tuple[int, str]:
    """write(), returning (size, digest): the digest is the file's HMAC (hex), which
    names the exact header and body; the catalog records it to bind its row to this
    very file."""
    key = keys.current
    header = dict(
        header,
        key_id=key.key_id,
        chunk_size=CHUNK_SIZE,
        codecs=[_PICKLE, _ZSTD] + ([_AEAD] if encrypt else []),
    )
    chunks = _compressed(payload)
    if encrypt:
        header["nonce_prefix"] = os.urandom(8).hex()
    header_bytes = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    if encrypt:
        chunks = _sealed(
            chunks,
            key.aead_key,
            bytes.fromhex(header["nonce_prefix"]),
            hashlib.sha256(header_bytes).digest(),
        )
    digest: list[str] = []
    size = _fs.write_atomic(path, _file_bytes(header_bytes, chunks, key.mac_key, digest), fs)
    return size, digest[0]


# ------------------------------------------------------------------------ reading
_READ_BUFFER = 1 << 20  # large buffered reads, whatever the chunk lengths
_MAX_CHUNK_SIZE = 16 << 20  # keeps one chunk (and so a reader's memory) bounded
_TAG = 16  # AES-GCM adds a 16-byte tag to each sealed chunk


class _Reader:
    def __init__(self, f: BinaryIO, path: str):
        self.f, self.path = f, path
        self.size = os.fstat(f.fileno()).st_size

    def exactly(self, n: int, what: str) -> bytes:
        # A damaged length must not make us allocate gigabytes: never ask for more
        # than the file still holds.
        if n > self.size - self.f.tell():
            raise TruncatedSnapshot(
                f"{self.path} is truncated or damaged (its {what} claims "
                f"{n} bytes, more than the file holds)"
            )
        data = self.f.read(n)
        if len(data) != n:
            raise TruncatedSnapshot(
                f"{self.path} is truncated (it ends inside its {what}); "
                "resume from another snapshot of the job"
            )
        return data


def _open(path: str) -> BinaryIO:
    # O_NONBLOCK: opening a FIFO must not wait for a writer; only regular files are read.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise CorruptSnapshot(f"no snapshot file at {path}") from None
    except IsADirectoryError:
        raise CorruptSnapshot(f"{path} is a directory, not a snapshot file") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise CorruptSnapshot(f"{path} is not a regular file, so not a snapshot file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb", buffering=_READ_BUFFER)


def _read_header(reader: _Reader) -> tuple[dict[str, Any], bytes]:
    path = reader.path
    magic = reader.f.read(len(MAGIC))
    if magic != MAGIC:
        if MAGIC.startswith(magic):
            raise TruncatedSnapshot(f"{path} is truncated (it ends inside its magic number)")
        raise CorruptSnapshot(f"{path} is not a snapstate snapshot (bad magic)")
    version, length = _FIXED.unpack(reader.exactly(_FIXED.size, "format version"))
    if version > FORMAT_VERSION:  # CHANGELOG.md, "Versions and compatibility"
        raise CorruptSnapshot(
            f"{path} uses snapshot format {version}, newer than this snapstate "
            f"({__version__}) reads (format {FORMAT_VERSION}). Resume it with the snapstate "
            "release that wrote it, or a later one."
        )
    if version != FORMAT_VERSION:
        raise CorruptSnapshot(
            f"{path} uses snapshot format {version}; this snapstate reads format "
            f"{FORMAT_VERSION}. Resume it with the snapstate release that wrote it."
        )
    header_bytes = reader.exactly(length, "header")
    try:
        header = json.loads(header_bytes)
    except RecursionError:  # deeply nested JSON: hostile, never a snapshot header
        raise CorruptSnapshot(
            f"{path} is not a snapshot: its header is JSON nested too "
            "deeply to be a snapshot header"
        ) from None
    except ValueError:
        header = None
    if (
        not isinstance(header, dict)
        or not isinstance(header.get("key_id"), str)
        or not isinstance(header.get("codecs"), list)
    ):
        raise HeaderMismatch(
            f"{path} has a damaged header (not a snapshot header); it was edited or replaced"
        )
    return header, header_bytes


def signing_key(
    header: dict[str, Any], keys: KeyRing, *, sealed: bool, require_encryption: bool, where: str
) -> Key:
    """The key a snapshot's (or a manifest's) header names, from the store's own key
    ring: PlaintextRefused first when the store requires encryption and it is not
    sealed, then UnknownKey or RetiredKey naming `where`."""
    if require_encryption and not sealed:
        raise PlaintextRefused(
            f"{where} is not encrypted, and this store requires "
            "encryption; it was not written by this store"
        )
    try:
        return keys.get(header["key_id"])
    except SnapshotRejected as exc:
        raise type(exc)(f"{where}: {exc}") from None


def peek_header(path: str) -> dict[str, Any]:
    """The header, unverified: only for saying which key or job a file names."""
    with _open(path) as f:
        return _read_header(_Reader(f, path))[0]


def _chunk_limit(header: dict[str, Any], path: str) -> int:
    """The exact length of every body chunk but the last, from the header's chunk size."""
    size = header.get("chunk_size")
    if type(size) is not int or not 0 < size <= _MAX_CHUNK_SIZE:
        raise CorruptSnapshot(
            f"{path} has a damaged header (chunk size {size!r}); it was not written by snapstate"
        )
    return size + (_TAG if _AEAD in header["codecs"] else 0)


class _Hash(Protocol):
    def update(self, data: bytes, /) -> None: ...


def _body_chunks(
    reader: _Reader, limit: int, hashes: Iterable[_Hash]
) -> Iterator[tuple[bytes, bool]]:
    """(chunk, is_last) for each body chunk, feeding length prefixes, chunks and the
    end marker to `hashes`. The writer cuts the body into chunks of exactly `limit`
    bytes but the last, so anything else (e.g. a file of tiny chunks, built to make a
    reader allocate and hash millions of objects) is refused at its second chunk."""
    previous: bytes | None = None
    while True:
        prefix = reader.exactly(_LEN.size, "body")
        (length,) = _LEN.unpack(prefix)
        if length > reader.size - reader.f.tell():
            reader.exactly(length, "body")  # a length past the end: truncated
        if length and (length > limit or (previous is not None and len(previous) != limit)):
            bad = length if length > limit or previous is None else len(previous)
            raise CorruptSnapshot(
                f"{reader.path} is damaged: it has a body chunk of {bad} bytes "
                f"where its writer makes chunks of {limit}"
            )
        for h in hashes:
            h.update(prefix)
        if length == 0:
            if previous is not None:
                yield previous, True
            return
        chunk = reader.exactly(length, "body")
        for h in hashes:
            h.update(chunk)
        if previous is not None:
            yield previous, False
        previous = chunk


def _verify_open(
    f: BinaryIO, path: str, keys: KeyRing, require_encryption: bool
) -> tuple[dict[str, Any], bytes, Key, int, bytes]:
    """One streaming pass over the open file (constant memory: one chunk at a time):
    structure, key, digests and signature. Returns (header, header_bytes, key,
    body offset, MAC)."""
    reader = _Reader(f, path)
    header, header_bytes = _read_header(reader)
    key = signing_key(
        header,
        keys,
        sealed=_AEAD in header["codecs"],
        require_encryption=require_encryption,
        where=path,
    )
    limit = _chunk_limit(header, path)
    body_start = f.tell()
    body_hash = xxhash.xxh3_128()
    mac = hmac.new(key.mac_key, header_bytes, hashlib.sha256)
    for _ in _body_chunks(reader, limit, (body_hash, mac)):
        pass
    trailer = reader.exactly(_TRAILER, "trailer")
    if f.read(1):
        raise CorruptSnapshot(f"{path} has bytes after its trailer; it is damaged")
    header_ok = xxhash.xxh3_128_digest(header_bytes) == trailer[:16]
    body_ok = body_hash.digest() == trailer[16:32]
    digest = mac.digest()
    signed = hmac.compare_digest(digest, trailer[32:])
    if signed and header_ok and body_ok:
        return header, header_bytes, key, body_start, digest
    if not body_ok:
        raise CorruptSnapshot(
            f"{path} is damaged: its body does not match its checksum. "
            "Resume from an earlier snapshot of the job."
        )
    if not header_ok:
        raise HeaderMismatch(
            f"{path}: the header does not belong to this snapshot's body "
            "(swapped with another snapshot's, or edited); refusing it"
        )
    raise TamperedSnapshot(
        f"{path}: the signature does not match; the file was modified "
        "after it was written (or signed by another key with the same id). "
        "Refusing it."
    )


def verify(path: str, keys: KeyRing, *, require_encryption: bool = False) -> dict[str, Any]:
    """Check a snapshot file completely without decoding its body, in constant memory;
    returns the header. Raises CorruptSnapshot, TruncatedSnapshot or a
    SnapshotRejected subclass."""
    with _open(path) as f:
        return _verify_open(f, path, keys, require_encryption)[0]


def verify_digest(
    path: str, keys: KeyRing, *, require_encryption: bool = False
) -> tuple[dict[str, Any], str]:
    """verify(), returning (header, digest): the digest as write_signed() returned it."""
    with _open(path) as f:
        header, _, _, _, digest = _verify_open(f, path, keys, require_encryption)
    return header, digest.hex()


def read_payload(
    path: str, keys: KeyRing, *, require_encryption: bool = False
) -> tuple[dict[str, Any], bytearray]:
    """(header, pickle bytes) of a verified file (see read_verified)."""
    return read_verified(path, keys, require_encryption=require_encryption)[:2]


def read_verified(
    path: str, keys: KeyRing, *, require_encryption: bool = False
) -> tuple[dict[str, Any], bytearray, str]:
    """(header, pickle bytes, digest) of a verified file.

    A first pass verifies the file in constant memory; a second pass over the same
    open file descriptor (never reopened by name: a swapped file is not seen)
    decrypts and decompresses into one buffer while recomputing the MAC, and the
    buffer is handed out only if that MAC equals the verified one, so what is
    decoded is exactly what was verified. Nothing unauthenticated is decompressed
    in the first place (no decompression bomb from an unsigned file)."""
    with _open(path) as f:
        header, header_bytes, key, body_start, verified = _verify_open(
            f, path, keys, require_encryption
        )
        f.seek(body_start)
        reader = _Reader(f, path)
        mac = hmac.new(key.mac_key, header_bytes, hashlib.sha256)
        chunks = _body_chunks(reader, _chunk_limit(header, path), (mac,))
        out = bytearray()
        decompressor = zstandard.ZstdDecompressor().decompressobj()
        aead = None
        if _AEAD in header["codecs"]:
            aead = AESGCM(key.aead_key)
            prefix = bytes.fromhex(header["nonce_prefix"])
            header_sha = hashlib.sha256(header_bytes).digest()
        try:
            for i, (chunk, last) in enumerate(chunks):
                if aead is not None:
                    chunk = aead.decrypt(
                        prefix + struct.pack("<I", i), chunk, _aad(header_sha, i, last)
                    )
                out += decompressor.decompress(chunk)
                del chunk
        except InvalidTag:
            raise TamperedSnapshot(f"{path}: a body chunk fails authentication") from None
        except zstandard.ZstdError as exc:
            raise CorruptSnapshot(f"the body of {path} does not decompress ({exc})") from None
    if not hmac.compare_digest(mac.digest(), verified):
        raise TamperedSnapshot(f"{path} changed while it was being read; refusing it")
    return header, out, verified.hex()


_PIECE = 1 << 20  # how much decompressed body one piece holds at most


@contextlib.contextmanager
def open_verified(
    path: str, keys: KeyRing, *, require_encryption: bool = False
) -> Iterator[tuple[dict[str, Any], StreamReader, str]]:
    """(header, body, digest) of a verified file, its body a stream decoded piece by
    piece (at most one chunk and one piece in memory). The whole file is verified
    first, as by verify(); reading the body to its end (body.rest()) recomputes the
    MAC over the same open file descriptor and raises TamperedSnapshot if it differs.
    For the inert decoder only (see the module's docstring)."""
    with _open(path) as f:
        header, header_bytes, key, body_start, verified = _verify_open(
            f, path, keys, require_encryption
        )
        f.seek(body_start)
        body = StreamReader(_decoded(f, path, header, header_bytes, key, verified))
        try:
            yield header, body, verified.hex()
        finally:
            body.close()


def _decoded(
    f: BinaryIO,
    path: str,
    header: dict[str, Any],
    header_bytes: bytes,
    key: Key,
    verified: bytes,
) -> Iterator[bytes]:
    """The body's pickle bytes, piece by piece; TamperedSnapshot at the end if the
    recomputed MAC is not the verified one."""
    mac = hmac.new(key.mac_key, header_bytes, hashlib.sha256)
    chunks = _body_chunks(_Reader(f, path), _chunk_limit(header, path), (mac,))
    aead = AESGCM(key.aead_key) if _AEAD in header["codecs"] else None
    prefix = bytes.fromhex(header["nonce_prefix"]) if aead is not None else b""
    header_sha = hashlib.sha256(header_bytes).digest()

    def opened() -> Iterator[bytes]:
        for i, (chunk, last) in enumerate(chunks):
            if aead is not None:
                chunk = aead.decrypt(
                    prefix + struct.pack("<I", i), chunk, _aad(header_sha, i, last)
                )
            yield chunk

    compressed = StreamReader(opened())
    try:
        with zstandard.ZstdDecompressor().stream_reader(
            cast("IO[bytes]", compressed),  # (it reads through read() only)
            read_size=CHUNK_SIZE,
            closefd=False,
        ) as stream:
            while piece := stream.read(_PIECE):
                yield piece
        compressed.rest()  # the end marker: the MAC has seen the whole body
    except InvalidTag:
        raise TamperedSnapshot(f"{path}: a body chunk fails authentication") from None
    except zstandard.ZstdError as exc:
        raise CorruptSnapshot(f"the body of {path} does not decompress ({exc})") from None
    if not hmac.compare_digest(mac.digest(), verified):
        raise TamperedSnapshot(f"{path} changed while it was being read; refusing it")
