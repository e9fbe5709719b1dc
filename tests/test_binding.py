"""A snapshot file is bound to its catalog row: its header names the store, job, seq
and lease epoch, and the row records its digest. Restore (resume, replay), inspect,
export and fork refuse any other file put at the row's place: another job's validly
signed snapshot, a dropped branch's file (a rollback), a forgery signed with the
store's key. Forks and imports, whose files name the original job, keep working."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
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
    a's rows are 1 (epoch 1) and 2 (epoch 2). The files of a's dropped branch (2 and 3
    of epoch 1) are kept in root/dropped/. Tests work on copies."""
    root = tmp_path_factory.mktemp("binding")
    store = root / "store"
    for job in ("a", "b"):
        run = snaprun(
            "run", "--store", store, "--job", job, LOOPS, cwd=root, fault="after-snapshot:3"
        )
        assert run.returncode == -9, run.stderr
    (root / "dropped").mkdir()
    for name in ("000002-e1.snap", "000003-e1.snap"):
        shutil.copy(store / "snapshots" / "a" / name, root / "dropped" / name)
    run = snaprun("resume", "--store", store, "--at", "1", "a", cwd=root, fault="after-snapshot:2")
    assert run.returncode == -9, run.stderr
    assert sorted(p.name for p in (store / "snapshots" / "a").iterdir()) == [
        "000001-e1.snap",
        "000002-e2.snap",
    ]
    return root


@pytest.fixture
def root(pristine, tmp_path) -> Path:
    shutil.copytree(pristine, tmp_path / "root")
    return tmp_path / "root"


def _home(root: Path) -> Home:
    return Home(str(root / "store"), create=False, writable=True)


def _refused(root: Path, job: str, seq: int, *needles: str) -> None:
    """read_row and verify_row of the job's row refuse its file, naming what differs."""
    home = _home(root)
    try:
        row = home.catalog.snapshot(job, seq)
        for read in (home.read_row, home.verify_row):
            with pytest.raises(HeaderMismatch) as info:
                read(row)
            for needle in needles:
                assert needle in str(info.value), str(info.value)
            assert row.file in str(info.value)
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
    """b's validly signed snapshot 2 copied over a's snapshot 2 (same store, same key,
    same seq): resume, inspect, export, replay and fork of a refuse it with exit 2
    naming job 'b'; a stays interrupted at its snapshot 2, nothing of b's ran (before,
    a resumed silently as b)."""
    store = root / "store"
    target = store / "snapshots" / "a" / "000002-e2.snap"
    shutil.copy(store / "snapshots" / "b" / "000002-e1.snap", target)
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
    """A rollback: a's dropped snapshot 2 (epoch 1) put back at the path of its new
    snapshot 2 (epoch 2) is refused, saying the epochs differ (before, resume silently
    continued the dropped branch)."""
    store = root / "store"
    shutil.copy(root / "dropped" / "000002-e1.snap", store / "snapshots" / "a" / "000002-e2.snap")
    _refused(root, "a", 2, "epoch 1", "epoch 2")
    run = snaprun("resume", "--store", store, "a", cwd=root)
    assert run.returncode == 2 and "epoch" in run.stderr and run.stdout == "", run.stderr


def test_dropped_branch_file_at_its_own_path_with_the_row_edited_is_refused(root):
    """A rollback made in the catalog: the dropped snapshot 2 restored at its own old
    path and a's row 2 edited to name that file is refused (epoch and digest)."""
    store = root / "store"
    shutil.copy(root / "dropped" / "000002-e1.snap", store / "snapshots" / "a" / "000002-e1.snap")
    db = sqlite3.connect(store / "catalog.db")
    db.execute(
        "UPDATE snapshots SET file = 'snapshots/a/000002-e1.snap' WHERE job_id = 'a' AND seq = 2"
    )
    db.commit()
    db.close()
    _refused(root, "a", 2, "epoch 1", "digest")


def test_forgery_with_the_same_identity_is_refused_by_its_digest(root):
    """A file signed with the store's own key whose header says the very store, job,
    seq and epoch of a's row 2, but whose body is another: only the digest the catalog
    recorded tells it apart, and it is refused."""
    home = _home(root)
    try:
        row = home.catalog.snapshot("a", 2)
        header, payload = home.read_row(row)
        path = home.absolute(row.file)
        body = payload.replace(b"while-4", b"whilE-4")
        assert body != payload
        _snapfile.write(
            path,
            {k: v for k, v in header.items() if k not in ("key_id", "chunk_size", "codecs")},
            body,
            home.keys,
        )
        assert _snapfile.verify(path, home.keys)["epoch"] == row.epoch  # validly signed
    finally:
        home.close()
    _refused(root, "a", 2, "digest")


def test_forks_and_imports_keep_resuming(root, monkeypatch):
    """Positive control: a fork (f from a@2), a fork of that fork (g from f@2) and an
    export of a@2 imported as job `imp` hold files whose header names job a: their rows
    record that origin and the digest, so they verify, and g resumes to the end; b's
    file put in place of g's snapshot 2 is still refused."""
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
        header, row = home.import_file(str(root / "a2.snap"), "imp")
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
    shutil.copy(
        store / "snapshots" / "b" / "000001-e1.snap", store / "snapshots" / "f" / "000001-e0.snap"
    )
    _refused(root, "f", 1, "names job 'b'", "digest")


def test_write_snapshot_binds_the_header(root):
    """Home.write_snapshot writes the store id, job, seq and epoch it is given into the
    header, whatever the header passed says, and the row records the file's digest."""
    home = _home(root)
    try:
        header, payload = home.read_row(home.catalog.snapshot("b", 1))
        forged = dict(header, job_id="someone-else", seq=99, epoch=7, store_id="x" * 32)
        row = home.write_snapshot("b", 4, 1, None, forged, payload)
        written, digest = _snapfile.verify_digest(home.absolute(row.file), home.keys)
        assert (written["job_id"], written["seq"], written["epoch"], written["store_id"]) == (
            "b",
            4,
            1,
            home.store_id,
        )
        assert row.digest == digest
    finally:
        home.close()
