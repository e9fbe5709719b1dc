"""Hostile job ids and hostile catalog rows (issue 8, item 1).

A job id names a folder of the store, so every id from the issue goes through the real
CLI: each is refused with exit 2 and a clear message before anything runs or is
created, and the file tree of the store and of the directory around it is unchanged
(snapshotted before and after). Catalog rows are hostile too: a tampered catalog.db
naming ids or files outside the store makes prune, inspect and resume refuse, and
nothing outside <store>/snapshots/<valid job> is read, written or deleted.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from chunked import chunk_ids, export_file
from helpers import AGENTS, snaprun

from snapstate import InvalidJobId, StoreDamaged
from snapstate.runtime._agent import EntryPoint
from snapstate.runtime._job import Job
from snapstate.serializers import _snapfile
from snapstate.serializers._home import Home
from snapstate.serializers._ids import MAX_LENGTH, is_valid_job_id

LOOPS = AGENTS / "loops.py"


def tree(root: Path, *, skip_catalog: bool = False) -> dict:
    """Every file and folder under root: (kind, size, mtime, mode), by relative path."""
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder, name)
            rel = str(path.relative_to(root))
            if skip_catalog and name.startswith("catalog.db"):
                continue
            st = path.lstat()
            # the catalog's -wal and -shm come and go as SQLite opens it: with
            # skip_catalog the store folder's own mtime is not compared
            mtime = None if skip_catalog and (path / "catalog.db").exists() else st.st_mtime_ns
            found[rel] = ("dir" if path.is_dir() else "file", st.st_size, mtime, st.st_mode)
    return found


def catalog_dump(store: Path) -> list:
    """The catalog's rows, read without writing."""
    db = sqlite3.connect(f"file:{store / 'catalog.db'}?mode=ro", uri=True)
    try:
        return [
            (t, sorted(map(repr, db.execute(f"SELECT * FROM {t}"))))
            for t in ("jobs", "snapshots", "leases", "effects", "metrics")
        ]
    finally:
        db.close()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A directory holding a store with a job SIGKILLed after snapshot 3 (`job`), a
    second job's snapshots (`other`, a copy of `job`'s), a victim folder outside the
    store and job's snapshot 2 exported outside it (a validly signed FILE)."""
    root = tmp_path_factory.mktemp("hostile")
    store = root / "store"
    killed = snaprun(
        "run", "--store", store, "--job", "job", LOOPS, cwd=root, fault="after-snapshot:3"
    )
    assert killed.returncode == -9, killed.stderr
    victim = root / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    export_file(store, "job", 2, root / "job-2.snap")
    export_file(store, "job", 1, root / "job-1.snap")
    return root, store, victim


def _refused(
    root: Path, args: list, message: str = "is not allowed", *, skip_catalog: bool = False
) -> None:
    before = tree(root, skip_catalog=skip_catalog)
    run = snaprun(*args, cwd=root)
    assert run.returncode == 2, (args, run.returncode, run.stderr)
    assert message in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert run.stdout == ""
    assert tree(root, skip_catalog=skip_catalog) == before


HOSTILE = ["..", ".", "ABS", "../snapshots/job", "../../x", "a/b", "job\nb", "x" * 300, "-job", ""]


@pytest.mark.parametrize("job_id", HOSTILE, ids=repr)
def test_run_refuses_a_hostile_job_id_and_creates_nothing(world, job_id):
    """`run --job ID` with each id from the issue (an absolute folder, paths into the
    store, a newline, 300 characters, a leading dash, empty): exit 2 naming the rule,
    the agent never ran, and no file or folder changed in the store or around it."""
    root, store, victim = world
    job_id = str(victim) if job_id == "ABS" else job_id
    _refused(root, ["run", "--store", store, "--job", job_id, LOOPS])


def test_run_into_a_store_that_does_not_exist_creates_no_store(world):
    """A refused id creates not even the store it names."""
    root, _, _ = world
    _refused(root, ["run", "--store", root / "new-store", "--job", "..", LOOPS])
    assert not (root / "new-store").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["fork", "job@2", "--as", "../../x"],
        ["fork", "job@2", "--as", "."],
        ["fork", "../snapshots/job@2"],
        ["resume", "FILE", "--as", ".."],
        ["resume", "--as", "a/b", "FILE"],
        ["resume", ".."],
        ["resume", "ABS"],
        ["log", ".."],
        ["effects", "ABS"],
        ["inspect", "../snapshots/job@1"],
        ["export", "..@1", "-o", "out.snap"],
        ["replay", "../job@1"],
        ["reconcile", "..", "1", "--committed"],
        ["stats", "."],
    ],
    ids=lambda a: " ".join(a),
)
def test_every_command_refuses_a_hostile_id(world, args):
    """Every command taking JOB, JOB@SEQ or a new id (--as) refuses a hostile one
    with exit 2 before it opens the store: nothing changes anywhere."""
    root, store, victim = world
    args = [
        str(root / "job-2.snap") if a == "FILE" else str(victim) if a == "ABS" else a for a in args
    ]
    _refused(root, [args[0], "--store", store, *args[1:]])


def test_a_signed_file_carrying_a_hostile_job_id_is_refused(world):
    """`resume FILE` of a validly signed file whose header names the job `../../evil`:
    exit 2, no job, no file or folder created (the store's catalog rows unchanged)."""
    root, store, _ = world
    home = Home(str(store))
    try:
        header, payload = home.read(str(root / "job-2.snap"))
        forged = root / "forged.snap"
        _snapfile.write(str(forged), dict(header, job_id="../../evil"), payload, home.keys)
        home.verify(str(forged))  # validly signed
    finally:
        home.close()
    rows = catalog_dump(store)
    try:
        for extra in ([], ["--as", "fine"]):
            _refused(
                root,
                ["resume", "--store", store, *extra, forged],
                "the job id in the header",
                skip_catalog=True,
            )
        assert catalog_dump(store) == rows
    finally:
        forged.unlink()


def test_a_generated_id_is_always_valid(world):
    """A script named `my agent!.py` gets a sanitized generated id and runs."""
    root, _, _ = world
    script = root / "scripts" / "my agent!.py"
    script.parent.mkdir()
    script.write_text("def main():\n    return 7\n")
    run = snaprun("run", "--store", root / "gen-store", script, cwd=root)
    assert run.returncode == 0 and run.result == "7", run.stderr
    (job_id,) = [line.split()[2] for line in run.stderr.splitlines() if " started" in line]
    assert is_valid_job_id(job_id) and job_id.startswith("my-agent-"), job_id
    shutil.rmtree(root / "gen-store")
    shutil.rmtree(root / "scripts")


def test_the_python_api_refuses_hostile_ids(world, tmp_path):
    """Job.create and Job.open refuse a NUL, a slash, '..' and a 129-character id with
    InvalidJobId; no catalog row and no folder is created."""
    root, _, _ = world
    home = Home(str(tmp_path / "store"))
    try:
        entry = EntryPoint.parse(str(LOOPS))
        for job_id in ("a\0b", "a/b", "..", "x" * (MAX_LENGTH + 1)):
            with pytest.raises(InvalidJobId, match="is not allowed"):
                Job.create(home, entry, [], job_id)
            with pytest.raises(InvalidJobId):
                Job.open(home, job_id)
        assert home.catalog.list_jobs() == []
        assert os.listdir(tmp_path / "store" / "snapshots") == []
    finally:
        home.close()


# ------------------------------------------------------------------ hostile catalog rows
@pytest.fixture
def tampered(world, tmp_path):
    """A copy of the store whose catalog was edited with sqlite3: done jobs named '..',
    '.', an absolute folder and '../outside'; the valid job `job`'s latest row pointing
    at a validly signed file outside the store; and a valid done job `finished`."""
    root, store, _ = world
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    shutil.copy(root / "job-2.snap", victim / "000004-e1.snap")  # would restore as 4
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "000001-e1.snap").write_text("not mine")
    db = sqlite3.connect(copy / "catalog.db")
    with db:
        job = db.execute("SELECT entry, argv FROM jobs WHERE job_id = 'job'").fetchone()
        for job_id in ("..", ".", str(victim), "../outside", "finished"):
            db.execute(
                "INSERT INTO jobs (job_id, entry, argv, status, created, updated) "
                "VALUES (?, ?, ?, 'done', 0, 0)",
                (job_id, *job),
            )
        db.execute(
            "INSERT INTO snapshots VALUES ('../outside', 1, NULL, "
            "'snapshots/../../outside/000001-e1.snap', 8, 0, 1, NULL, NULL)"
        )
        db.execute(
            "INSERT INTO snapshots VALUES ('job', 4, NULL, ?, 8, 0, 1, NULL, NULL)",
            ("snapshots/job/../../../victim/000004-e1.snap",),
        )
    db.close()
    (copy / "snapshots" / "finished").mkdir()
    shutil.copy(root / "job-1.snap", copy / "snapshots" / "finished" / "000001-e1.snap")
    return copy, victim, outside


def test_prune_finished_deletes_nothing_outside_a_valid_jobs_folder(tampered):
    """`prune --finished` with done jobs named '..', '.', an absolute folder and
    '../outside' in the catalog: the store, its other jobs' snapshots, the victim
    folder and the folder beside the store are intact; the valid done job is pruned;
    exit 2 naming each refused row."""
    store, victim, outside = tampered
    before = tree(store.parent, skip_catalog=True)
    run = snaprun("prune", "--store", store, "--finished", cwd=store.parent)
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr and "1 finished job(s): finished" in run.stdout
    for bad in ("'..'", "'.'", repr(str(victim)), "'../outside'", "'job'"):
        assert f"job {bad} was not pruned" in run.stderr, run.stderr
    after = tree(store.parent, skip_catalog=True)
    gone = set(before) - set(after)
    assert gone == {"store/snapshots/finished", "store/snapshots/finished/000001-e1.snap"}
    changed = {k for k in after if after[k] != before[k]}
    assert changed == {"store/snapshots"}  # its entry `finished` was removed
    assert (victim / "precious.txt").read_text() == "keep me"


@pytest.mark.parametrize("command", ["inspect", "resume", "export"])
def test_a_row_naming_a_file_outside_the_store_is_never_read(tampered, command):
    """inspect / resume / export of a job whose latest catalog row names a validly
    signed file outside the store (snapshots/job/../../../victim/...): exit 2 naming
    the row, nothing outside the store read, written or deleted."""
    store, victim, _ = tampered
    before = tree(store.parent, skip_catalog=True)
    ref = "job@4" if command == "export" else "job"
    extra = ["-o", str(store.parent / "out.snap")] if command == "export" else []
    run = snaprun(command, "--store", store, ref, *extra, cwd=store.parent)
    assert run.returncode == 2, run.stderr
    assert "outside" in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert run.stdout == ""
    assert tree(store.parent, skip_catalog=True) == before


@pytest.mark.parametrize("how", ["pack-name", "pack-symlink", "chunks-symlink"])
def test_a_chunk_placed_outside_the_store_is_never_read(world, tmp_path, how):
    """A chunk row of job's latest snapshot edited to lie outside the store: its `pack`
    naming a path that leaves <store>/chunks ('../../victim/precious.txt'), a pack
    that is a symbolic link to a file outside, or <store>/chunks itself a symbolic link
    to a folder outside. inspect, verify, export and resume exit 2 naming the snapshot
    and saying the store was tampered with (or naming the linked pack); nothing
    outside the store (or in it) changed."""
    root, store, _ = world
    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_bytes(b"keep me" * 100)
    wanted = chunk_ids(copy, "job", 3)[0]
    pack = {"pack-name": "../../victim/precious.txt"}.get(how, "x.0-e1.1-1.00.pack")
    db = sqlite3.connect(copy / "catalog.db")
    with db:
        db.execute(
            "UPDATE chunks SET pack = ?, data = NULL, offset = 0, length = 7 WHERE id = ?",
            (pack, wanted),
        )
    db.close()
    if how == "pack-symlink":
        (copy / "chunks").mkdir(exist_ok=True)
        os.symlink(victim / "precious.txt", copy / "chunks" / pack)
    elif how == "chunks-symlink":
        shutil.rmtree(copy / "chunks", ignore_errors=True)
        (victim / pack).write_bytes(b"keep me" * 100)
        os.symlink(victim, copy / "chunks")
    for args in (
        ["inspect", "job"],
        ["verify", "job@3"],
        ["export", "job@3", "-o", str(tmp_path / "out.snap")],
        ["resume", "job"],
    ):
        before = tree(tmp_path, skip_catalog=True)
        run = snaprun(args[0], "--store", copy, *args[1:], cwd=tmp_path)
        assert run.returncode == 2, (args, run.stderr)
        assert "Traceback" not in run.stderr and run.stdout == "", run.stderr
        assert "snapshot 3 of job job" in run.stderr, run.stderr
        # (a pack that is a symbolic link is refused with the OS's words, naming the pack)
        assert ("tampered" if how != "pack-symlink" else pack) in run.stderr, run.stderr
        assert tree(tmp_path, skip_catalog=True) == before
    assert not (tmp_path / "out.snap").exists()


def test_home_confines_every_derived_path(tmp_path):
    """Home refuses ids and catalog files that leave the store: relative escapes,
    absolute paths, a job folder that is a symlink to elsewhere (deleting it, writing
    into it, listing it), a NUL; nothing outside is touched."""
    home = Home(str(tmp_path / "store"))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "000001-e0.snap").write_text("x")
    try:
        for file in (
            "../x",
            "snapshots/../../x",
            str(outside / "000001-e0.snap"),
            "snapshots/a\0b",
            "snapshots",
            "catalog.db",
        ):
            with pytest.raises(StoreDamaged):
                home.absolute(file)
            with pytest.raises(StoreDamaged):
                home.delete_file(file)
        with pytest.raises(StoreDamaged, match="'job'"):
            home.absolute("snapshots/other/000001-e1.snap", "job")
        os.symlink(outside, tmp_path / "store" / "snapshots" / "link")
        for call in (
            lambda: home.job_directory("link"),
            lambda: home.delete_job_files("link"),
            lambda: home.copy_snapshot(str(outside / "000001-e0.snap"), "link", 2),
            lambda: home.orphan_files("link"),
            lambda: home.absolute("snapshots/link/000001-e0.snap"),
        ):
            with pytest.raises(StoreDamaged):
                call()
        with pytest.raises(InvalidJobId):
            home.snapshot_path("..", 1, 1)
        assert sorted(os.listdir(outside)) == ["000001-e0.snap"]
    finally:
        home.close()
