"""The security requirements of the snapshot store (serializers/_snapfile.py,
serializers/_keys.py, serializers/_home.py, the snaprun CLI):

  - any single flipped byte of a snapshot file (header, body or trailer; plaintext or
    encrypted) is refused before a byte of it is unpickled, in-process and through
    `snaprun resume` / `snaprun inspect`; the payload handed to the unpickler is the
    one that was authenticated;
  - swapped headers, an unknown key, a retired key, a truncated file and a plaintext
    file in an encryption-required store each get their own exception class, naming
    the file;
  - AES-GCM nonces never repeat (100,000 encryptions under one key);
  - key rotation keeps old snapshots loadable, retiring a key makes them refused, and
    SNAPSTATE_KEY lets another store resume an exported file (refused without it);
  - keys.json is created with mode 0600 and never holds SNAPSTATE_KEY;
  - an encryption-required store writes encrypted snapshots whose content is not
    visible in the file, and its jobs resume after SIGKILL.

The unpickling tests use payloads that write a sentinel file when unpickled, so
"nothing was unpickled" is observed, not assumed: each has a positive control proving
that unpickling the intact payload does create the sentinel.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import pathlib
import pickle
import secrets
import shutil
import stat
import struct
import subprocess
import sys

import pytest
import zstandard
from chunked import (
    chunk_ids,
    chunk_rows,
    export_file,
    manifest,
    manifest_header,
    set_manifest,
    snapshot_seqs,
    stored_bytes,
    tamper_chunk,
)
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from helpers import AGENTS, Run, clean_refusal, snaprun

from snapstate._errors import (
    CorruptSnapshot,
    HeaderMismatch,
    PlaintextRefused,
    RetiredKey,
    SnapshotRejected,
    SnapstateError,
    TruncatedSnapshot,
    UnknownKey,
)
from snapstate.runtime._job import runtime_versions
from snapstate.serializers import _keys, _snapfile
from snapstate.serializers._home import Home

LOOPS = AGENTS / "loops.py"
TRAP = AGENTS / "sec_trap.py"
SECRET_AGENT = AGENTS / "sec_secret.py"
NO_ENV_KEY = {"SNAPSTATE_KEY": ""}  # an empty SNAPSTATE_KEY is ignored by the key ring

_FIXED = struct.Struct("<HI")
_LEN = struct.Struct("<I")
_MAGIC_LEN = len(_snapfile.MAGIC)
_TRAILER = 64


@pytest.fixture(autouse=True)
def _no_inherited_env_key(monkeypatch):
    """In-process key rings must use their store's keys.json, not an inherited key."""
    monkeypatch.delenv("SNAPSTATE_KEY", raising=False)


# ------------------------------------------------------------------ helpers
def _layout(data: bytes) -> dict:
    """Offsets of the parts of a v2 snapshot file (MAGIC, <HI version, header length>,
    header, body chunks each <I length + bytes, a zero length, 64-byte trailer)."""
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
    trailer = pos + _LEN.size
    assert trailer + _TRAILER == len(data)
    return {
        "head_start": head_start,
        "head_end": head_end,
        "chunks": chunks,
        "end_marker": pos,
        "trailer": trailer,
    }


def _positions(data: bytes) -> dict[str, int]:
    """One byte in every part of a snapshot file."""
    parts = _layout(data)
    first_len, first_start, first_end = parts["chunks"][0]
    return {
        "magic": 3,
        "version": _MAGIC_LEN,
        "header-length": _MAGIC_LEN + 2,
        "header": (parts["head_start"] + parts["head_end"]) // 2,
        "chunk-length": first_len,
        "body": (first_start + first_end) // 2,
        "end-marker": parts["end_marker"],
        "trailer-header-digest": parts["trailer"] + 3,
        "trailer-body-digest": parts["trailer"] + 16 + 3,
        "trailer-mac": len(data) - 1,
    }


def _header(**fields) -> dict:
    """A complete snapshot header (what a job writes), with `fields` overriding."""
    return dict(
        {
            "job_id": "job",
            "seq": 1,
            "epoch": 1,
            "label": None,
            "created_at": 1.7e9,
            "versions": runtime_versions(),
            "argv": [],
            "frames": [],
            "modules": {},
            "entry": {"module": "agent", "function": "main", "path": None, "search_path": None},
        },
        **fields,
    )


def _flipped(data: bytes, pos: int, mask: int = 0xFF) -> bytes:
    damaged = bytearray(data)
    damaged[pos] ^= mask
    return bytes(damaged)


class _Trap:
    """Unpickling an instance creates the sentinel file (and does nothing else)."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(self.path),))


@pytest.fixture
def trap(tmp_path):
    """A key ring, a sentinel path, and a pickle whose unpickling creates the sentinel."""
    keys = _keys.KeyRing(str(tmp_path / "keys"))
    sentinel = tmp_path / "SENTINEL"
    payload = pickle.dumps({"state": list(range(50)), "trap": _Trap(str(sentinel))}, protocol=5)
    return keys, sentinel, payload


def _write_trap(path, keys, payload, *, encrypt: bool) -> bytes:
    _snapfile.write(str(path), _header(job_id="trap"), payload, keys, encrypt=encrypt)
    return pathlib.Path(path).read_bytes()


# ------------------------------------------------------------------ any flipped byte
@pytest.mark.parametrize("encrypt", [False, True], ids=["plaintext", "encrypted"])
def test_intact_trap_payload_creates_sentinel(trap, tmp_path, encrypt):
    """Positive control for the flip tests: the intact signed file reads back to the
    exact payload, and unpickling that payload does create the sentinel file."""
    keys, sentinel, payload = trap
    path = tmp_path / "intact.snap"
    _write_trap(path, keys, payload, encrypt=encrypt)
    header, got = _snapfile.read_payload(str(path), keys)
    assert got == payload
    assert ("aes-256-gcm" in header["codecs"]) is encrypt
    assert not sentinel.exists()
    pickle.loads(got)
    assert sentinel.exists()


@pytest.mark.parametrize("encrypt", [False, True], ids=["plaintext", "encrypted"])
def test_every_flipped_byte_refused_before_unpickling(trap, tmp_path, encrypt):
    """Every single byte of a small signed snapshot (header, body chunks, trailer),
    inverted or with its low bit flipped, makes read_payload raise a CorruptSnapshot or
    SnapshotRejected naming the file: no flipped file ever yields a payload, and the
    sentinel that unpickling the payload would create never appears."""
    keys, sentinel, payload = trap
    data = _write_trap(tmp_path / "intact.snap", keys, payload, encrypt=encrypt)
    assert len(_layout(data)["chunks"]) >= 1
    path = tmp_path / "flipped.snap"
    undetected, wrong = [], []
    for pos, mask in itertools.product(range(len(data)), (0xFF, 0x01)):
        path.write_bytes(_flipped(data, pos, mask))
        try:
            _snapfile.read_payload(str(path), keys)
        except (CorruptSnapshot, SnapshotRejected) as exc:
            if str(path) not in str(exc):
                wrong.append((pos, mask, f"message does not name the file: {exc}"))
        except Exception as exc:  # noqa: BLE001 - any other exception is a failure
            wrong.append((pos, mask, f"{type(exc).__name__}: {exc}"))
        else:
            undetected.append((pos, mask))
    parts = _layout(data)
    assert undetected == [], (
        f"{len(undetected)} single-byte changes were accepted (file of {len(data)} bytes, "
        f"trailer at {parts['trailer']}): {undetected[:40]}"
    )
    assert wrong == [], wrong[:20]
    assert not sentinel.exists()


@pytest.mark.parametrize("where", ["header-length", "chunk-length"])
def test_flipped_length_refused_under_memory_limit(tmp_path, where):
    """A length field flipped to ~4 GiB is refused as truncated by `snaprun verify`
    (exit 2, one error line, no traceback) even in a process limited to 1 GiB of address
    space: the reader never allocates what an unauthenticated length field asks for.
    Control: the intact file verifies under the same limit."""
    store = tmp_path / "store"
    home = Home(str(store))  # a whole store: snapshots without a catalog are refused
    keys = home.keys
    home.close()
    path = store / "snapshots" / "job" / "000001-e1.snap"
    path.parent.mkdir(parents=True)
    _snapfile.write(str(path), _header(), pickle.dumps(list(range(100))), keys)
    data = path.read_bytes()
    limited = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
        "sys.argv[0] = 'snaprun'\n"
        "from snapstate.runtime._cli import main\n"
        "main()\n"
    )

    def verify() -> Run:
        proc = subprocess.run(
            [sys.executable, "-c", limited, "verify", "--store", str(store), str(path)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
            env=dict(os.environ, **NO_ENV_KEY),
        )
        return Run(proc.returncode, proc.stdout, proc.stderr)

    control = verify()
    assert control.returncode == 0, control.stderr
    assert control.stdout.startswith("ok: job job snapshot 1")
    pos = _positions(data)[where] + 3  # the most significant byte (little endian)
    path.write_bytes(_flipped(data, pos))
    clean_refusal(verify(), str(path), "truncated")


@pytest.fixture(scope="module")
def trap_job(tmp_path_factory):
    """A real snapshot of tests/agents/sec_trap.py, in the store (trap@1) and exported to
    a snapshot file: unpickling its body (resume) writes the sentinel file named in
    it."""
    root = tmp_path_factory.mktemp("trap")
    sentinel = root / "SENTINEL"
    run = snaprun(
        "run",
        "--store",
        root / "store",
        "--job",
        "trap",
        TRAP,
        cwd=root,
        env=dict(NO_ENV_KEY, SEC_SENTINEL=str(sentinel)),
    )
    assert run.returncode == 0, run.stderr
    assert not sentinel.exists()  # pickling the trap has no side effect
    assert snapshot_seqs(root / "store", "trap") == [1]
    snap = export_file(root / "store", "trap", 1, root / "trap-000001.snap")
    return root, root / "store", snap, sentinel


@pytest.fixture
def sentinel_of(trap_job):
    """The trap job's sentinel: absent before the test, removed after it."""
    sentinel = trap_job[3]
    assert not sentinel.exists()
    yield sentinel
    sentinel.unlink(missing_ok=True)


@pytest.mark.parametrize("command", ["inspect", "resume"])
def test_cli_intact_trap_snapshot_creates_sentinel(trap_job, sentinel_of, command):
    """Positive control for the CLI flip tests: `snaprun resume` of the intact trap
    snapshot unpickles its body, which creates the sentinel; `snaprun inspect` decodes
    it inertly (tests/test_readonly.py), which never does."""
    root, store, snap, sentinel = trap_job
    args = [command, snap] if command == "inspect" else [command, "--as", "control", snap]
    run = snaprun(*args, "--store", store, cwd=root, env=NO_ENV_KEY)
    assert run.returncode == 0, run.stderr
    assert sentinel.exists() == (command == "resume")


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
        "trailer-header-digest",
        "trailer-body-digest",
        "trailer-mac",
    ],
)
def test_cli_flipped_trap_snapshot_refused(trap_job, sentinel_of, where):
    """`snaprun resume --as NEW FILE` and `snaprun inspect FILE` of the real trap
    snapshot with one byte inverted (in each part of the file) exit 2 with one error
    naming the file and no traceback, and never create the sentinel: the body is
    refused before it is unpickled. (--as makes the resume an import, so only the
    file's integrity can stop it.)"""
    root, store, snap, sentinel = trap_job
    data = snap.read_bytes()
    path = root / f"flipped-{where}" / "000001-e1.snap"
    path.parent.mkdir()
    path.write_bytes(_flipped(data, _positions(data)[where]))
    clean_refusal(snaprun("inspect", "--store", store, path, cwd=root, env=NO_ENV_KEY), str(path))
    assert not sentinel.exists()
    clean_refusal(
        snaprun(
            "resume", "--store", store, "--as", f"imported-{where}", path, cwd=root, env=NO_ENV_KEY
        ),
        str(path),
    )
    assert not sentinel.exists()


def _damage_stored(store, where: str) -> None:
    """Damage trap@1 as stored: one byte of a chunk (its first, its last), or of its
    manifest (header, chunk list, signature), or its manifest swapped for a forged one
    over the same chunks signed with another key."""
    if where == "chunk-first":
        tamper_chunk(store, "trap", 1, 0)
        return
    if where == "chunk-last":
        tamper_chunk(store, "trap", 1, len(chunk_ids(store, "trap", 1)) - 1)
        return
    data = bytearray(manifest(store, "trap", 1))
    (length,) = struct.unpack_from("<I", data, 12)
    pos = {
        "manifest-header": 16 + length // 2,
        "manifest-chunk-list": 16 + length + 4 + 3,
        "manifest-signature": len(data) - 1,
    }[where]
    data[pos] ^= 0x01
    set_manifest(store, "trap", 1, bytes(data))


@pytest.mark.parametrize(
    "where",
    ["chunk-first", "chunk-last", "manifest-header", "manifest-chunk-list", "manifest-signature"],
)
def test_cli_damaged_stored_trap_snapshot_refused(trap_job, sentinel_of, tmp_path, where):
    """The trap snapshot as the store keeps it (its manifest in catalog.db, its chunks),
    with one byte changed in a chunk or in its manifest: `snaprun verify trap@1`,
    `snaprun inspect trap`, `snaprun export` and `snaprun fork trap@1` (which would copy
    it to a job that resumes) each exit 2 with one error naming the snapshot and no
    traceback, and the sentinel is never created: the body is refused before a byte of
    it is unpickled. Control: the intact copy forks and the fork's resume unpickles the
    trap (creates the sentinel)."""
    root, store, _, sentinel = trap_job
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    _damage_stored(copy, where)
    for command in (
        ("verify", "trap@1"),
        ("inspect", "trap"),
        ("export", "trap@1", "-o", tmp_path / "out.snap"),
        ("fork", "trap@1", "--as", "forked"),
    ):
        clean_refusal(
            snaprun(*command, "--store", copy, cwd=root, env=NO_ENV_KEY), "snapshot 1 of job trap"
        )
        assert not sentinel.exists(), command
    assert not (tmp_path / "out.snap").exists()
    assert snapshot_seqs(copy, "forked") == []
    control = tmp_path / "control"
    shutil.copytree(store, control)
    forked = snaprun(
        "fork", "trap@1", "--as", "forked", "--store", control, cwd=root, env=NO_ENV_KEY
    )
    assert forked.returncode == 0, forked.stderr
    assert not sentinel.exists()
    snaprun("resume", "forked", "--store", control, cwd=root, env=NO_ENV_KEY)
    assert sentinel.exists()


def test_payload_is_the_one_that_was_verified(trap, tmp_path):
    """read_payload returns only authenticated bytes: when the file is replaced by an
    attacker's (a body signed with another key, behind the genuine header) while it is
    being read, read_payload either refuses or returns the genuine payload, never the
    attacker's. The replacement is made deterministic by a key ring that swaps the file
    when read_payload looks a key up for the second time (after the first, verifying,
    pass); the attacker's payload would create the sentinel if unpickled."""
    _, sentinel, evil_payload = trap
    keys_dir = tmp_path / "store"
    genuine_payload = pickle.dumps({"state": "genuine"}, protocol=5)
    path, evil = tmp_path / "snap.snap", tmp_path / "evil.snap"
    header = _header()
    _snapfile.write(str(path), header, genuine_payload, _keys.KeyRing(str(keys_dir)))
    _snapfile.write(str(evil), header, evil_payload, _keys.KeyRing(str(tmp_path / "attacker")))
    genuine, forged = path.read_bytes(), evil.read_bytes()
    head = _layout(genuine)["head_end"]
    evil.write_bytes(genuine[:head] + forged[_layout(forged)["head_end"] :])

    class RacedKeyRing(_keys.KeyRing):
        armed, lookups = False, 0

        def get(self, key_id):
            key = super().get(key_id)
            if self.armed:
                self.lookups += 1
                if self.lookups == 2:
                    os.replace(evil, path)  # the attacker's move
            return key

    keys = RacedKeyRing(str(keys_dir))
    with pytest.raises(SnapstateError):  # control: the forged file alone is refused
        _snapfile.read_payload(str(evil), keys)
    keys.armed = True
    try:
        _, payload = _snapfile.read_payload(str(path), keys)
    except (CorruptSnapshot, SnapshotRejected):
        payload = None
    assert keys.lookups >= 1
    assert payload in (None, genuine_payload), (
        "read_payload returned bytes that were never authenticated (the file was "
        "replaced after verify() and read again)"
    )
    assert not sentinel.exists()


# ------------------------------------------------------------------ distinct errors
@pytest.mark.smoke
def test_swapped_headers_are_a_header_mismatch(tmp_path):
    """Snapshot A's magic+header with snapshot B's body and trailer (two real snapshots
    of one job, exported, same key) is refused with HeaderMismatch naming the file,
    both ways round; `snaprun verify` of it exits 2 saying the header does not belong.
    In the store, the manifests of snapshots 1 and 2 swapped: `snaprun verify job@1`
    and `job@2` exit 2 naming the snapshot, and the in-process read is HeaderMismatch."""
    store = tmp_path / "store"
    assert (
        snaprun(
            "run", "--store", store, "--job", "job", LOOPS, cwd=tmp_path, env=NO_ENV_KEY
        ).returncode
        == 0
    )
    a, b = (export_file(store, "job", seq, tmp_path / f"{seq}.snap").read_bytes() for seq in (1, 2))
    keys = _keys.KeyRing(str(store))
    for first, second, name in ((a, b, "a-on-b"), (b, a, "b-on-a")):
        path = tmp_path / "swapped" / f"{name}.snap"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(
            first[: _layout(first)["head_end"]] + second[_layout(second)["head_end"] :]
        )
        with pytest.raises(SnapstateError) as info:
            _snapfile.read_payload(str(path), keys)
        assert type(info.value) is HeaderMismatch
        assert str(path) in str(info.value)
        clean_refusal(
            snaprun("verify", "--store", store, path, cwd=tmp_path, env=NO_ENV_KEY),
            str(path),
            "header does not belong",
        )
    one, two = manifest(store, "job", 1), manifest(store, "job", 2)
    set_manifest(store, "job", 1, two)
    set_manifest(store, "job", 2, one)
    for seq in (1, 2):
        clean_refusal(
            snaprun("verify", "--store", store, f"job@{seq}", cwd=tmp_path, env=NO_ENV_KEY),
            f"snapshot {seq} of job job",
        )
        home = Home(str(store), create=False, writable=False)
        try:
            with pytest.raises(SnapstateError) as info:
                home.read_row(home.catalog.snapshot("job", seq))
            assert type(info.value) is HeaderMismatch, info.value
        finally:
            home.close()


def _five_refusals(tmp_path) -> list[tuple[type, SnapstateError, str]]:
    """(expected class, raised exception, file) for each of the five refusals."""
    header = _header()
    payload = pickle.dumps(list(range(1000)))
    out = []

    def caught(expected, path, fn):
        with pytest.raises(SnapstateError) as info:
            fn()
        out.append((expected, info.value, str(path)))

    # swapped headers
    ring = _keys.KeyRing(str(tmp_path / "a"))
    one, two = tmp_path / "one.snap", tmp_path / "two.snap"
    _snapfile.write(str(one), dict(header, seq=1), payload, ring)
    _snapfile.write(str(two), dict(header, seq=2), payload, ring)
    d1, d2 = one.read_bytes(), two.read_bytes()
    swapped = tmp_path / "swapped.snap"
    swapped.write_bytes(d1[: _layout(d1)["head_end"]] + d2[_layout(d2)["head_end"] :])
    caught(HeaderMismatch, swapped, lambda: _snapfile.verify(str(swapped), ring))
    # another store's key
    other = _keys.KeyRing(str(tmp_path / "b"))
    caught(UnknownKey, one, lambda: _snapfile.read_payload(str(one), other))
    # a retired key (the retirement is read back from keys.json by a fresh key ring)
    old_id = ring.current.key_id
    ring.rotate()
    ring.retire(old_id)
    caught(
        RetiredKey,
        one,
        lambda: _snapfile.read_payload(str(one), _keys.KeyRing(str(tmp_path / "a"))),
    )
    # a truncated file (signed with the current key)
    fresh = _keys.KeyRing(str(tmp_path / "a"))
    cut = tmp_path / "cut.snap"
    _snapfile.write(str(cut), header, payload, fresh)
    cut.write_bytes(cut.read_bytes()[:-1])
    caught(TruncatedSnapshot, cut, lambda: _snapfile.read_payload(str(cut), fresh))
    # plaintext in an encryption-required store
    home = Home(str(tmp_path / "store"))
    try:
        plain = pathlib.Path(home.snapshot_path("job", 1, 1))
        plain.parent.mkdir(parents=True)
        _snapfile.write(str(plain), header, payload, home.keys)
        assert home.read(str(plain))[1] == payload  # control: fine before --encrypt
        home.set_encryption(True)
        caught(PlaintextRefused, plain, lambda: home.read(str(plain)))
    finally:
        home.close()
    return out


def test_each_refusal_has_its_own_exception_class(tmp_path):
    """Swapped headers -> HeaderMismatch, another store's key -> UnknownKey, a retired
    key -> RetiredKey, a truncated file -> TruncatedSnapshot, plaintext in an
    encryption-required store -> PlaintextRefused: each raised as exactly that class
    (not a parent or sibling), each message naming the file; the five classes are
    distinct and none is a subclass of another, so each can be caught on its own."""
    refusals = _five_refusals(tmp_path)
    expected = [HeaderMismatch, UnknownKey, RetiredKey, TruncatedSnapshot, PlaintextRefused]
    assert [e for e, _, _ in refusals] == expected
    for cls, exc, path in refusals:
        assert type(exc) is cls, f"expected {cls.__name__}, got {type(exc).__name__}: {exc}"
        assert path in str(exc), f"{cls.__name__} message does not name {path}: {exc}"
    assert len(set(expected)) == 5
    for a, b in itertools.permutations(expected, 2):
        assert not issubclass(a, b), f"{a.__name__} is a {b.__name__}"
    assert all(issubclass(cls, SnapstateError) for cls in expected)
    assert len({str(exc).replace(path, "") for _, exc, path in refusals}) == 5


@pytest.mark.parametrize("encrypt", [False, True], ids=["plaintext", "encrypted"])
def test_truncated_at_every_length_is_truncated_snapshot(trap, tmp_path, encrypt):
    """A signed snapshot cut at every length from 0 to size-1 raises exactly
    TruncatedSnapshot naming the file (never another error, never a payload)."""
    keys, sentinel, payload = trap
    data = _write_trap(tmp_path / "intact.snap", keys, payload, encrypt=encrypt)
    path = tmp_path / "cut.snap"
    wrong = []
    for size in range(len(data)):
        path.write_bytes(data[:size])
        try:
            _snapfile.read_payload(str(path), keys)
        except SnapstateError as exc:
            if type(exc) is not TruncatedSnapshot or str(path) not in str(exc):
                wrong.append((size, type(exc).__name__, str(exc)))
        else:
            wrong.append((size, "accepted", ""))
    assert wrong == [], wrong[:20]
    assert not sentinel.exists()


def test_cli_plaintext_refused_in_encryption_required_store(tmp_path):
    """A plaintext snapshot that verifies in its store (control) is refused once the
    store requires encryption (`snaprun init --encrypt`): `snaprun verify` and
    `snaprun resume` exit 2 with one error naming the file and saying it is not
    encrypted; the file is left as it was."""
    store = tmp_path / "store"
    home = Home(str(store))
    try:
        path = pathlib.Path(home.snapshot_path("job", 1, 1))
        path.parent.mkdir(parents=True)
        _snapfile.write(str(path), _header(), pickle.dumps([1, 2, 3]), home.keys)
    finally:
        home.close()
    before = path.read_bytes()
    assert snaprun("verify", "--store", store, path, cwd=tmp_path, env=NO_ENV_KEY).returncode == 0
    init = snaprun("init", "--store", store, "--encrypt", cwd=tmp_path, env=NO_ENV_KEY)
    assert init.returncode == 0, init.stderr
    clean_refusal(
        snaprun("verify", "--store", store, path, cwd=tmp_path, env=NO_ENV_KEY),
        str(path),
        "not encrypted",
    )
    clean_refusal(
        snaprun("resume", "--store", store, path, cwd=tmp_path, env=NO_ENV_KEY),
        str(path),
        "not encrypted",
    )
    assert path.read_bytes() == before


# ------------------------------------------------------------------ nonces
def _first_ciphertext(data: bytes) -> bytes:
    """The first sealed body chunk of an encrypted file, without its 16-byte tag."""
    _, start, end = _layout(data)["chunks"][0]
    return data[start : end - 16]


def test_no_nonce_repeats_across_100000_encryptions(tmp_path):
    """No AES-GCM nonce repeats over 100,000 encryptions under one key, all made by the
    production code: 500 encrypted files from _snapfile.write (each its own random
    nonce prefix, read back from the header) and, for each of those prefixes, the 200
    chunk encryptions _snapfile._sealed makes for a 200-chunk body.

    Detection does not trust the nonce formula: every encryption seals the same
    plaintext block under the same key, and GCM is a counter-mode stream, so two equal
    nonces would give two equal ciphertext blocks: 100,000 distinct ciphertexts prove
    100,000 distinct nonces. The 500 files' own ciphertexts (same payload) are distinct
    too, and each written file decrypts through read_payload
    (its header's nonce prefix is the one its body was sealed with), and a spot check
    confirms the documented nonce layout (8-byte prefix + 4-byte chunk number).

    (100,000 fsync'd _snapfile.write calls take over a minute on a disk-backed tmp
    dir, hence 500 files x 200 chunks; the writer has no nonce helper to call.)"""
    keys = _keys.KeyRing(str(tmp_path / "keys"))
    key = keys.current
    header = _header()
    payload = pickle.dumps("the same payload every time")
    path = tmp_path / "one.snap"
    prefixes, file_ciphertexts = [], set()
    for _ in range(500):
        _snapfile.write(str(path), header, payload, keys, encrypt=True)
        data = path.read_bytes()
        written = _snapfile.peek_header(str(path))
        assert written["key_id"] == key.key_id and "aes-256-gcm" in written["codecs"]
        assert len(_layout(data)["chunks"]) == 1
        assert _snapfile.read_payload(str(path), keys)[1] == payload
        prefixes.append(bytes.fromhex(written["nonce_prefix"]))
        file_ciphertexts.add(_first_ciphertext(data))
    assert all(len(p) == 8 for p in prefixes)
    assert len(set(prefixes)) == 500
    assert len(file_ciphertexts) == 500

    block = bytes(16)
    header_sha = hashlib.sha256(b"a header").digest()
    keystreams = set()
    for prefix in prefixes:
        sealed = list(
            _snapfile._sealed(itertools.repeat(block, 200), key.aead_key, prefix, header_sha)
        )
        assert len(sealed) == 200
        keystreams.update(chunk[:16] for chunk in sealed)
    assert len(keystreams) == 100_000

    aead = AESGCM(key.aead_key)
    prefix = prefixes[0]
    sealed = list(_snapfile._sealed(iter([b"a", b"b", b"c"]), key.aead_key, prefix, header_sha))
    for index, (chunk, plain) in enumerate(zip(sealed, (b"a", b"b", b"c"))):
        aad = header_sha + struct.pack("<IB", index, index == 2)
        assert aead.decrypt(prefix + struct.pack("<I", index), chunk, aad) == plain


# ------------------------------------------------------------------ keys
def test_rotation_old_snapshots_load_new_use_new_key_retired_refused(tmp_path):
    """After `snaprun keys rotate`, snapshots signed with the old key still verify and
    resume, and the snapshots the resumed run writes carry the new key id; after
    `snaprun keys retire OLD`, the old-key snapshot is refused (exit 2, RetiredKey
    in-process) while the new-key ones still verify. The same for a file exported before
    the rotation (signed with the old key)."""
    store = tmp_path / "store"
    env = NO_ENV_KEY
    # killed after its last snapshot, so not done: a done job never resumes
    assert (
        snaprun(
            "run",
            "--store",
            store,
            "--job",
            "job",
            LOOPS,
            cwd=tmp_path,
            env=env,
            fault="after-snapshot:6",
        ).returncode
        == -9
    )
    seqs = snapshot_seqs(store, "job")
    assert seqs == [1, 2, 3, 4, 5, 6]
    old = {manifest_header(store, "job", seq)["key_id"] for seq in seqs}
    assert len(old) == 1
    (old_id,) = old
    # an exported file is signed with the key current at the export: the old one
    old_file = export_file(store, "job", 2, tmp_path / "job-2-old.snap")
    assert _snapfile.peek_header(str(old_file))["key_id"] == old_id
    rotated = snaprun("keys", "rotate", "--store", store, cwd=tmp_path, env=env)
    assert rotated.returncode == 0, rotated.stderr
    listing = json.loads(
        snaprun("keys", "list", "--json", "--store", store, cwd=tmp_path, env=env).stdout
    )
    current = [k["key"] for k in listing if k["current"]]
    assert len(listing) == 2 and len(current) == 1 and current[0] != old_id
    (new_id,) = current
    assert new_id in rotated.stderr

    assert snaprun("verify", "--store", store, "job@2", cwd=tmp_path, env=env).returncode == 0
    assert snaprun("verify", "--store", store, old_file, cwd=tmp_path, env=env).returncode == 0
    run = snaprun("resume", "--store", store, "--at", "2", "job", cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr
    assert run.result == "13"
    after = snapshot_seqs(store, "job")
    ids = {seq: manifest_header(store, "job", seq)["key_id"] for seq in after}
    assert ids[1] == ids[2] == old_id
    written = [seq for seq in ids if seq > 2]
    assert len(written) == 4 and all(ids[seq] == new_id for seq in written), ids

    retired = snaprun("keys", "retire", old_id, "--store", store, cwd=tmp_path, env=env)
    assert retired.returncode == 0, retired.stderr
    manifests = {seq: manifest(store, "job", seq) for seq in after}
    for command in (("verify", "job@2"), ("fork", "job@2", "--as", "again")):
        clean_refusal(
            snaprun(*command, "--store", store, cwd=tmp_path, env=env),
            "snapshot 2 of job job",
            old_id,
            "retired",
        )
    clean_refusal(
        snaprun("resume", "--store", store, "--as", "again", old_file, cwd=tmp_path, env=env),
        str(old_file),
        old_id,
        "retired",
    )
    home = Home(str(store))
    try:
        with pytest.raises(SnapstateError) as info:
            home.read_row(home.catalog.snapshot("job", 2))
        assert type(info.value) is RetiredKey
        with pytest.raises(SnapstateError) as info:
            home.read(str(old_file))
        assert type(info.value) is RetiredKey
        for seq in written:
            header, _ = home.verify_row(home.catalog.snapshot("job", seq))
            assert header["seq"] == seq
            assert manifest_header(store, "job", seq)["key_id"] == new_id
    finally:
        home.close()
    # the refusals removed nothing
    assert {seq: manifest(store, "job", seq) for seq in snapshot_seqs(store, "job")} == manifests


def test_current_key_cannot_be_retired(tmp_path):
    """`snaprun keys retire` of the current key is refused (exit 2), so a store can
    never be left without a usable key; the key stays current and usable."""
    store = tmp_path / "store"
    ring = _keys.KeyRing(str(store))
    current = ring.current.key_id
    clean_refusal(
        snaprun("keys", "retire", current, "--store", store, cwd=tmp_path, env=NO_ENV_KEY),
        current,
        "rotate",
    )
    again = _keys.KeyRing(str(store))
    assert again.current.key_id == current and not again.get(current).retired


def test_shared_env_key_resumes_export_in_another_store(tmp_path):
    """With the same SNAPSTATE_KEY in both runs, a snapshot exported from store A
    (`snaprun export JOB@SEQ -o FILE`) resumes in store B; without the shared key it is
    refused (exit 2, UnknownKey naming the key id and SNAPSTATE_KEY), and the key is
    never written to either store's keys.json."""
    key = secrets.token_hex(32)
    shared = {"SNAPSTATE_KEY": key}
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    assert (
        snaprun("run", "--store", a, "--job", "job", LOOPS, cwd=tmp_path, env=shared).returncode
        == 0
    )
    exported = tmp_path / "exported.snap"
    run = snaprun("export", "--store", a, "job@2", "-o", exported, cwd=tmp_path, env=shared)
    assert run.returncode == 0, run.stderr
    key_id = _snapfile.peek_header(str(exported))["key_id"]
    # the id is derived from the secret (the same id it has in any store holding it)
    assert key_id == _keys.key_id_of(bytes.fromhex(key))

    refused = snaprun("resume", "--store", c, exported, cwd=tmp_path, env=NO_ENV_KEY)
    clean_refusal(refused, str(exported), key_id, "SNAPSTATE_KEY")
    home = Home(str(c))
    try:
        with pytest.raises(SnapstateError) as info:
            home.read(str(exported))
        assert type(info.value) is UnknownKey
        assert home.catalog.list_jobs() == []
    finally:
        home.close()

    run = snaprun("resume", "--store", b, exported, cwd=tmp_path, env=shared)
    assert run.returncode == 0, run.stderr
    assert "resumed from snapshot 2" in run.stderr
    assert run.stdout == "while [2, 4, 6, 8, 'else']\npairs ['x0', 'x1', 'y0', 'y1']\n"
    assert run.result == "13"
    for store in (a, b, c):
        assert key not in (store / "keys.json").read_text()


def test_keys_json_is_created_0600(tmp_path):
    """keys.json is created with mode 0600 even under umask 0 (the mode is explicit, not
    the umask's), stays 0600 when rotation rewrites it, and is 0600 when the CLI
    creates a store."""
    old_umask = os.umask(0)
    try:
        ring = _keys.KeyRing(str(tmp_path / "store"))
        mode = stat.S_IMODE(os.stat(ring.path).st_mode)
        ring.rotate()
        rotated = stat.S_IMODE(os.stat(ring.path).st_mode)
    finally:
        os.umask(old_umask)
    assert mode == 0o600, oct(mode)
    assert rotated == 0o600, oct(rotated)
    assert (
        snaprun("init", "--store", tmp_path / "cli", cwd=tmp_path, env=NO_ENV_KEY).returncode == 0
    )
    assert stat.S_IMODE(os.stat(tmp_path / "cli" / "keys.json").st_mode) == 0o600


# ------------------------------------------------------------------ encrypted store
def test_encrypted_store_survives_sigkill(tmp_path):
    """`snaprun init --encrypt`, then loops.py SIGKILLed right after snapshot 2: both
    snapshots are encrypted (aes-256-gcm in their codecs, a nonce prefix, no zstd frame
    visible in the body), and `snaprun resume` continues the job after snapshot 2 to
    its result; the snapshots of the resumed run are encrypted too."""
    store = tmp_path / "store"
    init = snaprun("init", "--store", store, "--encrypt", cwd=tmp_path, env=NO_ENV_KEY)
    assert init.returncode == 0 and "encryption required" in init.stderr, init.stderr
    killed = snaprun(
        "run",
        "--store",
        store,
        "--job",
        "job",
        LOOPS,
        cwd=tmp_path,
        fault="after-snapshot:2",
        env=NO_ENV_KEY,
    )
    assert killed.returncode == -9, killed.stderr
    assert killed.stdout == "for [0, 2, 3, 4]\n"
    assert snapshot_seqs(store, "job") == [1, 2]
    for seq in (1, 2):
        assert manifest_header(store, "job", seq)["codecs"] == [
            "pickle-5",
            "fastcdc",
            "zstd",
            "aes-256-gcm",
        ]
        for chunk_id in chunk_ids(store, "job", seq):
            (chunk,) = [c for c in chunk_rows(store) if c.chunk_id == chunk_id]
            assert b"\x28\xb5\x2f\xfd" not in stored_bytes(store, chunk)
    run = snaprun("resume", "--store", store, "job", cwd=tmp_path, env=NO_ENV_KEY)
    assert run.returncode == 0, run.stderr
    assert "resumed from snapshot 2" in run.stderr
    assert run.stdout == "while [2, 4, 6, 8, 'else']\npairs ['x0', 'x1', 'y0', 'y1']\n"
    assert run.result == "13"
    after = snapshot_seqs(store, "job")
    assert len(after) == 6
    assert all("aes-256-gcm" in manifest_header(store, "job", seq)["codecs"] for seq in after)
    assert all(b"\x28\xb5\x2f\xfd" not in stored_bytes(store, chunk) for chunk in chunk_rows(store))


def _body(data: bytes) -> bytes:
    """The body chunks of a snapshot file, concatenated (no length fields)."""
    return b"".join(data[start:end] for _, start, end in _layout(data)["chunks"])


def test_encrypted_snapshot_hides_the_agents_data(tmp_path):
    """A distinctive secret the agent holds (sec_secret.py, in a local and a global) is
    readable by anyone holding a plaintext store's file: its body is a zstd stream that
    decompresses, without any key, to bytes holding the secret (control). In an
    encryption-required store the file holds neither the secret nor a zstd stream, and
    its body does not decompress; only decrypting it with the store's key (Home.read)
    gives a payload that holds the secret. Both jobs run to the same result."""
    secret = "SEC-" + secrets.token_hex(20)
    env = dict(NO_ENV_KEY, SEC_PAYLOAD=secret)
    plain, sealed = tmp_path / "plain", tmp_path / "sealed"
    assert snaprun("init", "--store", sealed, "--encrypt", cwd=tmp_path, env=env).returncode == 0
    for store in (plain, sealed):
        run = snaprun("run", "--store", store, "--job", "job", SECRET_AGENT, cwd=tmp_path, env=env)
        assert run.returncode == 0, run.stderr
        assert run.result == str(len(secret))
        assert run.stdout == f"still holding {len(secret)}\n"
    assert snapshot_seqs(plain, "job") == snapshot_seqs(sealed, "job") == [1, 2]
    whole = [c for c in chunk_rows(plain) if c.base is None]
    assert whole and all(stored_bytes(plain, c).startswith(b"\x28\xb5\x2f\xfd") for c in whole)
    plain_text = b"".join(
        zstandard.ZstdDecompressor().decompress(stored_bytes(plain, c)) for c in whole
    )
    assert secret.encode() in plain_text  # readable without any key
    sealed_chunks = chunk_rows(sealed)
    assert sealed_chunks
    for name in ("catalog.db", "catalog.db-wal"):
        if (sealed / name).exists():
            assert secret.encode() not in (sealed / name).read_bytes(), name
    for pack in (sealed / "chunks").glob("*.pack"):
        assert secret.encode() not in pack.read_bytes(), pack
    for c in sealed_chunks:
        data = stored_bytes(sealed, c)
        assert secret.encode() not in data
        assert b"\x28\xb5\x2f\xfd" not in data
        with pytest.raises(zstandard.ZstdError):
            zstandard.ZstdDecompressor().decompressobj().decompress(data)
    home = Home(str(sealed))
    try:
        for seq in (1, 2):
            row = home.catalog.snapshot("job", seq)
            header, payload = home.read_row(row)
            assert "aes-256-gcm" in manifest_header(sealed, "job", seq)["codecs"]
            assert secret.encode() in payload
    finally:
        home.close()


# ------------------------------------------------------------------ the chunk store
BIG_TRAP = '''\
"""A trap (unpickling it writes SEC_SENTINEL) beside 300 KB of random bytes: the
snapshot's new chunks exceed the inline limit, so they are written to a pack file."""

import os

from snapstate import snapshot


def arm(path):
    with open(path, "w") as f:
        f.write("unpickled\\n")
    return Trap(path)


class Trap:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (arm, (self.path,))


def main():
    trap = Trap(os.environ["SEC_SENTINEL"])
    blob = os.urandom(300_000)
    snapshot("armed")
    return len(blob) + len(trap.path)
'''


@pytest.fixture(scope="module")
def big_trap(tmp_path_factory):
    """Job `big` of tests' BIG_TRAP agent, SIGKILLed right after its snapshot 1 (so
    `resume big` would unpickle it): its chunks lie in one pack file."""
    root = tmp_path_factory.mktemp("bigtrap")
    (root / "big_trap.py").write_text(BIG_TRAP)
    sentinel = root / "SENTINEL"
    run = snaprun(
        "run",
        "--store",
        root / "store",
        "--job",
        "big",
        root / "big_trap.py",
        cwd=root,
        fault="after-snapshot:1",
        env=dict(NO_ENV_KEY, SEC_SENTINEL=str(sentinel)),
    )
    assert run.returncode == -9, run.stderr
    assert not sentinel.exists()
    store = root / "store"
    packs = list((store / "chunks").glob("*.pack"))
    assert len(packs) == 1
    listed = chunk_ids(store, "big", 1)
    assert len(listed) > 4
    assert all(c.pack == packs[0].name for c in chunk_rows(store) if c.chunk_id in listed)
    return root, store, sentinel


def _edit_chunk(store, sql: str, index: int) -> None:
    """Run `sql` (one ? for the chunk id) on the big snapshot's `index`-th chunk row."""
    import sqlite3

    db = sqlite3.connect(store / "catalog.db", isolation_level=None)
    try:
        db.execute(sql, (chunk_ids(store, "big", 1)[index],))
    finally:
        db.close()


def _damage_big(store, how: str) -> None:
    listed = chunk_ids(store, "big", 1)
    (pack,) = (store / "chunks").glob("*.pack")
    if how == "chunk-byte":
        tamper_chunk(store, "big", 1, 2)
    elif how == "chunk-row-deleted":
        _edit_chunk(store, "DELETE FROM chunks WHERE id = ?", 1)
    elif how == "chunk-size":
        _edit_chunk(store, "UPDATE chunks SET size = size + 1 WHERE id = ?", 1)
    elif how == "chunk-base-self":
        _edit_chunk(store, "UPDATE chunks SET base = id WHERE id = ?", 1)
    elif how == "chunk-base-missing":  # a delta against a chunk the store lacks
        _edit_chunk(store, "UPDATE chunks SET base = zeroblob(16) WHERE id = ?", 1)
    elif how == "chunk-offset":
        _edit_chunk(store, "UPDATE chunks SET offset = offset + 1 WHERE id = ?", 1)
    elif how == "chunk-length":
        _edit_chunk(store, "UPDATE chunks SET length = length - 1 WHERE id = ?", 1)
    elif how == "chunk-swapped":  # two chunks' stored places exchanged
        import sqlite3

        db = sqlite3.connect(store / "catalog.db", isolation_level=None)
        a, b = (
            db.execute("SELECT offset, length FROM chunks WHERE id = ?", (c,)).fetchone()
            for c in listed[:2]
        )
        db.execute("UPDATE chunks SET offset = ?, length = ? WHERE id = ?", (*b, listed[0]))
        db.execute("UPDATE chunks SET offset = ?, length = ? WHERE id = ?", (*a, listed[1]))
        db.close()
    elif how == "pack-truncated":
        os.truncate(pack, pack.stat().st_size // 2)
    elif how == "pack-deleted":
        pack.unlink()
    elif how == "manifest-deleted":
        import sqlite3

        db = sqlite3.connect(store / "catalog.db", isolation_level=None)
        db.execute("DELETE FROM manifests WHERE job_id = 'big' AND seq = 1")
        db.close()
    else:
        raise AssertionError(how)


@pytest.mark.parametrize(
    "how",
    [
        "chunk-byte",
        "chunk-row-deleted",
        "chunk-size",
        "chunk-base-self",
        "chunk-base-missing",
        "chunk-offset",
        "chunk-length",
        "chunk-swapped",
        "pack-truncated",
        "pack-deleted",
        "manifest-deleted",
    ],
)
def test_damaged_chunk_store_is_refused_before_unpickling(big_trap, tmp_path, how):
    """The stored form of a job's snapshot damaged in each way the chunk store allows
    (a byte of a chunk in its pack, a chunk row deleted, its size, offset or length
    edited, its base made itself or a chunk the store lacks, two chunks' places swapped, the pack truncated or deleted, the
    manifest deleted): `snaprun verify big@1` and `snaprun resume big` exit 2 with one
    error naming the snapshot and no traceback, the sentinel is never created (nothing
    was unpickled), and the job's rows and manifest are unchanged. Control: the intact
    store's `resume big` unpickles the trap."""
    root, store, sentinel = big_trap
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    _damage_big(copy, how)
    seqs = snapshot_seqs(copy, "big")
    kept = None if how == "manifest-deleted" else manifest(copy, "big", 1)
    for command in (("verify", "big@1"), ("resume", "big")):
        run = snaprun(
            *command, "--store", copy, cwd=root, env=dict(NO_ENV_KEY, SEC_SENTINEL=str(sentinel))
        )
        clean_refusal(run, "snapshot 1 of job big")
        assert not sentinel.exists(), (how, command)
    assert snapshot_seqs(copy, "big") == seqs == [1]
    if kept is not None:
        assert manifest(copy, "big", 1) == kept
    control = tmp_path / "control"
    shutil.copytree(store, control)
    try:
        run = snaprun("resume", "--store", control, "big", cwd=root, env=NO_ENV_KEY)
        assert run.returncode == 0, run.stderr
        assert sentinel.exists()
    finally:
        sentinel.unlink(missing_ok=True)
