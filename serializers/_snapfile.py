"""The snapshot file: a header anyone can read without unpickling, then the body.

    magic        b"SNAPSTATE\\0"
    version      u16 (FORMAT_VERSION)
    header       u32 length + UTF-8 JSON (job id, sequence, created-at, Python and
                 library versions, code identities, codec names, ...)
    body         u64 length + the codec'd pickle (zstd)
    checksum     xxh3-128 of everything before it

Written atomically: temp file in the same directory, write, fsync, rename, fsync the
directory. A failed fsync is fatal and never retried (the kernel may have dropped
the dirty pages: a retry could "succeed" over lost data). A crash at any byte leaves
the previous file readable and no partial file under the final name.
"""

from __future__ import annotations

import json
import os
import struct

import xxhash
import zstandard

from ..runtime._errors import CorruptSnapshot

__all__ = ["FORMAT_VERSION", "MAGIC", "encode", "decode_header", "read", "write_atomic",
           "compress", "decompress"]

MAGIC = b"SNAPSTATE\0"
FORMAT_VERSION = 1
_FIXED = struct.Struct("<HI")       # version, header length
_BODY_LEN = struct.Struct("<Q")
_DIGEST = 16
CODEC = "zstd"


def compress(data: bytes, level: int = 1) -> bytes:
    return zstandard.ZstdCompressor(level=level).compress(data)


def decompress(data: bytes, where: str = "the snapshot") -> bytes:
    try:
        return zstandard.ZstdDecompressor().decompress(data)
    except zstandard.ZstdError as exc:
        raise CorruptSnapshot(f"the body of {where} does not decompress ({exc}); resume from "
                              "an earlier snapshot of the job") from None


def encode(header: dict, body: bytes) -> bytes:
    header = dict(header, codec=CODEC)
    head = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    out = bytearray(MAGIC)
    out += _FIXED.pack(FORMAT_VERSION, len(head)) + head + _BODY_LEN.pack(len(body)) + body
    out += xxhash.xxh3_128_digest(bytes(out))
    return bytes(out)


def _parse(data: bytes, name: str) -> tuple[dict, int, int]:
    if not data.startswith(MAGIC):
        raise CorruptSnapshot(f"{name} is not a snapstate snapshot (bad magic)")
    pos = len(MAGIC)
    if len(data) < pos + _FIXED.size:
        raise CorruptSnapshot(f"{name} is truncated ({len(data)} bytes)")
    version, head_len = _FIXED.unpack_from(data, pos)
    if version != FORMAT_VERSION:
        raise CorruptSnapshot(
            f"{name} uses snapshot format {version}; this snapstate reads format "
            f"{FORMAT_VERSION}. Resume it with the snapstate release that wrote it.")
    pos += _FIXED.size
    if len(data) < pos + head_len + _BODY_LEN.size:
        raise CorruptSnapshot(f"{name} is truncated inside its header")
    try:
        header = json.loads(data[pos:pos + head_len])
    except ValueError:
        header = None
    if not isinstance(header, dict):
        raise CorruptSnapshot(f"{name} has a damaged header")
    pos += head_len
    (body_len,) = _BODY_LEN.unpack_from(data, pos)
    pos += _BODY_LEN.size
    if len(data) != pos + body_len + _DIGEST:
        raise CorruptSnapshot(
            f"{name} is truncated or has trailing bytes ({len(data)} bytes, expected "
            f"{pos + body_len + _DIGEST})")
    return header, pos, body_len


def read(path: str) -> tuple[dict, bytes]:
    """(header, compressed body) of a snapshot file, after checking its checksum.
    Nothing is unpickled here."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise CorruptSnapshot(f"no snapshot file at {path}") from None
    header, pos, body_len = _parse(data, path)
    if xxhash.xxh3_128_digest(data[:-_DIGEST]) != data[-_DIGEST:]:
        raise CorruptSnapshot(f"{path} is damaged: its checksum does not match. Resume from "
                              "an earlier snapshot of the job.")
    return header, data[pos:pos + body_len]


def decode_header(path: str) -> dict:
    return read(path)[0]


def write_atomic(path: str, data: bytes) -> None:
    """Write `data` to `path` so that the file is either the old one or the whole new
    one, durably, whatever happens."""
    directory = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
