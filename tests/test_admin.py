"""The store operations of runtime/_admin.py, in-process: fork, import (`resume FILE`),
prune, reconcile, stats, and the rule that a done job never runs again whichever way it
is resumed (issue 8: "operations in one place", "imports copy", "lifecycle").

One small agent is run to its end once per module (`job`, done, 3 snapshots, a
recorded value effect before each); every test works on its own copy of that store.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
from pathlib import Path

import pytest
from chunked import export_file, manifest, snapshot_seqs, to_file_rows
from helpers import snaprun, snapshot_files

from snapstate import InvalidJobId, JobExists, JobFinished, LeaseHeld, SnapshotNotFound, StoreError
from snapstate.runtime import _admin
from snapstate.runtime._agent import EntryPoint
from snapstate.runtime._job import Job
from snapstate.serializers._home import Home
from snapstate.serializers._ids import MAX_LENGTH, is_valid_job_id
from snapstate.serializers._store import EffectRow, Owner

AGENT = """\
import snapstate
from snapstate import snapshot


def main():
    a = snapstate.now()          # ledger ordinal 1
    snapshot("one")              # header: effects 1
    b = snapstate.now()          # 2
    snapshot("two")              # effects 2
    c = snapstate.random()       # 3
    snapshot("three")
    print("end", flush=True)
    return 3
"""


@pytest.fixture(scope="module")
def done_store(tmp_path_factory):
    """A store with job `job` run to its end in this process (done, snapshots 1-3)."""
    root = tmp_path_factory.mktemp("admin")
    script = root / "admin_agent.py"
    script.write_text(AGENT)
    home = Home(str(root / "store"))
    try:
        assert Job.create(home, EntryPoint.parse(str(script)), [], "job").run() == 3
        assert home.catalog.get_job("job").status == "done"
    finally:
        home.close()
    return root / "store"


@pytest.fixture
def home(done_store, tmp_path):
    shutil.copytree(done_store, tmp_path / "store")
    h = Home(str(tmp_path / "store"))
    yield h
    h.close()


def state(home: Home, job_id: str):
    c = home.catalog
    return (
        c.get_job(job_id),
        c.snapshots(job_id),
        c.effects(job_id),
        c.events(job_id),
        c.get_lease(job_id),
        c.metrics(job_id),
    )


def files(home: Home, job_id: str) -> dict:
    """The job's snapshots as stored, by seq: a chunked one's manifest, a file row's
    file (its name and bytes); and every .snap file in the job's folder."""
    stored: dict = {}
    for row in home.catalog.snapshots(job_id):
        if row.file == "":
            stored[row.seq] = manifest(home.directory, job_id, row.seq)
        else:
            stored[row.seq] = (row.file, Path(home.row_path(row)).read_bytes())
    folder = {p.name: p.read_bytes() for p in snapshot_files(Path(home.directory), job_id)}
    return {"rows": stored, "folder": folder}


def folder_files(home: Home, job_id: str) -> list[str]:
    """The names of the .snap files in the job's folder."""
    return [p.name for p in snapshot_files(Path(home.directory), job_id)]


# ------------------------------------------------------------------ fork
@pytest.mark.smoke
def test_fork_copies_rows_files_and_the_effects_before_the_fork_point(home):
    """fork(job, 2) makes a resumable job holding snapshots 1-2 (chunked: the same
    signed manifests over the same chunks; file rows: copies, not links, in its own
    folder) and the ledger rows up to the fork point's count (ordinals 1-2, not 3); the
    original is untouched; the fork resumes to the end."""
    before = state(home, "job")[:3], files(home, "job")
    assert _admin.fork(home, "job", 2, "twin") == "twin"
    assert state(home, "job")[:3] == before[0] and files(home, "job") == before[1]
    assert [r.seq for r in home.catalog.snapshots("twin")] == [1, 2]
    for row in home.catalog.snapshots("twin"):
        assert row.file == ""
        assert manifest(home.directory, "twin", row.seq) == manifest(home.directory, "job", row.seq)
        assert home.verify_row(row)[0]["seq"] == row.seq
    assert [e.ordinal for e in home.catalog.effects("twin")] == [1, 2]
    twin = home.catalog.get_job("twin")
    assert (twin.parent, twin.fork_seq, twin.status) == ("job", 2, "running")
    assert ("forked", "snapshot 2 as job twin") in [
        (e.kind, e.detail) for e in home.catalog.events("job")
    ]
    assert Job.open(home, "twin").resume() == 3
    # a job whose snapshots are file rows (imported, or an earlier release's)
    to_file_rows(home.directory, "job")
    before = state(home, "job")[:3], files(home, "job")
    assert _admin.fork(home, "job", 2, "filed") == "filed"
    assert state(home, "job")[:3] == before[0] and files(home, "job") == before[1]
    assert [r.seq for r in home.catalog.snapshots("filed")] == [1, 2]
    for row in home.catalog.snapshots("filed"):
        path = home.row_path(row)
        assert path.startswith(os.path.join(home.directory, "snapshots", "filed", ""))
        assert os.stat(path).st_nlink == 1
        assert home.verify(path)["seq"] == row.seq
    assert Job.open(home, "filed").resume() == 3


def test_fork_refusals_change_nothing(home):
    """An id taken, a missing snapshot, an invalid new id: refused with nothing
    created or changed (the taken id's own files are not overwritten)."""
    _admin.fork(home, "job", 1, "taken")
    before = state(home, "job"), state(home, "taken"), files(home, "taken")
    tree = sorted(os.listdir(os.path.join(home.directory, "snapshots")))
    with pytest.raises(JobExists):
        _admin.fork(home, "job", 3, "taken")
    with pytest.raises(SnapshotNotFound):
        _admin.fork(home, "job", 9, "new")
    for bad in ("../../x", ".", "a/b", "x" * (MAX_LENGTH + 1)):
        with pytest.raises(InvalidJobId):
            _admin.fork(home, "job", 1, bad)
    assert (state(home, "job"), state(home, "taken"), files(home, "taken")) == before
    assert sorted(os.listdir(os.path.join(home.directory, "snapshots"))) == tree


def test_generated_fork_ids_stay_valid(home):
    """Forks of forks of forks of a 120-character job get generated ids that are valid
    and within the length limit."""
    job_id = _admin.fork(home, "job", 1, "j" * 120)
    for _ in range(4):
        job_id = _admin.fork(home, job_id, 1)
        assert is_valid_job_id(job_id) and len(job_id) <= MAX_LENGTH, job_id
    assert home.catalog.get_job(job_id).fork_seq == 1


# ------------------------------------------------------------------ import
def test_import_copies_the_file(home, tmp_path):
    """resume FILE's import copies the file: overwriting the user's file in place
    afterwards leaves the store's copy verified and resumable."""
    user = export_file(home.directory, "job", 2, tmp_path / "mine.snap")
    job, seq = _admin.import_file(home, str(user), "imported")
    assert (job.job_id, seq) == ("imported", 2)
    (row,) = home.catalog.snapshots("imported")
    stored = home.row_path(row)
    assert not os.path.samefile(stored, user)
    size = user.stat().st_size
    with open(user, "r+b") as f:  # in place: a hard link would see this
        f.write(b"\0" * size)
    assert home.verify(stored)["seq"] == 2
    assert job.resume(seq) == 3
    assert [e.kind for e in home.catalog.events("imported")][:2] == ["created", "imported"]


def test_import_refuses_a_taken_id_and_changes_nothing(home, tmp_path):
    """A foreign file whose job id is taken is refused (JobExists) before anything is
    copied: the existing job's files and rows are unchanged."""
    user = export_file(home.directory, "job", 2, tmp_path / "mine.snap")
    _admin.fork(home, "job", 3, "other")
    before = state(home, "job"), files(home, "job")
    with pytest.raises(JobExists, match="--as NEW_ID"):
        _admin.import_file(home, str(user))
    assert (state(home, "job"), files(home, "job")) == before


# ------------------------------------------------------------------ done jobs
def test_a_done_job_never_resumes_from_any_entry_point(home):
    """Job.open(...).resume(), and the job returned for its own file by resume FILE (its
    snapshots made file rows: a chunked snapshot has no file of its own), raise
    JobFinished with the fork hint; nothing changes (no lease, no resume counted, no
    rewind, no event)."""
    before = state(home, "job"), files(home, "job")
    with pytest.raises(JobFinished, match="snaprun fork job@SEQ"):
        Job.open(home, "job").resume()
    assert (state(home, "job"), files(home, "job")) == before
    to_file_rows(home.directory, "job")
    before = state(home, "job"), files(home, "job")
    with pytest.raises(JobFinished, match="snaprun fork job@SEQ"):
        Job.open(home, "job").resume()
    own = home.row_path(home.catalog.snapshot("job", 1))
    job, seq = _admin.import_file(home, own)
    assert (job.job_id, seq) == ("job", 1)
    with pytest.raises(JobFinished, match="snaprun fork job@SEQ"):
        job.resume(seq)
    assert (state(home, "job"), files(home, "job")) == before


def test_resume_file_of_a_done_jobs_own_file_is_refused_by_the_cli(home):
    """`snaprun resume FILE` of a done job's own snapshot 1 (a file row), and `snaprun
    resume --at 1 JOB`: exit 2 with the fork hint; nothing re-ran (no output) and no
    snapshot was dropped (it used to rewind)."""
    before = files(home, "job")
    at = snaprun(
        "resume", "--store", home.directory, "--at", "1", "job", cwd=Path(home.directory).parent
    )
    assert at.returncode == 2 and "snaprun fork job@SEQ" in at.stderr, at.stderr
    assert at.stdout == "" and "Traceback" not in at.stderr
    assert files(home, "job") == before
    to_file_rows(home.directory, "job")
    before = files(home, "job")
    own = home.row_path(home.catalog.snapshot("job", 1))
    home.close()
    run = snaprun("resume", "--store", home.directory, own, cwd=Path(home.directory).parent)
    assert run.returncode == 2 and "snaprun fork job@SEQ" in run.stderr, run.stderr
    assert run.stdout == "" and "Traceback" not in run.stderr
    assert files(home, "job") == before


# ------------------------------------------------------------------ reconcile
def _parked(home: Home) -> None:
    """Make `job` parked with an ambiguous write effect 4."""
    home.catalog.record_effects(
        [
            EffectRow(
                "job",
                4,
                "job:4",
                "agent.charge",
                "agent.py:9",
                "d",
                "(5)",
                "write",
                "ambiguous",
                attempts=1,
            )
        ],
        epoch=None,
    )
    home.catalog.set_status("job", "parked", error="effect 4 unknown")


def test_reconcile_is_refused_while_a_live_runner_holds_the_job(home):
    """With a live lease held (this process), reconcile raises LeaseHeld and the
    ledger, metrics, events and status are unchanged; once released, the effect is
    settled in one go: confirmed with its sealed result, counted, logged, and the
    parked job becomes interrupted (resumable). A settled effect is not reconciled
    again."""
    _parked(home)
    epoch = home.catalog.acquire_lease("job", Owner.me(), 30)
    home.catalog.set_status("job", "parked", epoch=epoch)
    before = state(home, "job")
    with pytest.raises(LeaseHeld, match="running"):
        _admin.reconcile(home, "job", 4, committed=True, result={"id": 7})
    assert state(home, "job") == before
    home.catalog.release_lease("job", epoch)
    row = _admin.reconcile(home, "job", 4, committed=True, result={"id": 7})
    assert (row.state, row.note) == ("confirmed", "reconciled: committed by hand")
    assert home.catalog.effect("job", 4) == row and row.result
    assert home.catalog.metrics("job")["reconciled"] == 1
    assert home.catalog.get_job("job").status == "interrupted"
    with pytest.raises(StoreError, match="confirmed"):
        _admin.reconcile(home, "job", 4, committed=False)
    with pytest.raises(StoreError, match="no effect 1"):  # a value effect
        _admin.reconcile(home, "job", 1, committed=False)


# ------------------------------------------------------------------ prune
def test_prune_skips_running_jobs_and_sweeps_only_old_orphans(home):
    """prune keeps a running job whole, drops old snapshots of the others (never the
    latest), sweeps orphan files and crashed copies only past the grace period (a
    younger one may be a write or a fork about to commit), never a runner's files of a
    job the catalog does not know; every snapshot kept still verifies (no chunk it
    shares with a dropped one was swept); --finished then drops the done job."""
    _admin.fork(home, "job", 3, "live")
    epoch = home.catalog.acquire_lease("live", Owner.me(), 30)
    snaps = Path(home.directory, "snapshots")
    old = time.time() - 2 * _admin.ORPHAN_GRACE_S
    for name, stamp in (
        ("job/000009-e1.snap", old),
        ("job/000010-e1.snap", None),
        ("live/000009-e1.snap", old),
        ("ghost/000001-e0.snap", old),
        ("runner/000001-e1.snap", old),
        ("young/000001-e0.snap", None),
    ):
        (snaps / name).parent.mkdir(exist_ok=True)
        (snaps / name).write_bytes(b"x")
        if stamp:
            os.utime(snaps / name, (stamp, stamp))
    live = state(home, "live"), files(home, "live")
    report = _admin.prune(home, keep_last=1)
    assert (report.snapshots, report.jobs, report.running) == (2, [], ["live"])
    assert report.orphans == 2 and report.damaged == []
    assert snapshot_seqs(home.directory, "job") == [3]
    assert folder_files(home, "job") == ["000010-e1.snap"]
    assert (state(home, "live"), files(home, "live")) == live
    for job_id in ("job", "live"):
        for row in home.catalog.snapshots(job_id):
            assert home.verify_row(row)[0]["seq"] == row.seq
    assert not (snaps / "ghost").exists() and (snaps / "runner" / "000001-e1.snap").exists()
    assert (snaps / "young" / "000001-e0.snap").exists()
    report = _admin.prune(home, finished=True)
    assert report.jobs == ["job"] and not (snaps / "job").exists()
    home.catalog.release_lease("live", epoch)


def test_prune_refuses_a_job_whose_rows_leave_its_folder(home, tmp_path):
    """A catalog row of `job` naming another job's file (or one outside the store) makes
    prune leave that job alone and report it; the file is not deleted. (job's
    snapshots are file rows, so its fork's are files.)"""
    to_file_rows(home.directory, "job")
    _admin.fork(home, "job", 1, "other")
    theirs = home.catalog.snapshot("other", 1).file
    db = sqlite3.connect(os.path.join(home.directory, "catalog.db"))
    with db:
        db.execute("UPDATE snapshots SET file = ? WHERE job_id = 'job' AND seq = 1", (theirs,))
    db.close()
    report = _admin.prune(home, keep_last=1, finished=True)
    assert [d.split(":")[0] for d in report.damaged] == ["job 'job' was not pruned"]
    assert "outside" in report.damaged[0]
    assert os.path.exists(os.path.join(home.directory, theirs))
    assert [r.seq for r in home.catalog.snapshots("job")] == [1, 2, 3]


# ------------------------------------------------------------------ stats
def test_stats(home):
    """stats reports each job (or one), reading only."""
    _parked(home)
    before = state(home, "job")
    (row,) = _admin.stats(home, "job")
    assert (row["job"], row["status"], row["effects"], row["ambiguous"]) == ("job", "parked", 1, 1)
    assert [r["job"] for r in _admin.stats(home)] == ["job"]
    assert state(home, "job") == before
    with pytest.raises(InvalidJobId):
        _admin.stats(home, "..")


# ------------------------------------------------------------------ the CLI's exit codes
def test_one_exit_code_table_covers_every_error():
    """The CLI maps errors to exit codes through one ordered table: store and write
    failures 1, parked 4, lease conflicts 5, every other snapstate error 2; no entry is
    shadowed by an earlier base class; every public error class gets a code; the
    epilog of --help documents 130 and 143."""
    import snapstate
    from snapstate import (
        JobParked,
        JobWaiting,
        SnapshotWriteError,
        SnapstateError,
        StaleWriter,
        StoreDamaged,
        StoreFailure,
    )
    from snapstate.runtime._cli import _EXIT_HELP, EXIT_CODES, exit_code

    expected = {
        StoreFailure: 1,
        SnapshotWriteError: 1,
        JobParked: 4,
        JobWaiting: 3,
        LeaseHeld: 5,
        StaleWriter: 5,
        InvalidJobId: 2,
        StoreDamaged: 2,
        JobFinished: 2,
        JobExists: 2,
        SnapshotNotFound: 2,
        StoreError: 2,
    }
    assert {kind: exit_code(kind("x")) for kind in expected} == expected
    for i, (kind, _) in enumerate(EXIT_CODES):
        assert not any(issubclass(kind, earlier) for earlier, _ in EXIT_CODES[:i]), kind
    errors = [
        getattr(snapstate, n)
        for n in snapstate.__all__
        if isinstance(getattr(snapstate, n), type)
        and issubclass(getattr(snapstate, n), SnapstateError)
    ]
    assert all(exit_code(kind("x")) in (1, 2, 3, 4, 5) for kind in errors)
    assert "130  stopped by Ctrl-C" in _EXIT_HELP and "143  stopped by SIGTERM" in _EXIT_HELP
