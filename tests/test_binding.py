"""A snapshot is bound to its catalog row: its header (a chunked snapshot's manifest,
or a snapshot file's) names the store, job, seq and lease epoch, and the row records
its digest (the manifest's signature, or the file's). Restore (resume, replay),
inspect, export and fork refuse any other manifest or file put at the row's place:
another job's validly signed snapshot, a dropped branch's (a rollback), a forgery
signed with the store's key. Forks and imports, which name the original job, keep
working."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sqlite3
import struct
from pathlib import Path

import pytest
from chunked import export_file, manifest, set_manifest
from click.testing import CliRunner
from helpers import AGENTS, snaprun

from snapstate import HeaderMismatch
from snapstate.runtime._cli import cli
from snapstate.serializers import _snapfile
from snapstate.serializers._home import Home

LOOPS = AGENTS / "loops.py"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """A store with two loops.py jobs, each SIGKILLed after its snapshot 3: `b`, and
    `a`, which was then resumed `--at 1` and killed after its new snapshot 2 (epoch 2):
    a's rows are 1 (epoch 1) and 2 (epoch 2). The manifests of a's dropped branch (2
    and 3 of epoch 1) are kept in root/dropped/. Tests work on copies."""
    root = tmp_path_factory.mktemp("binding")
    store = root / "store"
    for job in ("a", "b"):
        run = snaprun(
            "run", "--store", store, "--job", job, LOOPS, cwd=root, fault="after-snapshot:3"
        )
        assert run.returncode == -9, run.stderr
    (root / "dropped").mkdir()
    for seq in (2, 3):
        (root / "dropped" / f"{seq}-e1.manifest").write_bytes(manifest(store, "a", seq))
    run = snaprun("resume", "--store", store, "--at", "1", "a", cwd=root, fault="after-snapshot:2")
    assert run.returncode == -9, run.stderr
    db = sqlite3.connect(f"file:{store / 'catalog.db'}?mode=ro", uri=True)
    rows = list(
        db.execute("SELECT seq, epoch, file FROM snapshots WHERE job_id = 'a' ORDER BY seq")
    )
    db.close()
    assert rows == [(1, 1, ""), (2, 2, "")]  # chunked
    assert manifest(store, "a", 2) != (root / "dropped" / "2-e1.manifest").read_bytes()
    return root


@pytest.fixture
def root(pristine, tmp_path) -> Path:
    shutil.copytree(pristine, tmp_path / "root")
    return tmp_path / "root"


def _home(root: Path) -> Home:
    return Home(str(root / "store"), create=False, writable=True)


def _refused(root: Path, job: str, seq: int, *needles: str) -> None:
    """read_row and verify_row of the job's row refuse its manifest (or file), naming
    the snapshot (or file) and what differs."""
    home = _home(root)
    try:
        row = home.catalog.snapshot(job, seq)
        where = f"snapshot {seq} of job {job}" if row.file == "" else row.file
        for read in (home.read_row, home.verify_row):
            with pytest.raises(HeaderMismatch) as info:
                read(row)
            for needle in needles:
                assert needle in str(info.value), str(info.value)
            assert where in str(info.value)
    finally:
        home.close()


def _cli(root: Path, *args, monkeypatch):
    monkeypatch.chdir(root)
    monkeypatch.delenv("SNAPSTATE_KEY", raising=False)
    return CliRunner().invoke(cli, [str(a) for a in args])


def _exit_2(result, needle: str) -> None:
    assert isinstance(result.exception, SystemExit) and result.exit_code == 2, result.stderr
    assert needle in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_other_jobs_snapshot_at_this_jobs_path_is_refused(root, monkeypatch):
    """b's validly signed snapshot 2 (its manifest) copied over a's snapshot 2 (same
    store, same key, same seq): resume, inspect, export, replay and fork of a refuse it with exit 2
    naming job 'b'; a stays interrupted at its snapshot 2, nothing of b's ran (before,
    a resumed silently as b)."""
    store = root / "store"
    set_manifest(store, "a", 2, manifest(store, "b", 2))
    _refused(root, "a", 2, "names job 'b'")
    for args in (
        ["inspect", "--store", store, "a@2"],
        ["inspect", "--store", store, "a"],
        ["export", "--store", store, "-o", root / "x.snap", "a@2"],
        ["replay", "--store", store, "a@2"],
        ["fork", "--store", store, "--as", "f", "a@2"],
    ):
        _exit_2(_cli(root, *args, monkeypatch=monkeypatch), "names job 'b'")
    assert not (root / "x.snap").exists()
    run = snaprun("resume", "--store", store, "a", cwd=root)
    assert run.returncode == 2 and "names job 'b'" in run.stderr, run.stderr
    assert run.stdout == ""
    home = _home(root)
    try:
        assert home.catalog.effective_status(home.catalog.get_job("a"), 0) == "interrupted"
        assert [r.seq for r in home.catalog.snapshots("a")] == [1, 2]
        assert [j.job_id for j in home.catalog.list_jobs()] == ["a", "b"]  # no fork
    finally:
        home.close()


def test_dropped_branch_file_at_the_new_rows_path_is_refused(root):
    """A rollback: the manifest of a's dropped snapshot 2 (epoch 1) put back in place of
    its new snapshot 2's (epoch 2) is refused, saying the epochs differ (before, resume
    silently continued the dropped branch)."""
    store = root / "store"
    set_manifest(store, "a", 2, (root / "dropped" / "2-e1.manifest").read_bytes())
    _refused(root, "a", 2, "epoch 1", "epoch 2")
    run = snaprun("resume", "--store", store, "a", cwd=root)
    assert run.returncode == 2 and "epoch" in run.stderr and run.stdout == "", run.stderr


def test_dropped_branch_file_at_its_own_path_with_the_row_edited_is_refused(root):
    """A rollback made in the catalog: the dropped snapshot 2 restored as a file at its
    own old path (signed by the store, as an export of it was) and a's row 2 edited to
    name that file is refused (epoch and digest); so is the dropped manifest put back
    with the row's digest edited to match it (epoch)."""
    store = root / "store"
    dropped = (root / "dropped" / "2-e1.manifest").read_bytes()
    copy = root.parent / "copy"
    shutil.copytree(store, copy)
    set_manifest(copy, "a", 2, dropped)
    (store / "snapshots" / "a").mkdir(parents=True, exist_ok=True)
    home = Home(str(copy), create=False, writable=False)
    try:  # the dropped snapshot as a file, by the store's own code (export_row)
        home.export_row(
            dataclasses.replace(home.catalog.snapshot("a", 2), epoch=1, digest=None),
            str(store / "snapshots" / "a" / "000002-e1.snap"),
        )
    finally:
        home.close()
    db = sqlite3.connect(store / "catalog.db")
    db.execute(
        "UPDATE snapshots SET file = 'snapshots/a/000002-e1.snap' WHERE job_id = 'a' AND seq = 2"
    )
    db.commit()
    db.close()
    _refused(root, "a", 2, "epoch 1", "digest")
    db = sqlite3.connect(store / "catalog.db")
    digest = dropped[-32:].hex()
    db.execute(
        "UPDATE snapshots SET file = '', digest = ? WHERE job_id = 'a' AND seq = 2", (digest,)
    )
    db.commit()
    db.close()
    set_manifest(store, "a", 2, dropped)
    _refused(root, "a", 2, "epoch 1")


def test_forgery_with_the_same_identity_is_refused_by_its_digest(root):
    """A manifest signed with the store's own key whose header says the very store,
    job, seq and epoch of a's row 2, but whose body is another (its chunks stored too):
    only the digest the catalog recorded tells it apart, and it is refused. The same
    for a file at a file row's place."""
    store = root / "store"
    home = _home(root)
    try:
        row = home.catalog.snapshot("a", 2)
        header, payload = home.read_row(row)
        body = bytes(payload).replace(b"while-4", b"whilE-4")
        assert body != payload
        prepared = home.write_snapshot("a", 2, row.epoch, row.label, header, body)
        assert prepared.row.digest != row.digest
    finally:
        home.close()
    db = sqlite3.connect(store / "catalog.db")
    db.executemany(
        "INSERT OR IGNORE INTO chunks (id, size, data, pack, offset, length, base) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            (c.chunk_id, c.size, c.data, c.pack, c.offset, c.length, c.base)
            for c in prepared.body.new
        ],
    )
    db.commit()
    db.close()
    set_manifest(store, "a", 2, prepared.body.manifest)
    _refused(root, "a", 2, "digest")

    # a file row: b's snapshot 1 as a file (imported), then a forgery at its place
    home = _home(root)
    try:
        path = export_file(store, "b", 1, root / "b1.snap")
        header, row, _ = home.import_file(str(path), "bf")
        home.catalog.create_job("bf", header["entry"], header["argv"])
        home.catalog.add_snapshot_unfenced(row)
        assert home.verify_row(row)[0]["seq"] == 1
        header, payload = home.read_row(row)
        target = home.absolute(row.file)
        forged = bytes(payload).replace(b"while-4", b"whilE-4") + b"."
        _snapfile.write(
            target,
            {k: v for k, v in header.items() if k not in ("key_id", "chunk_size", "codecs")},
            forged,
            home.keys,
        )
        assert _snapfile.verify(target, home.keys)["job_id"] == "b"  # validly signed
    finally:
        home.close()
    _refused(root, "bf", 1, "digest")


def test_forks_and_imports_keep_resuming(root, monkeypatch):
    """Positive control: a fork (f from a@2), a fork of that fork (g from f@2) and an
    export of a@2 imported as job `imp` hold snapshots (the same manifests; a file)
    whose header names job a: their rows record that origin and the digest, so they
    verify, and g resumes to the end; b's manifest put in place of f's snapshot 1, and
    b's file in place of imp's, are still refused."""
    store = root / "store"
    for args in (
        ["fork", "--store", store, "--as", "f", "a@2"],
        ["fork", "--store", store, "--as", "g", "f@2"],
        ["export", "--store", store, "-o", root / "a2.snap", "a@2"],
    ):
        result = _cli(root, *args, monkeypatch=monkeypatch)
        assert result.exit_code == 0, result.stderr
    home = _home(root)
    try:
        header, row, _ = home.import_file(str(root / "a2.snap"), "imp")
        home.catalog.create_job("imp", header["entry"], header["argv"])
        home.catalog.add_snapshot_unfenced(row)
        for job in ("f", "g", "imp"):
            rows = home.catalog.snapshots(job)
            assert rows[-1].seq == 2 and rows[-1].origin["job"] == "a"
            assert rows[-1].origin["epoch"] == 2 and rows[-1].digest
            for r in rows:
                assert home.verify_row(r)[0]["job_id"] == "a"
    finally:
        home.close()
    run = snaprun("resume", "--store", store, "g", cwd=root)
    assert run.returncode == 0 and run.result == "13", run.stderr
    assert "resumed from snapshot 2" in run.stderr
    set_manifest(store, "f", 1, manifest(store, "b", 1))
    _refused(root, "f", 1, "names job 'b'", "digest")
    imported = store / "snapshots" / "imp" / "000002-e0.snap"
    assert imported.exists()
    export_file(store, "b", 2, imported)  # b's file in place of imp's (a file row)
    _refused(root, "imp", 2, "names job 'b'", "digest")


def test_write_snapshot_binds_the_header(root):
    """Home.write_snapshot writes the store id, job, seq and epoch it is given into the
    manifest's header, whatever the header passed says, and the row records the
    manifest's digest."""
    home = _home(root)
    try:
        header, payload = home.read_row(home.catalog.snapshot("b", 1))
        forged = dict(header, job_id="someone-else", seq=99, epoch=7, store_id="x" * 32)
        prepared = home.write_snapshot("b", 4, 1, None, forged, bytes(payload))
        row = prepared.row
        data = prepared.body.manifest
        (length,) = struct.unpack_from("<I", data, 12)
        written = json.loads(data[16 : 16 + length])
        assert (written["job_id"], written["seq"], written["epoch"], written["store_id"]) == (
            "b",
            4,
            1,
            home.store_id,
        )
        assert row.digest == data[-32:].hex() and row.file == ""
    finally:
        home.close()
