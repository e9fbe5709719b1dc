"""The snapshot file format (serializers/_snapfile.py): encode/read round trip, the
atomic writer, and that every damaged file (bad magic, foreign format version,
truncation at any byte, trailing bytes, any flipped byte) is refused with a
CorruptSnapshot naming the file, in-process and through `snaprun resume` (exit 2, one
`snaprun: error:` message, no traceback, nothing on stdout, nothing written)."""

from __future__ import annotations

import json
import os
import stat
import struct

import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import AGENTS, snaprun, snapshot_files
from snapstate import CorruptSnapshot
from snapstate.serializers import _snapfile

HYPOTHESIS = settings(max_examples=150, deadline=None, database=None,
                      suppress_health_check=[HealthCheck.function_scoped_fixture])

_FIXED = struct.Struct("<HI")
_MAGIC_LEN = len(_snapfile.MAGIC)


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """A real job's snapshots (tests/agents/loops.py run to completion by snaprun)."""
    root = tmp_path_factory.mktemp("snapfile")
    store = root / "store"
    run = snaprun("run", "--store", store, "--job", "job", AGENTS / "loops.py", cwd=root)
    assert run.returncode == 0, run.stderr
    files = snapshot_files(store, "job")
    assert len(files) >= 3
    return files


@pytest.fixture(scope="module")
def real_bytes(real):
    return real[1].read_bytes()


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """One file path reused by the many in-process corruption checks."""
    return tmp_path_factory.mktemp("scratch") / "damaged.snap"


def _layout(data: bytes) -> dict:
    """Offsets of the parts of a snapshot file: header start/end, body start/end."""
    _, head_len = _FIXED.unpack_from(data, _MAGIC_LEN)
    head_start = _MAGIC_LEN + _FIXED.size
    head_end = head_start + head_len
    (body_len,) = struct.unpack_from("<Q", data, head_end)
    body_start = head_end + 8
    return {"head_start": head_start, "head_end": head_end, "body_start": body_start,
            "body_end": body_start + body_len}


def _reseal(data: bytes) -> bytes:
    """`data` (without its checksum) with a valid checksum appended."""
    return data + xxhash.xxh3_128_digest(data)


def _assert_refused(path, data: bytes, *, expect: str | None = None) -> CorruptSnapshot:
    path.write_bytes(data)
    with pytest.raises(CorruptSnapshot) as info:
        _snapfile.read(str(path))
    assert str(path) in str(info.value)
    if expect is not None:
        assert expect in str(info.value)
    return info.value


# ------------------------------------------------------------------ round trip
def test_encode_read_roundtrip(tmp_path):
    """encode() then read() gives back the header (plus codec) and the exact body."""
    header = {"job_id": "j", "seq": 4, "label": None, "nested": {"a": [1, 2.5, "é"]}}
    body = bytes(range(256)) * 3
    path = tmp_path / "x.snap"
    path.write_bytes(_snapfile.encode(header, body))
    got_header, got_body = _snapfile.read(str(path))
    assert got_header == dict(header, codec="zstd")
    assert got_body == body
    assert _snapfile.decode_header(str(path)) == got_header


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**53, 2**53)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20)


@HYPOTHESIS
@given(header=st.dictionaries(st.text(max_size=12), json_values, max_size=6),
       body=st.binary(max_size=2048))
def test_encode_read_roundtrip_any(scratch, header, body):
    """Any JSON header and any body bytes survive encode() -> file -> read()."""
    scratch.write_bytes(_snapfile.encode(header, body))
    got_header, got_body = _snapfile.read(str(scratch))
    assert got_header == dict(header, codec="zstd")
    assert got_body == body


@HYPOTHESIS
@given(data=st.binary(max_size=4096))
def test_compress_roundtrip(data):
    """decompress(compress(x)) == x for any bytes."""
    assert _snapfile.decompress(_snapfile.compress(data)) == data


def test_encode_layout(real_bytes):
    """A real snapshot starts with the magic and format version, its header length and
    body length account for every byte, and it ends with the xxh3-128 of the rest."""
    assert real_bytes.startswith(b"SNAPSTATE\0")
    version, _ = _FIXED.unpack_from(real_bytes, _MAGIC_LEN)
    assert version == _snapfile.FORMAT_VERSION == 1
    parts = _layout(real_bytes)
    assert parts["body_end"] + 16 == len(real_bytes)
    assert real_bytes[-16:] == xxhash.xxh3_128_digest(real_bytes[:-16])
    header = json.loads(real_bytes[parts["head_start"]:parts["head_end"]])
    assert header["codec"] == "zstd"


def test_read_real_snapshot(real):
    """A snapshot written by snaprun reads back with its job, sequence and label, and
    its body decompresses."""
    header, body = _snapfile.read(str(real[1]))
    assert header["job_id"] == "job"
    assert header["seq"] == 2
    assert header["label"] == "while-4"
    assert header["entry"]["module"] == "loops"
    assert len(_snapfile.decompress(body)) > len(body) // 2


# ------------------------------------------------------------------ atomic writes
def test_write_atomic_new_file(tmp_path):
    """write_atomic writes the whole file with mode 0600 and leaves no temp file."""
    path = tmp_path / "000001.snap"
    data = os.urandom(100_000)
    _snapfile.write_atomic(str(path), data)
    assert path.read_bytes() == data
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["000001.snap"]


def test_write_atomic_replaces_existing(tmp_path):
    """Writing over an existing file replaces it whole (new inode, mode 0600, even if
    the old file was world-readable) and leaves no temp file."""
    path = tmp_path / "000001.snap"
    path.write_bytes(b"old contents")
    path.chmod(0o644)
    old_inode = path.stat().st_ino
    _snapfile.write_atomic(str(path), b"new contents")
    assert path.read_bytes() == b"new contents"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.stat().st_ino != old_inode
    assert sorted(p.name for p in tmp_path.iterdir()) == ["000001.snap"]


def test_write_atomic_failed_write_keeps_old_file(tmp_path):
    """A write that fails midway leaves the previous file intact and no temp file."""
    path = tmp_path / "000001.snap"
    path.write_bytes(b"previous snapshot")
    with pytest.raises(TypeError):
        _snapfile.write_atomic(str(path), 12345)  # type: ignore[arg-type]
    assert path.read_bytes() == b"previous snapshot"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["000001.snap"]


def test_write_atomic_failed_rename_leaves_no_temp(tmp_path):
    """When the final rename fails (a directory is in the way), write_atomic raises and
    removes its temp file instead of leaving it in the store."""
    target = tmp_path / "000001.snap"
    (target / "inner").mkdir(parents=True)
    with pytest.raises(OSError):
        _snapfile.write_atomic(str(target), b"data")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["000001.snap"]
    assert target.is_dir()


# ------------------------------------------------------------------ damaged files
@pytest.mark.parametrize("data", [b"", b"S", b"SNAPSTATE", b"hello world\n" * 10,
                                  b"\x80\x05\x95pickle", b"snapstate\0" + b"\0" * 40],
                         ids=["empty", "one-byte", "magic-prefix", "text", "pickle",
                              "lowercase-magic"])
def test_bad_magic(scratch, data):
    """A file that does not start with the magic is refused, naming the path."""
    _assert_refused(scratch, data)


def test_bad_magic_on_real_snapshot(scratch, real_bytes):
    """A real snapshot with its magic changed (and checksum fixed up) is refused as
    bad magic."""
    data = b"SNAPSTATX\0" + real_bytes[_MAGIC_LEN:-16]
    _assert_refused(scratch, _reseal(data), expect="bad magic")


@pytest.mark.parametrize("version", [0, 2, 7, 0xFFFF])
def test_foreign_format_version(scratch, real_bytes, version):
    """A well-formed file of another format version is refused, naming the path, its
    format and the supported one."""
    data = bytearray(real_bytes[:-16])
    struct.pack_into("<H", data, _MAGIC_LEN, version)
    exc = _assert_refused(scratch, _reseal(bytes(data)))
    assert f"format {version}" in str(exc)
    assert f"format {_snapfile.FORMAT_VERSION}" in str(exc)


def test_truncated_at_every_length(scratch, real_bytes):
    """The snapshot cut at every length from 0 to size-1 bytes (inside the magic, the
    fixed fields, the header, the body and the checksum) is refused, naming the path."""
    for size in range(len(real_bytes)):
        _assert_refused(scratch, real_bytes[:size])


@pytest.mark.parametrize("extra", [b"\0", b"x" * 16, b"SNAPSTATE\0"],
                         ids=["one-byte", "sixteen", "magic"])
def test_trailing_bytes(scratch, real_bytes, extra):
    """Bytes appended after the checksum make the file refused, naming the path."""
    _assert_refused(scratch, real_bytes + extra, expect="trailing bytes")


def test_two_files_concatenated(scratch, real_bytes):
    """Two snapshots glued together are not read as the first one."""
    _assert_refused(scratch, real_bytes + real_bytes)


def test_every_byte_flipped(scratch, real_bytes):
    """Inverting any single byte of a real snapshot makes it refused, naming the path."""
    for pos in range(len(real_bytes)):
        data = bytearray(real_bytes)
        data[pos] ^= 0xFF
        _assert_refused(scratch, bytes(data))


@HYPOTHESIS
@given(st.data())
def test_flipped_bytes_anywhere(scratch, real_bytes, data):
    """Any 1-4 damaged bytes anywhere in a real snapshot make it refused (CorruptSnapshot
    naming the path, never another exception)."""
    positions = data.draw(st.lists(st.integers(0, len(real_bytes) - 1), min_size=1,
                                   max_size=4, unique=True))
    damaged = bytearray(real_bytes)
    for pos in positions:
        damaged[pos] ^= data.draw(st.integers(1, 255))
    _assert_refused(scratch, bytes(damaged))


def test_damaged_body_with_matching_header_lengths(scratch, real_bytes):
    """A body byte changed without touching any length field is caught by the checksum,
    and the message names the path."""
    parts = _layout(real_bytes)
    data = bytearray(real_bytes)
    data[(parts["body_start"] + parts["body_end"]) // 2] ^= 0x10
    _assert_refused(scratch, bytes(data), expect="checksum")


def test_missing_file(tmp_path):
    """A path with no file is refused with CorruptSnapshot naming the path."""
    path = tmp_path / "nope.snap"
    with pytest.raises(CorruptSnapshot) as info:
        _snapfile.read(str(path))
    assert str(path) in str(info.value)


# ------------------------------------------------------------------ through snaprun
def _cli_refuses(path, tmp_path):
    """`snaprun resume PATH` refuses: exit 2, one snaprun error naming PATH on stderr,
    no traceback, nothing on stdout, the file and the job directory unchanged."""
    before = path.read_bytes()
    listing = sorted(os.listdir(path.parent))
    run = snaprun("resume", path, cwd=tmp_path)
    assert run.returncode == 2, run.stderr
    assert run.stderr.startswith("snaprun: error:"), run.stderr
    assert "Traceback" not in run.stderr, run.stderr
    assert run.stdout == ""
    assert str(path) in run.stderr, run.stderr
    assert path.read_bytes() == before
    assert sorted(os.listdir(path.parent)) == listing
    return run


def _damaged_copy(tmp_path, name: str, data: bytes):
    directory = tmp_path / "store" / "jobs" / "job"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_bytes(data)
    return path


def _cut_points(data: bytes) -> dict[str, int]:
    parts = _layout(data)
    return {"in-magic": 4, "in-fixed-fields": _MAGIC_LEN + 3,
            "in-header": (parts["head_start"] + parts["head_end"]) // 2,
            "in-body-length": parts["head_end"] + 3,
            "in-body": (parts["body_start"] + parts["body_end"]) // 2,
            "in-checksum": len(data) - 5, "last-byte": len(data) - 1}


@pytest.mark.parametrize("where", ["in-magic", "in-fixed-fields", "in-header",
                                   "in-body-length", "in-body", "in-checksum", "last-byte"])
def test_cli_resume_truncated(real_bytes, tmp_path, where):
    """`snaprun resume` of a truncated real snapshot exits 2 with a clean error."""
    size = _cut_points(real_bytes)[where]
    path = _damaged_copy(tmp_path, "000002.snap", real_bytes[:size])
    _cli_refuses(path, tmp_path)


@pytest.mark.parametrize("where", ["magic", "version", "header", "body", "checksum"])
def test_cli_resume_flipped_byte(real_bytes, tmp_path, where):
    """`snaprun resume` of a real snapshot with one damaged byte exits 2 cleanly."""
    parts = _layout(real_bytes)
    pos = {"magic": 0, "version": _MAGIC_LEN,
           "header": (parts["head_start"] + parts["head_end"]) // 2,
           "body": (parts["body_start"] + parts["body_end"]) // 2,
           "checksum": len(real_bytes) - 1}[where]
    data = bytearray(real_bytes)
    data[pos] ^= 0x01
    path = _damaged_copy(tmp_path, "000002.snap", bytes(data))
    _cli_refuses(path, tmp_path)


def test_cli_resume_trailing_bytes(real_bytes, tmp_path):
    """`snaprun resume` of a snapshot with bytes appended exits 2 cleanly."""
    path = _damaged_copy(tmp_path, "000002.snap", real_bytes + b"\n")
    _cli_refuses(path, tmp_path)


def test_cli_resume_not_a_snapshot(tmp_path):
    """`snaprun resume` of an empty file and of a text file exits 2 cleanly."""
    _cli_refuses(_damaged_copy(tmp_path, "000001.snap", b""), tmp_path)
    _cli_refuses(_damaged_copy(tmp_path, "000002.snap", b"not a snapshot\n"), tmp_path)


def test_cli_resume_foreign_format(real_bytes, tmp_path):
    """`snaprun resume` of a well-formed snapshot of format 2 exits 2, naming formats."""
    data = bytearray(real_bytes[:-16])
    struct.pack_into("<H", data, _MAGIC_LEN, 2)
    path = _damaged_copy(tmp_path, "000002.snap", _reseal(bytes(data)))
    run = _cli_refuses(path, tmp_path)
    assert "format 2" in run.stderr


def test_cli_resume_missing_file(tmp_path):
    """`snaprun resume` of a path with no file exits 2 cleanly, naming the path."""
    path = tmp_path / "000009.snap"
    run = snaprun("resume", path, cwd=tmp_path)
    assert run.returncode == 2
    assert run.stdout == ""
    assert "Traceback" not in run.stderr
    assert "000009.snap" in run.stderr


def _resealed_with(real_bytes: bytes, header=None, body=None) -> bytes:
    """The real snapshot with its header and/or body replaced, checksum valid."""
    parts = _layout(real_bytes)
    real_header = json.loads(real_bytes[parts["head_start"]:parts["head_end"]])
    real_body = real_bytes[parts["body_start"]:parts["body_end"]]
    return _snapfile.encode(real_header if header is None else header,
                            real_body if body is None else body)


def test_cli_resume_body_not_zstd(real_bytes, tmp_path):
    """A checksum-valid snapshot whose body is not zstd data is refused with exit 2 and
    an error naming the file."""
    path = _damaged_copy(tmp_path, "000002.snap",
                         _resealed_with(real_bytes, body=b"definitely not zstd"))
    _cli_refuses(path, tmp_path)


def test_cli_resume_body_not_a_pickle(real_bytes, tmp_path):
    """A checksum-valid snapshot whose body decompresses to something that is not a
    snapstate pickle is refused with exit 2 and a clean error, not a traceback."""
    path = _damaged_copy(tmp_path, "000002.snap",
                         _resealed_with(real_bytes, body=_snapfile.compress(b"garbage")))
    _cli_refuses(path, tmp_path)


@pytest.mark.parametrize("header", [{"job_id": "job"}, [1, 2, 3], "text"],
                         ids=["missing-keys", "list", "string"])
def test_cli_resume_header_not_a_snapshot_header(real_bytes, tmp_path, header):
    """A checksum-valid file whose JSON header is not a snapshot header (missing keys,
    not an object) is refused with exit 2 and a clean error, not a traceback."""
    if isinstance(header, dict):
        data = _resealed_with(real_bytes, header=header)
    else:  # encode() only takes dicts: build the file by hand
        head = json.dumps(header).encode()
        parts = _layout(real_bytes)
        body = real_bytes[parts["body_start"]:parts["body_end"]]
        data = _reseal(_snapfile.MAGIC + _FIXED.pack(_snapfile.FORMAT_VERSION, len(head))
                       + head + struct.pack("<Q", len(body)) + body)
    path = _damaged_copy(tmp_path, "000002.snap", data)
    _cli_refuses(path, tmp_path)


def test_cli_refusal_leaves_other_snapshots_resumable(real, real_bytes, tmp_path):
    """After a damaged snapshot is refused, an intact earlier snapshot of the same job
    still resumes and the job finishes."""
    good = _damaged_copy(tmp_path, "000001.snap", real[0].read_bytes())
    bad = _damaged_copy(tmp_path, "000002.snap", real_bytes[: len(real_bytes) // 2])
    _cli_refuses(bad, tmp_path)
    run = snaprun("resume", good, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "resumed from snapshot 1" in run.stderr
    assert run.result == "13"
