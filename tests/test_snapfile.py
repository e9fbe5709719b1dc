"""The snapshot file format v2 (serializers/_snapfile.py): write/read round trip
(plaintext and encrypted, one chunk or many), the byte layout, the atomic writer
(serializers/_fs.py), and that every damaged file (bad magic, foreign format version,
truncation at any byte, trailing bytes, any flipped byte, a body that is not zstd or
not a pickle, a header that is not a snapshot header) is refused with a CorruptSnapshot
or SnapshotRejected naming the file, in-process and through snaprun (exit 2, one
`snaprun: error:` message, no traceback, nothing on stdout, nothing changed)."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shutil
import stat
import struct

import pytest
import xxhash
from chunked import export_file, manifest, set_manifest, snapshot_seqs
from helpers import AGENTS, snaprun
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from snapstate._errors import (
    CorruptSnapshot,
    HeaderMismatch,
    SnapshotRejected,
    TamperedSnapshot,
    TruncatedSnapshot,
)
from snapstate.serializers import _fs, _keys, _snapfile

HYPOTHESIS = settings(
    max_examples=100,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)

_FIXED = struct.Struct("<HI")
_LEN = struct.Struct("<I")
_MAGIC_LEN = len(_snapfile.MAGIC)
_TRAILER = 64
_ADDED = ("key_id", "chunk_size", "codecs", "nonce_prefix")  # what write() adds
NO_ENV_KEY = {"SNAPSTATE_KEY": ""}


@pytest.fixture(autouse=True)
def _no_inherited_env_key(monkeypatch):
    """In-process key rings must use their store's keys.json, not an inherited key."""
    monkeypatch.delenv("SNAPSTATE_KEY", raising=False)


@pytest.fixture(scope="module")
def real_store(tmp_path_factory):
    """A store holding a real job's snapshots (tests/agents/loops.py run by snaprun and
    killed right after its last snapshot: resumable, as a done job never resumes)."""
    root = tmp_path_factory.mktemp("snapfile")
    store = root / "store"
    run = snaprun(
        "run",
        "--store",
        store,
        "--job",
        "job",
        AGENTS / "loops.py",
        cwd=root,
        env=NO_ENV_KEY,
        fault="after-snapshot:6",
    )
    assert run.returncode == -9, run.stderr
    assert snapshot_seqs(store, "job") == [1, 2, 3, 4, 5, 6]
    return store


@pytest.fixture(scope="module")
def real(real_store):
    """The job's 6 snapshots as snapshot files (format 2), exported from the store (a
    job's snapshots are chunked in the store; a file is what export writes)."""
    folder = real_store.parent / "exported"
    folder.mkdir()
    return [
        export_file(real_store, "job", seq, folder / f"{seq:06d}-e1.snap")
        for seq in snapshot_seqs(real_store, "job")
    ]


@pytest.fixture(scope="module")
def real_bytes(real):
    return real[1].read_bytes()


@pytest.fixture(scope="module")
def keys(real_store):
    """The real store's key ring."""
    return _keys.KeyRing(str(real_store))


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """One file path reused by the many in-process corruption checks."""
    return tmp_path_factory.mktemp("scratch") / "damaged.snap"


def _layout(data: bytes) -> dict:
    """Offsets of the parts of a v2 file: header start/end, each body chunk as
    (length field, data start, data end), the zero end marker, the trailer."""
    _, head_len = _FIXED.unpack_from(data, _MAGIC_LEN)
    head_start = _MAGIC_LEN + _FIXED.size
    head_end = head_start + head_len
    pos, chunks = head_end, []
    while True:
        (length,) = _LEN.unpack_from(data, pos)
        if length == 0:
            break
        chunks.append((pos, pos + _LEN.size, pos + _LEN.size + length))
        pos += _LEN.size + length
    return {
        "head_start": head_start,
        "head_end": head_end,
        "chunks": chunks,
        "end_marker": pos,
        "trailer": pos + _LEN.size,
    }


def _assert_refused(
    path, data: bytes, keys, *, expect: str | None = None, cls: type | None = None
) -> Exception:
    """`data` written to `path` is refused by read_payload with a CorruptSnapshot or
    SnapshotRejected (exactly `cls` if given) naming the path."""
    path.write_bytes(data)
    with pytest.raises((CorruptSnapshot, SnapshotRejected)) as info:
        _snapfile.read_payload(str(path), keys)
    assert str(path) in str(info.value)
    if cls is not None:
        assert type(info.value) is cls, f"{type(info.value).__name__}: {info.value}"
    if expect is not None:
        assert expect in str(info.value)
    return info.value


def _rebuilt(data: bytes, *, version: int | None = None, magic: bytes | None = None) -> bytes:
    """A real file with its magic or format version field replaced (the signature
    covers neither: they are checked before it)."""
    out = bytearray(data)
    if magic is not None:
        out[:_MAGIC_LEN] = magic
    if version is not None:
        struct.pack_into("<H", out, _MAGIC_LEN, version)
    return bytes(out)


# ------------------------------------------------------------------ round trip
@pytest.mark.smoke
@pytest.mark.parametrize("encrypt", [False, True], ids=["plaintext", "encrypted"])
def test_write_read_roundtrip(tmp_path, encrypt):
    """write() then read_payload() gives back the header (plus the key id, chunk size
    and codecs write() adds, and a nonce prefix when encrypted) and the exact payload;
    verify() and peek_header() give the same header."""
    ring = _keys.KeyRing(str(tmp_path / "keys"))
    header = {"job_id": "j", "seq": 4, "label": None, "nested": {"a": [1, 2.5, "é"]}}
    payload = bytes(range(256)) * 3
    path = tmp_path / "x.snap"
    size = _snapfile.write(str(path), header, payload, ring, encrypt=encrypt)
    assert size == path.stat().st_size
    got_header, got_payload = _snapfile.read_payload(str(path), ring)
    codecs = ["pickle-5", "zstd"] + (["aes-256-gcm"] if encrypt else [])
    expected = dict(
        header, key_id=ring.current.key_id, chunk_size=_snapfile.CHUNK_SIZE, codecs=codecs
    )
    if encrypt:
        assert len(bytes.fromhex(got_header["nonce_prefix"])) == 8
        expected["nonce_prefix"] = got_header["nonce_prefix"]
    assert got_header == expected
    assert got_payload == payload
    assert _snapfile.verify(str(path), ring) == got_header
    assert _snapfile.peek_header(str(path)) == got_header


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@HYPOTHESIS
@given(
    header=st.dictionaries(
        st.text(max_size=12).filter(lambda k: k not in _ADDED), json_values, max_size=6
    ),
    payload=st.binary(max_size=2048),
    encrypt=st.booleans(),
)
def test_roundtrip_any(scratch, header, payload, encrypt):
    """Any JSON header and any payload bytes (empty included) survive write() ->
    file -> read_payload(), plaintext or encrypted."""
    ring = _keys.KeyRing(str(scratch.parent / "keys"))
    _snapfile.write(str(scratch), header, payload, ring, encrypt=encrypt)
    got_header, got_payload = _snapfile.read_payload(str(scratch), ring)
    assert {k: v for k, v in got_header.items() if k not in _ADDED} == header
    assert got_payload == payload


@pytest.mark.parametrize("encrypt", [False, True], ids=["plaintext", "encrypted"])
def test_large_payload_is_streamed_in_chunks(tmp_path, encrypt):
    """A 3.5 MiB incompressible payload is written as several body chunks of at most
    CHUNK_SIZE bytes (plus the 16-byte tag when encrypted) and reads back exactly."""
    ring = _keys.KeyRing(str(tmp_path / "keys"))
    payload = os.urandom(3 * _snapfile.CHUNK_SIZE + _snapfile.CHUNK_SIZE // 2)
    path = tmp_path / "big.snap"
    _snapfile.write(str(path), {"job_id": "big"}, payload, ring, encrypt=encrypt)
    chunks = _layout(path.read_bytes())["chunks"]
    assert len(chunks) >= 4
    limit = _snapfile.CHUNK_SIZE + (16 if encrypt else 0)
    assert all(end - start <= limit for _, start, end in chunks)
    assert _snapfile.read_payload(str(path), ring)[1] == payload


def test_layout(real_bytes, keys):
    """A real snapshot: the magic, format version 2, the header length and the body
    chunk lengths account for every byte up to the zero end marker and the 64-byte
    trailer, which is xxh3-128 of the header, xxh3-128 of the body (length fields and
    end marker included) and HMAC-SHA256 over header and body with the key named in
    the header."""
    assert real_bytes.startswith(b"SNAPSTATE\0")
    version, _ = _FIXED.unpack_from(real_bytes, _MAGIC_LEN)
    assert version == _snapfile.FORMAT_VERSION == 2
    parts = _layout(real_bytes)
    assert parts["trailer"] + _TRAILER == len(real_bytes)
    header_bytes = real_bytes[parts["head_start"] : parts["head_end"]]
    body = real_bytes[parts["head_end"] : parts["trailer"]]
    header = json.loads(header_bytes)
    assert header["codecs"] == ["pickle-5", "zstd"]
    assert header["chunk_size"] == _snapfile.CHUNK_SIZE
    trailer = real_bytes[parts["trailer"] :]
    assert trailer[:16] == xxhash.xxh3_128_digest(header_bytes)
    assert trailer[16:32] == xxhash.xxh3_128_digest(body)
    mac_key = keys.get(header["key_id"]).mac_key
    assert trailer[32:] == hmac.new(mac_key, header_bytes + body, hashlib.sha256).digest()


def test_read_real_snapshot(real, keys):
    """A snapshot written by snaprun reads back with its job, sequence, label and entry,
    and its payload is a protocol-5 pickle larger than the compressed body."""
    header, payload = _snapfile.read_payload(str(real[1]), keys)
    assert header["job_id"] == "job"
    assert header["seq"] == 2
    assert header["label"] == "while-4"
    assert header["entry"]["module"] == "loops"
    assert payload[:2] == b"\x80\x05"
    data = real[1].read_bytes()
    body = sum(end - start for _, start, end in _layout(data)["chunks"])
    assert len(payload) > body


# ------------------------------------------------------------------ atomic writes
def test_write_atomic_new_file(tmp_path):
    """write_atomic writes the whole file (from chunks) with mode 0600, returns its size
    and leaves no temp file."""
    path = tmp_path / "000001.snap"
    data = os.urandom(100_000)
    assert _fs.write_atomic(str(path), [data[:30_000], data[30_000:]]) == len(data)
    assert path.read_bytes() == data
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["000001.snap"]


def test_snapfile_write_is_atomic_and_private(tmp_path):
    """_snapfile.write replaces an existing world-readable file whole (new inode, mode
    0600) and leaves only the snapshot in the directory."""
    ring = _keys.KeyRing(str(tmp_path / "keys"))
    folder = tmp_path / "job"
    folder.mkdir()
    path = folder / "000001-e1.snap"
    path.write_bytes(b"old contents")
    path.chmod(0o644)
    old_inode = path.stat().st_ino
    _snapfile.write(str(path), {"job_id": "j"}, b"payload", ring)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.stat().st_ino != old_inode
    assert _snapfile.read_payload(str(path), ring)[1] == b"payload"
    assert sorted(p.name for p in folder.iterdir()) == ["000001-e1.snap"]


def test_write_atomic_replaces_existing(tmp_path):
    """Writing over an existing file replaces it whole (new inode, mode 0600, even if
    the old file was world-readable) and leaves no temp file."""
    path = tmp_path / "000001.snap"
    path.write_bytes(b"old contents")
    path.chmod(0o644)
    old_inode = path.stat().st_ino
    _fs.write_atomic(str(path), [b"new contents"])
    assert path.read_bytes() == b"new contents"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.stat().st_ino != old_inode
    assert sorted(p.name for p in tmp_path.iterdir()) == ["000001.snap"]


def test_write_atomic_failed_write_keeps_old_file(tmp_path):
    """A write that fails midway (the chunk source raises after a first chunk) leaves
    the previous file intact and no temp file."""
    path = tmp_path / "000001.snap"
    path.write_bytes(b"previous snapshot")

    def chunks():
        yield b"half of a new snapshot"
        raise RuntimeError("the pickler failed")

    with pytest.raises(RuntimeError):
        _fs.write_atomic(str(path), chunks())
    assert path.read_bytes() == b"previous snapshot"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["000001.snap"]


def test_write_atomic_failed_rename_leaves_no_temp(tmp_path):
    """When the final rename fails (a directory is in the way), write_atomic raises and
    removes its temp file instead of leaving it in the store."""
    target = tmp_path / "000001.snap"
    (target / "inner").mkdir(parents=True)
    with pytest.raises(OSError):
        _fs.write_atomic(str(target), [b"data"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["000001.snap"]
    assert target.is_dir()


# ------------------------------------------------------------------ damaged files
@pytest.mark.parametrize(
    "data,cls",
    [
        (b"", TruncatedSnapshot),
        (b"S", TruncatedSnapshot),
        (b"SNAPSTATE", TruncatedSnapshot),
        (b"hello world\n" * 10, CorruptSnapshot),
        (b"\x80\x05\x95pickle", CorruptSnapshot),
        (b"snapstate\0" + b"\0" * 40, CorruptSnapshot),
    ],
    ids=["empty", "one-byte", "magic-prefix", "text", "pickle", "lowercase-magic"],
)
def test_bad_magic(scratch, keys, data, cls):
    """A file that does not start with the magic is refused, naming the path: as
    truncated when it is a prefix of the magic, else as not a snapshot (bad magic)."""
    exc = _assert_refused(scratch, data, keys, cls=cls)
    if cls is CorruptSnapshot:
        assert "bad magic" in str(exc)


def test_bad_magic_on_real_snapshot(scratch, real_bytes, keys):
    """A real snapshot with its magic changed is refused as bad magic."""
    _assert_refused(
        scratch,
        _rebuilt(real_bytes, magic=b"SNAPSTATX\0"),
        keys,
        expect="bad magic",
        cls=CorruptSnapshot,
    )


@pytest.mark.parametrize("version", [0, 1, 3, 7, 0xFFFF])
def test_foreign_format_version(scratch, real_bytes, keys, version):
    """A well-formed file of another format version (1 is the previous format) is
    refused, naming the path, its format and the supported one."""
    exc = _assert_refused(scratch, _rebuilt(real_bytes, version=version), keys, cls=CorruptSnapshot)
    assert f"format {version}" in str(exc)
    assert f"format {_snapfile.FORMAT_VERSION}" in str(exc)


def test_truncated_at_every_length(scratch, real_bytes, keys):
    """The snapshot cut at every length from 0 to size-1 bytes (inside the magic, the
    fixed fields, the header, a chunk length, a chunk, the end marker and the trailer)
    is refused as TruncatedSnapshot naming the path."""
    for size in range(len(real_bytes)):
        _assert_refused(scratch, real_bytes[:size], keys, expect="truncated", cls=TruncatedSnapshot)


@pytest.mark.parametrize(
    "extra", [b"\0", b"x" * 16, b"SNAPSTATE\0"], ids=["one-byte", "sixteen", "magic"]
)
def test_trailing_bytes(scratch, real_bytes, keys, extra):
    """Bytes appended after the trailer make the file refused, naming the path."""
    _assert_refused(
        scratch, real_bytes + extra, keys, expect="after its trailer", cls=CorruptSnapshot
    )


def test_two_files_concatenated(scratch, real, keys):
    """Two snapshots glued together are not read as the first one."""
    _assert_refused(scratch, real[0].read_bytes() + real[1].read_bytes(), keys)


def test_every_byte_flipped(scratch, real_bytes, keys):
    """Inverting any single byte of a real snapshot (every position: magic, fixed
    fields, header, chunk lengths, body, end marker, all three trailer fields) makes it
    refused, naming the path."""
    accepted = []
    for pos in range(len(real_bytes)):
        data = bytearray(real_bytes)
        data[pos] ^= 0xFF
        scratch.write_bytes(bytes(data))
        try:
            _snapfile.read_payload(str(scratch), keys)
        except (CorruptSnapshot, SnapshotRejected) as exc:
            assert str(scratch) in str(exc)
        else:
            accepted.append(pos)
    assert accepted == [], (
        f"flipped bytes accepted at {accepted} (trailer starts at "
        f"{_layout(real_bytes)['trailer']} of {len(real_bytes)})"
    )


@HYPOTHESIS
@given(st.data())
def test_flipped_bytes_anywhere(scratch, real_bytes, keys, data):
    """Any 1-4 damaged bytes anywhere in a real snapshot make it refused (CorruptSnapshot
    or SnapshotRejected naming the path, never another exception)."""
    positions = data.draw(
        st.lists(st.integers(0, len(real_bytes) - 1), min_size=1, max_size=4, unique=True)
    )
    damaged = bytearray(real_bytes)
    for pos in positions:
        damaged[pos] ^= data.draw(st.integers(1, 255))
    _assert_refused(scratch, bytes(damaged), keys)


def test_damaged_body_with_matching_lengths(scratch, real_bytes, keys):
    """A body byte changed without touching any length field is caught by the body
    checksum: CorruptSnapshot (not a signature or header error), naming the path."""
    _, start, end = _layout(real_bytes)["chunks"][0]
    data = bytearray(real_bytes)
    data[(start + end) // 2] ^= 0x10
    _assert_refused(scratch, bytes(data), keys, expect="checksum", cls=CorruptSnapshot)


def test_edited_header_value(scratch, real_bytes, keys):
    """A header value edited in place (the label, same length, valid JSON) is refused as
    a header that does not belong to the body: HeaderMismatch naming the path."""
    assert real_bytes.count(b'"while-4"') == 1
    data = real_bytes.replace(b'"while-4"', b'"while-5"')
    _assert_refused(scratch, data, keys, expect="header", cls=HeaderMismatch)


def test_resigned_mac_with_wrong_key_is_tampered(scratch, real_bytes, keys):
    """Header and body intact, HMAC computed with another key of the same id (the
    checksums match): TamperedSnapshot naming the path."""
    parts = _layout(real_bytes)
    signed = real_bytes[parts["head_start"] : parts["trailer"]]
    forged = hmac.new(os.urandom(32), signed, hashlib.sha256).digest()
    _assert_refused(
        scratch, real_bytes[:-32] + forged, keys, expect="signature", cls=TamperedSnapshot
    )


def test_missing_file_and_directory(tmp_path, keys):
    """A path with no file, and a directory, are refused with CorruptSnapshot naming the
    path."""
    for path in (tmp_path / "nope.snap", tmp_path):
        with pytest.raises(CorruptSnapshot) as info:
            _snapfile.read_payload(str(path), keys)
        assert str(path) in str(info.value)


# ------------------------------------------------------------------ through snaprun
@pytest.fixture
def store_copy(real_store, tmp_path):
    """A private copy of the real store (catalog, keys, snapshot files)."""
    store = tmp_path / "store"
    shutil.copytree(real_store, store)
    return store


def _store_of(path):
    """The store a test file belongs to: the store it lies in (<store>/snapshots/<job>/),
    or the store beside its folder (<tmp>/files/ beside <tmp>/store)."""
    if path.parent.parent.name == "snapshots":
        return path.parents[2]
    return path.parent.parent / "store"


def _cli_refuses(path, cwd, *command, needle: str | None = None):
    """`snaprun COMMAND... --store STORE PATH` (default: resume; STORE the store the file
    belongs to, since a file never chooses its store) refuses: exit 2, one snaprun error
    naming PATH on stderr, no traceback, nothing on stdout, the file and its folder
    unchanged, and the store's catalog unchanged."""
    command = command or ("resume",)
    store = _store_of(path)
    before = path.read_bytes()
    listing = sorted(os.listdir(path.parent))
    catalog = _catalog_dump(store)
    run = snaprun(*command, "--store", store, path, cwd=cwd, env=NO_ENV_KEY)
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    assert run.stdout == ""
    errors = [line for line in run.stderr.splitlines() if line.startswith("snaprun: error:")]
    assert len(errors) == 1, run.stderr
    assert str(path) in errors[0], run.stderr
    if needle is not None:
        assert needle in errors[0], run.stderr
    assert path.read_bytes() == before
    assert sorted(os.listdir(path.parent)) == listing
    assert _catalog_dump(store) == catalog
    return run


def _catalog_dump(store) -> list[str]:
    """The store's catalog as SQL (rows of every table)."""
    import sqlite3
    from contextlib import closing

    with closing(sqlite3.connect(f"file:{store / 'catalog.db'}?mode=ro", uri=True)) as db:
        return list(db.iterdump())


def _damaged(store, data: bytes, name: str = "000002-e1.snap"):
    """`data` written to a snapshot file `name` of job "job" (an export of the store
    copy's snapshot, in <tmp>/files beside the store)."""
    path = store.parent / "files" / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    return path


def _cut_points(data: bytes) -> dict[str, int]:
    parts = _layout(data)
    first_len, first_start, first_end = parts["chunks"][0]
    return {
        "in-magic": 4,
        "in-fixed-fields": _MAGIC_LEN + 3,
        "in-header": (parts["head_start"] + parts["head_end"]) // 2,
        "in-chunk-length": first_len + 2,
        "in-body": (first_start + first_end) // 2,
        "before-end-marker": parts["end_marker"],
        "in-end-marker": parts["end_marker"] + 2,
        "in-trailer": parts["trailer"] + 20,
        "last-byte": len(data) - 1,
    }


@pytest.mark.parametrize(
    "where",
    [
        "in-magic",
        "in-fixed-fields",
        "in-header",
        "in-chunk-length",
        "in-body",
        "before-end-marker",
        "in-end-marker",
        "in-trailer",
        "last-byte",
    ],
)
def test_cli_resume_truncated(real_bytes, store_copy, tmp_path, where):
    """`snaprun resume` of a truncated real snapshot exits 2 with a clean error saying
    it is truncated."""
    path = _damaged(store_copy, real_bytes[: _cut_points(real_bytes)[where]])
    _cli_refuses(path, tmp_path, needle="truncated")


@pytest.mark.parametrize(
    "where",
    [
        "magic",
        "version",
        "header-length",
        "header",
        "chunk-length",
        "body",
        "end-marker",
        "header-digest",
        "body-digest",
        "mac",
    ],
)
def test_cli_resume_flipped_byte(real_bytes, store_copy, tmp_path, where):
    """`snaprun resume` of a real snapshot with one damaged byte, in any part of the
    file, exits 2 cleanly."""
    parts = _layout(real_bytes)
    first_len, first_start, first_end = parts["chunks"][0]
    pos = {
        "magic": 0,
        "version": _MAGIC_LEN,
        "header-length": _MAGIC_LEN + 2,
        "header": (parts["head_start"] + parts["head_end"]) // 2,
        "chunk-length": first_len,
        "body": (first_start + first_end) // 2,
        "end-marker": parts["end_marker"],
        "header-digest": parts["trailer"] + 5,
        "body-digest": parts["trailer"] + 21,
        "mac": len(real_bytes) - 1,
    }[where]
    data = bytearray(real_bytes)
    data[pos] ^= 0x01
    _cli_refuses(_damaged(store_copy, bytes(data)), tmp_path)


def test_cli_resume_trailing_bytes(real_bytes, store_copy, tmp_path):
    """`snaprun resume` of a snapshot with bytes appended exits 2 cleanly."""
    _cli_refuses(_damaged(store_copy, real_bytes + b"\n"), tmp_path, needle="after its trailer")


def test_cli_resume_not_a_snapshot(store_copy, tmp_path):
    """`snaprun resume` of an empty file and of a text file exits 2 cleanly."""
    _cli_refuses(_damaged(store_copy, b"", "000001-e1.snap"), tmp_path)
    _cli_refuses(_damaged(store_copy, b"not a snapshot\n"), tmp_path, needle="bad magic")


@pytest.mark.parametrize("version", [1, 3])
def test_cli_resume_foreign_format(real_bytes, store_copy, tmp_path, version):
    """`snaprun resume` of a well-formed snapshot of another format version (1: the
    previous format) exits 2, naming both formats."""
    path = _damaged(store_copy, _rebuilt(real_bytes, version=version))
    _cli_refuses(path, tmp_path, needle=f"format {version}")


def test_cli_resume_missing_file(tmp_path):
    """`snaprun resume` of a path with no file exits 2 cleanly, naming the path."""
    path = tmp_path / "000009-e1.snap"
    run = snaprun("resume", path, cwd=tmp_path, env=NO_ENV_KEY)
    assert run.returncode == 2
    assert run.stdout == ""
    assert "Traceback" not in run.stderr
    assert "000009-e1.snap" in run.stderr


def _signed(store, header: dict | list | str, chunks: list[bytes]) -> bytes:
    """A file with this exact header JSON and these body chunks, validly signed with
    the store's current key by the production signer (_snapfile._file_bytes)."""
    ring = _keys.KeyRing(str(store))
    if isinstance(header, dict):
        header = dict(
            header,
            key_id=ring.current.key_id,
            chunk_size=_snapfile.CHUNK_SIZE,
            codecs=["pickle-5", "zstd"],
        )
    head = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    return b"".join(_snapfile._file_bytes(head, iter(chunks), ring.current.mac_key))


def _real_header(real_bytes: bytes) -> dict:
    parts = _layout(real_bytes)
    header = json.loads(real_bytes[parts["head_start"] : parts["head_end"]])
    return {k: v for k, v in header.items() if k not in _ADDED}


def _import_and_refuse(store, path, cwd, needle: str) -> None:
    """`resume --as imported PATH` (the store holds job "job" already) copies the signed
    file into the store as job "imported"'s snapshot file and refuses it; then `resume
    imported` refuses that file row: exit 2, one error naming the store's copy, nothing
    on stdout, no traceback, the copy, its folder and the job's snapshot rows unchanged
    (the resume took the job's lease: that much of the catalog changes)."""
    copy = store / "snapshots" / "imported" / "000002-e0.snap"
    first = snaprun("resume", "--store", store, "--as", "imported", path, cwd=cwd, env=NO_ENV_KEY)
    assert first.returncode == 2, first.stderr
    assert "Traceback" not in first.stderr and first.stdout == ""
    assert needle in first.stderr and str(copy) in first.stderr, first.stderr
    before, listing = copy.read_bytes(), sorted(os.listdir(copy.parent))
    assert snapshot_seqs(store, "imported") == [2]
    run = snaprun("resume", "--store", store, "imported", cwd=cwd, env=NO_ENV_KEY)
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr and run.stdout == ""
    errors = [line for line in run.stderr.splitlines() if line.startswith("snaprun: error:")]
    assert len(errors) == 1, run.stderr
    assert str(copy) in errors[0] and needle in errors[0], run.stderr
    assert copy.read_bytes() == before and sorted(os.listdir(copy.parent)) == listing
    assert snapshot_seqs(store, "imported") == [2]


def test_cli_resume_body_not_zstd(real_bytes, store_copy, tmp_path):
    """A validly signed snapshot whose body is not zstd data is refused with exit 2 and
    an error naming the file."""
    data = _signed(store_copy, _real_header(real_bytes), [b"definitely not zstd"])
    _import_and_refuse(store_copy, _damaged(store_copy, data), tmp_path, needle="decompress")


def test_cli_resume_body_not_a_pickle(real_bytes, store_copy, tmp_path):
    """A validly signed snapshot whose body decompresses to something that is not a
    snapstate pickle is refused with exit 2 and a clean error, not a traceback."""
    path = _damaged(store_copy, b"")
    _snapfile.write(str(path), _real_header(real_bytes), b"garbage", _keys.KeyRing(str(store_copy)))
    _import_and_refuse(store_copy, path, tmp_path, needle="could not be unpickled")


@pytest.mark.parametrize(
    "header,command",
    [
        ({"job_id": "ghost"}, ("resume",)),
        ({"job_id": "ghost"}, ("resume", "--as", "imported")),
        ({"job_id": "ghost"}, ("inspect",)),
        ({"job_id": "ghost"}, ("verify",)),
        ([1, 2, 3], ("resume",)),
        ("text", ("resume",)),
    ],
    ids=[
        "missing-keys-resume",
        "missing-keys-resume-as",
        "missing-keys-inspect",
        "missing-keys-verify",
        "list-resume",
        "string-resume",
    ],
)
def test_cli_header_not_a_snapshot_header(store_copy, tmp_path, header, command):
    """A validly signed file whose JSON header is not a snapshot header (an object
    missing the snapshot fields, or not an object) is refused by resume, resume --as,
    inspect and verify with exit 2 and a clean error naming the file, not a traceback.
    (The file lies outside the job's catalog rows, so resume imports it.)"""
    path = store_copy / "snapshots" / "other" / "000002-e1.snap"
    path.parent.mkdir()
    path.write_bytes(_signed(store_copy, header, [b"x"]))
    _cli_refuses(path, tmp_path, *command)


def test_cli_refusal_leaves_other_snapshots_resumable(real, store_copy, tmp_path):
    """After a damaged snapshot file is refused, an intact earlier snapshot file of the
    same job still resumes and the job finishes."""
    good = store_copy.parent / "files" / real[0].name
    good.parent.mkdir(exist_ok=True)
    shutil.copyfile(real[0], good)
    bad = _damaged(store_copy, real[1].read_bytes()[: len(real[1].read_bytes()) // 2])
    _cli_refuses(bad, tmp_path)
    _cli_refuses(bad, tmp_path, "resume", "--as", "again")
    run = snaprun(
        "resume", "--store", store_copy, "--as", "again", good, cwd=tmp_path, env=NO_ENV_KEY
    )
    assert run.returncode == 0, run.stderr
    assert "resumed from snapshot 1" in run.stderr
    assert run.result == "13"


def test_cli_resume_at_damaged_snapshot_drops_nothing(tmp_path):
    """`snaprun resume JOB --at 2` of a killed job whose snapshot 2 is damaged (its
    manifest truncated by a byte) exits 2 cleanly and drops nothing: its later
    snapshots 3 and 4 are still there (rows and manifests, no "rewound" event), so the
    job then resumes from snapshot 4."""
    store = tmp_path / "store"
    killed = snaprun(
        "run",
        "--store",
        store,
        "--job",
        "job",
        AGENTS / "loops.py",
        cwd=tmp_path,
        fault="after-snapshot:4",
        env=NO_ENV_KEY,
    )
    assert killed.returncode == -9, killed.stderr
    assert snapshot_seqs(store, "job") == [1, 2, 3, 4]
    set_manifest(store, "job", 2, manifest(store, "job", 2)[:-1])
    manifests = [manifest(store, "job", seq) for seq in (1, 2, 3, 4)]
    run = snaprun("resume", "--store", store, "--at", "2", "job", cwd=tmp_path, env=NO_ENV_KEY)
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr and run.stdout == ""
    assert "snapshot 2 of job job" in run.stderr and "manifest is damaged" in run.stderr
    assert snapshot_seqs(store, "job") == [1, 2, 3, 4]
    assert [manifest(store, "job", seq) for seq in (1, 2, 3, 4)] == manifests
    log = json.loads(
        snaprun("log", "--store", store, "--json", "job", cwd=tmp_path, env=NO_ENV_KEY).stdout
    )
    assert not [e for e in log if e["kind"] == "rewound"], log
    run = snaprun("resume", "--store", store, "job", cwd=tmp_path, env=NO_ENV_KEY)
    assert "resumed from snapshot 4" in run.stderr, run.stderr
    assert run.returncode == 0 and run.result == "13"
