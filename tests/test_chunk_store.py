"""Chunked snapshot bodies (serializers/_chunkstore.py): what a step stores, that any
tampering with what is stored is refused before anything is unpickled, that an
encrypted store leaks neither plaintext nor an unkeyed hash, that prune racing a
writer never deletes a chunk a committed or in-flight snapshot needs, that a killed
writer leaves nothing a snapshot refers to missing, and that export/import carry a
chunked snapshot between stores as one self-contained file."""

from __future__ import annotations

import hashlib
import os
import pickle
import pickletools
import sqlite3
import subprocess
import threading
from contextlib import closing
from pathlib import Path

import pytest
import xxhash
from chunked import (
    chunk_ids,
    chunk_rows,
    export_file,
    manifest,
    set_manifest,
    set_stored_bytes,
    snapshot_seqs,
    stored_bytes,
    tamper_chunk,
)
from helpers import AGENTS, SNAPRUN, snaprun
from hypothesis import given, settings
from hypothesis import strategies as st

from snapstate._errors import (
    CorruptSnapshot,
    HeaderMismatch,
    SnapshotRejected,
    StoreDamaged,
)
from snapstate.runtime import _admin
from snapstate.serializers import _chunks
from snapstate.serializers._deframe import deframe
from snapstate.serializers._home import Home

CONVERSATION = AGENTS / "conversation.py"
LEASE_STEPS = AGENTS / "lease_steps.py"


def _home(store: Path, writable: bool = False) -> Home:
    return Home(str(store), create=False, writable=writable) if not writable else Home(str(store))


def _verify_all(store: Path, job: str) -> list[int]:
    """Every snapshot of the job checked (manifest, binding, every chunk)."""
    home = _home(store)
    try:
        rows = home.catalog.snapshots(job)
        for row in rows:
            home.verify_row(row)
        return [r.seq for r in rows]
    finally:
        home.close()


def _pack_files(store: Path) -> list[str]:
    folder = store / "chunks"
    return sorted(n for n in os.listdir(folder) if n.endswith(".pack")) if folder.is_dir() else []


# ------------------------------------------------------------------ what a step stores
def test_a_step_stores_what_changed_and_every_snapshot_restores(tmp_path):
    """A 40-step conversation: after the first steps, each step adds at most a few
    chunks (most as deltas), the whole history is far smaller than 40 full copies,
    and a fork from a middle snapshot resumes to the uninterrupted result."""
    store = tmp_path / "store"
    run = snaprun("run", "--store", store, "--job", "conv", CONVERSATION, "40", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert snapshot_seqs(store, "conv") == list(range(1, 41))
    rows = chunk_rows(store)
    added = len(rows) - len(set().union(*(chunk_ids(store, "conv", s) for s in (1, 2))))
    assert added <= 3 * 38, len(rows)
    assert sum(r.base is not None for r in rows) >= 20  # deltas against the last step
    full = sum(len(stored_bytes(store, r)) for r in rows if r.base is None)
    last = chunk_ids(store, "conv", 40)
    assert len(last) >= 2  # ~20 KB of conversation: more than one chunk
    # Stored once: far less than the sum of every snapshot's body.
    home = _home(store)
    try:
        bodies = sum(len(home.read_row(r)[1]) for r in home.catalog.snapshots("conv"))
    finally:
        home.close()
    stored = sum(len(stored_bytes(store, r)) for r in rows)
    assert stored * 10 < bodies, (stored, bodies, full)
    assert _verify_all(store, "conv") == list(range(1, 41))
    fork = snaprun("fork", "--store", store, "--as", "mid", "conv@17", cwd=tmp_path)
    assert fork.returncode == 0, fork.stderr
    assert len(chunk_rows(store)) == len(rows)  # a fork shares the chunks
    resumed = snaprun("resume", "--store", store, "mid", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.result == run.result


def test_prune_keeps_the_chains_a_kept_snapshot_needs(tmp_path):
    """Deltas chain at most MAX_DEPTH deep; pruning all but the latest snapshot sweeps
    the chains no kept chunk needs, never a kept delta's base: the latest still
    verifies."""
    store = tmp_path / "store"
    steps = _chunks.MAX_DEPTH * 2 + 10
    run = snaprun("run", "--store", store, "--job", "conv", CONVERSATION, str(steps), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    rows = chunk_rows(store)
    bases = {r.chunk_id: r.base for r in rows}
    for r in rows:
        depth, at = 0, r.chunk_id
        while bases[at] is not None:
            depth, at = depth + 1, bases[at]
        assert depth <= _chunks.MAX_DEPTH
    before = len(rows)
    home = _home(store, writable=True)
    try:
        report = _admin.prune(home, keep_last=1)
    finally:
        home.close()
    assert report.snapshots == steps - 1 and report.chunks > 0
    assert len(chunk_rows(store)) == before - report.chunks
    assert _verify_all(store, "conv") == [steps]


# ------------------------------------------------------------------ tampering
@pytest.fixture
def lease_store(tmp_path):
    """lease_steps' five snapshots (the second adds 1.1 MB: a pack file); its Canary
    writes `canary` if a snapshot is ever unpickled."""
    store = tmp_path / "store"
    canary = tmp_path / "canary"
    run = snaprun("run", "--store", store, "--job", "job", LEASE_STEPS, str(canary), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert not canary.exists()  # the run itself never unpickles; a resume would
    assert _pack_files(store), "snapshot 2 must have written a pack file"
    return store, canary


def _refused(store: Path, seq: int) -> SnapshotRejected | CorruptSnapshot | StoreDamaged:
    home = _home(store)
    try:
        with pytest.raises((SnapshotRejected, CorruptSnapshot, StoreDamaged)) as caught:
            home.verify_row(home.catalog.snapshot("job", seq))
        with pytest.raises(type(caught.value)):
            home.read_row(home.catalog.snapshot("job", seq))
        return caught.value
    finally:
        home.close()


def test_a_flipped_byte_in_any_chunk_is_refused(lease_store):
    """Every chunk of every snapshot (inline or in the pack), one byte flipped at a time:
    the snapshot is refused, naming it; restored, it verifies again."""
    store, canary = lease_store
    for seq in snapshot_seqs(store, "job"):
        for index in range(len(chunk_ids(store, "job", seq))):
            chunk = next(
                c for c in chunk_rows(store) if c.chunk_id == chunk_ids(store, "job", seq)[index]
            )
            original = stored_bytes(store, chunk)
            for at in (0, len(original) // 2, len(original) - 1):
                tamper_chunk(store, "job", seq, index, at)
                error = _refused(store, seq)
                assert f"snapshot {seq} of job job" in str(error)
                set_stored_bytes(store, chunk, original)
    assert _verify_all(store, "job") == [1, 2, 3, 4, 5]
    assert not canary.exists()


def test_every_other_edit_of_the_catalog_is_refused(lease_store, tmp_path):
    """Swapped manifests, a flipped manifest byte, a chunk deleted, its size, base or
    pack changed, a truncated pack: each refused before anything is unpickled; and
    `snaprun resume` of a tampered job exits 2 with one line, the canary untouched."""
    store, canary = lease_store
    db_path = store / "catalog.db"

    def sql(statement, *args):
        with closing(sqlite3.connect(db_path, isolation_level=None)) as db:
            db.execute(statement, args)

    three, four = manifest(store, "job", 3), manifest(store, "job", 4)
    set_manifest(store, "job", 3, four)
    set_manifest(store, "job", 4, three)
    assert isinstance(_refused(store, 3), HeaderMismatch | SnapshotRejected)
    assert isinstance(_refused(store, 4), HeaderMismatch | SnapshotRejected)
    set_manifest(store, "job", 3, three)
    set_manifest(store, "job", 4, four)
    flipped = bytearray(four)
    flipped[len(flipped) // 2] ^= 1
    set_manifest(store, "job", 4, bytes(flipped))
    _refused(store, 4)
    set_manifest(store, "job", 4, four)

    first = chunk_ids(store, "job", 5)[0]
    other = next(c.chunk_id for c in chunk_rows(store) if c.chunk_id != first)
    for change, undo in (
        (
            "UPDATE chunks SET size = size + 1 WHERE id = ?",
            "UPDATE chunks SET size = size - 1 WHERE id = ?",
        ),
        ("UPDATE chunks SET base = id WHERE id = ?", "UPDATE chunks SET base = NULL WHERE id = ?"),
    ):
        saved = next(c for c in chunk_rows(store) if c.chunk_id == first)
        sql(change, first)
        _refused(store, 5)
        sql(undo, first)
        if saved.base is not None:
            sql("UPDATE chunks SET base = ? WHERE id = ?", saved.base, first)
    saved = next(c for c in chunk_rows(store) if c.chunk_id == first)
    sql("UPDATE chunks SET base = ? WHERE id = ?", other, first)
    _refused(store, 5)
    sql("UPDATE chunks SET base = ? WHERE id = ?", saved.base, first)
    assert _verify_all(store, "job") == [1, 2, 3, 4, 5]

    packed = next(c for c in chunk_rows(store) if c.pack is not None)
    seq = next(
        s for s in snapshot_seqs(store, "job") if packed.chunk_id in chunk_ids(store, "job", s)
    )
    for bad in ("../catalog.db", "/etc/passwd", "nothing.pack"):
        sql("UPDATE chunks SET pack = ? WHERE id = ?", bad, packed.chunk_id)
        _refused(store, seq)
    sql("UPDATE chunks SET pack = ? WHERE id = ?", packed.pack, packed.chunk_id)
    pack = store / "chunks" / packed.pack
    data = pack.read_bytes()
    pack.write_bytes(data[: len(data) // 2])
    _refused(store, seq)
    pack.write_bytes(data)

    with closing(sqlite3.connect(db_path, isolation_level=None)) as db:
        row = db.execute("SELECT * FROM chunks WHERE id = ?", (first,)).fetchone()
        db.execute("DELETE FROM chunks WHERE id = ?", (first,))
    error = _refused(store, 5)
    assert "missing" in str(error)
    # The job's latest snapshot is refused by a real resume: one clear line, exit 2.
    sql("UPDATE jobs SET status = 'interrupted' WHERE job_id = 'job'")
    run = snaprun("resume", "--store", store, "job", cwd=tmp_path)
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr and "snapshot 5 of job job" in run.stderr
    with closing(sqlite3.connect(db_path, isolation_level=None)) as db:
        db.execute(f"INSERT INTO chunks VALUES ({','.join('?' * len(row))})", row)
    assert _verify_all(store, "job") == [1, 2, 3, 4, 5]
    assert not canary.exists()


# ------------------------------------------------------------------ encryption
def test_an_encrypted_store_leaks_no_plaintext_and_no_unkeyed_hash(tmp_path):
    """An encrypted store's files (catalog, WAL, packs) hold neither the agent's text
    nor any unkeyed hash of a chunk's content or of a whole body; chunk ids are keyed
    (two stores name the same content differently)."""
    marker = "ZQXJ-secret-marker"
    ids = {}
    bodies = {}
    for name in ("a", "b"):
        store = tmp_path / name
        assert snaprun("init", "--store", store, "--encrypt", cwd=tmp_path).returncode == 0
        run = snaprun(
            "run", "--store", store, "--job", "conv", CONVERSATION, "12", marker, cwd=tmp_path
        )
        assert run.returncode == 0, run.stderr
        ids[name] = {c.chunk_id for c in chunk_rows(store)}
        home = _home(store)
        try:
            bodies[name] = [bytes(home.read_row(r)[1]) for r in home.catalog.snapshots("conv")]
            codec = _chunks.codec(home.keys.current, True)
        finally:
            home.close()
    assert not ids["a"] & ids["b"]
    store = tmp_path / "a"
    raw = b"".join(p.read_bytes() for p in store.rglob("*") if p.is_file())
    assert marker.encode() not in raw and marker.encode("utf-16-le") not in raw
    assert any(marker.encode() in body for body in bodies["a"])  # it is in the state
    needles = set()
    for body in bodies["a"]:
        view = memoryview(body)
        start = 0
        pieces = [body]
        for end in codec.cuts(view):
            pieces.append(body[start:end])
            start = end
        for piece in pieces:
            for digest in (
                hashlib.sha256(piece).digest(),
                hashlib.sha1(piece).digest(),
                hashlib.md5(piece).digest(),
                hashlib.blake2b(piece).digest(),
                xxhash.xxh3_128_digest(piece),
                xxhash.xxh3_64_digest(piece),
            ):
                needles.add(digest[:16])
                needles.add(digest.hex()[:32].encode())
    assert not [n for n in needles if n in raw]


# ------------------------------------------------------------------ prune racing a writer
def test_a_chunk_swept_between_write_and_commit_is_stored_again(tmp_path):
    """A writer whose chunks the store already held (another job's), then lost to a
    prune before its commit: the commit stores them again; the snapshot verifies and
    holds the same body."""
    store = tmp_path / "store"
    run = snaprun("run", "--store", store, "--job", "old", CONVERSATION, "5", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    home = Home(str(store))
    try:
        source = home.catalog.snapshot("old", 5)
        header, payload = home.read_row(source)
        home.catalog.create_job("new", header["entry"], [])
        from snapstate.serializers._store import Owner

        epoch = home.catalog.acquire_lease("new", Owner.me(), 30)
        written = home.write_snapshot("new", 1, epoch, None, header, bytes(payload))
        assert written.body.new == ()  # every chunk already held: nothing new to store
        report = _admin.prune(home, finished=True)
        assert report.jobs == ["old"] and report.chunks > 0
        assert chunk_rows(store) == []
        home.commit_snapshot(written)
        row = home.catalog.snapshot("new", 1)
        _, digest = home.verify_row(row)
        assert bytes(home.read_row(row)[1]) == bytes(payload)
    finally:
        home.close()


def test_prune_racing_a_live_writer_never_deletes_a_chunk_it_needs(tmp_path):
    """A real writer process takes 120 snapshots while this process prunes finished
    twins of it (which share its first chunks) and sweeps in a loop: every snapshot
    the writer committed verifies, and the writer finishes with the uninterrupted
    result."""
    store = tmp_path / "store"
    baseline = snaprun(
        "run", "--store", tmp_path / "base", "--job", "b", CONVERSATION, "120", cwd=tmp_path
    )
    assert baseline.returncode == 0, baseline.stderr
    # A twin ahead of the writer: the writer finds each step's chunks held, by the twin
    # alone, while the loop below prunes the twin and sweeps.
    twin = snaprun("run", "--store", store, "--job", "twin0", CONVERSATION, "120", cwd=tmp_path)
    assert twin.returncode == 0, twin.stderr
    writer = subprocess.Popen(
        [
            SNAPRUN,
            "run",
            "--store",
            str(store),
            "--job",
            "live",
            str(CONVERSATION),
            "120",
            "msg",
            "0.03",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stop = threading.Event()
    sweeps = [0]

    def prune_loop():
        n = 0
        while not stop.is_set():
            home = Home(str(store))
            try:  # what `snaprun prune --finished` does, to the twins only
                dropped, _ = home.catalog.prune_job(
                    f"twin{n}", finished=True, keep_last=None, older_than=None
                )
                assert dropped
                home.sweep_chunks()
                sweeps[0] += 1
            finally:
                home.close()
            n += 1
            twin = snaprun(
                "run", "--store", store, "--job", f"twin{n}", CONVERSATION, "120", cwd=tmp_path
            )
            assert twin.returncode == 0, twin.stderr

    thread = threading.Thread(target=prune_loop)
    thread.start()
    try:
        out, err = writer.communicate(timeout=240)
    finally:
        stop.set()
        thread.join(timeout=120)
    assert writer.returncode == 0, err
    assert sweeps[0] >= 2
    assert "main() returned " + baseline.result in err
    assert _verify_all(store, "live") == list(range(1, 121))


# ------------------------------------------------------------------ a killed writer
def test_a_writer_killed_before_its_commit_leaves_nothing_referenced_missing(tmp_path):
    """SIGKILL after snapshot 2's pack is written, before its commit: the catalog lists
    snapshot 1 only, the pack is referenced by nothing; the resumed job ends with the
    uninterrupted result, every snapshot verifies, and prune sweeps the dead writer's
    pack."""
    store = tmp_path / "store"
    baseline = snaprun(
        "run", "--store", tmp_path / "base", "--job", "job", LEASE_STEPS, cwd=tmp_path
    )
    assert baseline.returncode == 0, baseline.stderr
    run = snaprun(
        "run", "--store", store, "--job", "job", LEASE_STEPS, cwd=tmp_path, fault="before-commit:2"
    )
    assert run.returncode == -9, run.stderr
    assert snapshot_seqs(store, "job") == [1]
    orphans = _pack_files(store)
    assert len(orphans) == 1
    assert not {c.pack for c in chunk_rows(store)} & set(orphans)
    resumed = snaprun("resume", "--store", store, "job", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.result == baseline.result
    assert _verify_all(store, "job") == [1, 2, 3, 4, 5]
    prune = snaprun("prune", "--store", store, "--keep-last", "5", cwd=tmp_path)
    assert prune.returncode == 0, prune.stderr
    assert "removed 1 unused pack file(s)" in prune.stdout
    assert set(_pack_files(store)) == {c.pack for c in chunk_rows(store) if c.pack}
    assert _verify_all(store, "job") == [1, 2, 3, 4, 5]


# ------------------------------------------------------------------ export and import
def test_export_import_round_trip_between_stores(tmp_path):
    """A chunked snapshot exported is one self-contained snapshot file (format 2) that
    `verify FILE` accepts; another store holding the key resumes it as a new job to the
    uninterrupted result; exporting it back gives a file that verifies too."""
    a, b = tmp_path / "a", tmp_path / "b"
    run = snaprun("run", "--store", a, "--job", "conv", CONVERSATION, "20", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    out = tmp_path / "conv-12.snap"
    exported = snaprun("export", "--store", a, "-o", out, "conv@12", cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    assert out.read_bytes().startswith(b"SNAPSTATE\0\x02\x00")
    assert snaprun("verify", "--store", a, out, cwd=tmp_path).returncode == 0
    home = _home(a)
    key_id = home.keys.current.key_id
    home.close()
    key = tmp_path / "key.json"
    assert snaprun("keys", "export", "--store", a, key_id, "-o", key, cwd=tmp_path).returncode == 0
    assert snaprun("init", "--store", b, cwd=tmp_path).returncode == 0
    assert snaprun("keys", "import", "--store", b, key, cwd=tmp_path).returncode == 0
    resumed = snaprun("resume", "--store", b, out, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.result == run.result
    back = export_file(b, "conv", 12, tmp_path / "back.snap")
    assert snaprun("verify", "--store", a, back, cwd=tmp_path).returncode == 0


# ------------------------------------------------------------------ unframed pickles
_LEAVES = st.one_of(
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=300),
    st.binary(max_size=300),
    st.builds(lambda n, b: bytes([b]) * n, st.integers(0, 200_000), st.integers(0, 255)),
    st.builds(lambda n: "é" * n, st.integers(0, 70_000)),
    st.builds(lambda n: bytearray(n), st.integers(0, 140_000)),
)
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=8),
        st.dictionaries(st.text(max_size=10), inner, max_size=8),
        st.tuples(inner, inner),
    ),
    max_leaves=20,
)


@settings(max_examples=60, deadline=None)
@given(_VALUES)
def test_an_unframed_pickle_loads_as_the_framed_one(value):
    """deframe drops every FRAME opcode of a protocol 5 pickle (large arguments written
    outside frames included) and the result loads to an equal value."""
    data = pickle.dumps(value, protocol=5)
    plain = deframe(data)
    assert pickle.loads(plain) == value
    frames = sum(op.name == "FRAME" for op, _, _ in pickletools.genops(data))
    assert len(data) - len(plain) == 9 * frames
    assert not any(op.name == "FRAME" for op, _, _ in pickletools.genops(plain))


def test_deframe_leaves_what_it_does_not_recognise():
    assert deframe(b"not a pickle") == b"not a pickle"
    assert deframe(b"\x80\x05\x95\xff\xff\xff\xff\x00\x00\x00\x00K\x01.") == (
        b"\x80\x05\x95\xff\xff\xff\xff\x00\x00\x00\x00K\x01."
    )


# ------------------------------------------------------------------ cutting against the last body
@pytest.fixture(scope="module")
def codec(tmp_path_factory):
    from snapstate.serializers._keys import KeyRing

    return _chunks.codec(KeyRing(str(tmp_path_factory.mktemp("keys"))).current, False)


_EDITS = st.lists(
    st.tuples(
        st.sampled_from(["insert", "delete", "replace"]),
        st.floats(0, 1),
        st.binary(min_size=0, max_size=3000),
        st.integers(0, 5000),
    ),
    max_size=4,
)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), edits=_EDITS)
def test_cutting_against_the_last_body_is_exact(codec, seed, edits):
    """Whatever edits turn the last body into the new one (inserts, deletions,
    replacements anywhere, several at once), the chunks taken from the last body and
    those cut afresh concatenate to the new body exactly, and each id is its content's;
    the chunks not computed afresh are the last body's own."""
    import random

    from snapstate.serializers._chunkstore import _cut, _Last

    rng = random.Random(seed)
    words = [bytes(rng.choice(b"abcdefgh") for _ in range(rng.randrange(3, 9))) for _ in range(50)]
    old = b" ".join(rng.choice(words) for _ in range(rng.randrange(2000, 60000)))
    refs, offsets, _ = _cut(codec, old, None)
    last = _Last(codec, 1, old, refs, offsets, {})
    new = bytearray(old)
    for kind, where, data, length in edits:
        at = int(where * len(new))
        if kind == "insert":
            new[at:at] = data
        elif kind == "delete":
            del new[at : at + length]
        else:
            new[at : at + len(data)] = data
    new = bytes(new)
    refs2, offsets2, fresh = _cut(codec, new, last)
    assert b"".join(new[o : o + size] for (_, size), o in zip(refs2, offsets2)) == new
    assert offsets2 == [sum(size for _, size in refs2[:i]) for i in range(len(refs2))]
    for (chunk_id, size), o in zip(refs2, offsets2):
        assert codec.chunk_id(new[o : o + size]) == chunk_id
        assert 0 < size <= _chunks.MAX_SIZE
    assert {c for c, _ in refs2} - fresh <= {c for c, _ in refs}


def test_a_pack_committed_between_the_sweep_and_the_deletion_is_kept(tmp_path):
    """Prune's mark and sweep, then a writer commits a snapshot with a pack and exits,
    then prune deletes the packs no chunk lives in: it asks the catalog again after
    judging the writers, so the committed pack stays and the snapshot verifies."""
    store = tmp_path / "store"
    assert snaprun("init", "--store", store, cwd=tmp_path).returncode == 0
    home = Home(str(store))
    try:
        assert home.catalog.sweep_chunks() == (0, set())  # the sweep, before the writer
        run = snaprun("run", "--store", store, "--job", "job", LEASE_STEPS, cwd=tmp_path)
        assert run.returncode == 0, run.stderr  # its packs committed, its process gone
        packs = _pack_files(store)
        assert packs
        assert home.chunks.sweep_packs() == 0
    finally:
        home.close()
    assert _pack_files(store) == packs
    assert _verify_all(store, "job") == [1, 2, 3, 4, 5]
