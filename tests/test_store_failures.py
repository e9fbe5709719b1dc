"""A failing store is reported as such (serializers/_sqlite/_db.py maps SQLite's and the
file system's failures to StoreFailure; runtime/_job.py and the CLI keep the job
interrupted): exit 1, "the store failed: … at STORE", never "job X failed:
OperationalError", never status failed, every earlier snapshot and ledger row intact,
and `snaprun resume` after the fix ends with the output of an uninterrupted run.

The stores live on a real tmpfs mounted for the test (needs root, as in CI's
container): it is filled up for ENOSPC and remounted read-only for EROFS. The agent
(tests/agents/life_store.py) takes snapshot 1 and waits for a `go` file outside the
store while the test breaks the store.
"""

from __future__ import annotations

import hashlib
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from helpers import AGENTS, snaprun
from stored import stored_state
from test_lifecycle import start, wait_for

from snapstate._errors import StoreFailure
from snapstate.serializers._sqlite import SqliteCatalog

AGENT = AGENTS / "life_store.py"
PACK_AGENT = AGENTS / "life_store_pack.py"  # snapshot 2 writes a pack file


def _mount(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["mount", *args], capture_output=True, text=True)


@pytest.fixture
def tmpfs(tmp_path):
    """A 4 MB tmpfs of this test's own."""
    point = tmp_path / "tmpfs"
    point.mkdir()
    mounted = _mount("-t", "tmpfs", "-o", "size=4m", "tmpfs", str(point))
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    yield point
    subprocess.run(["umount", "-l", str(point)], check=False)


def fill(point: Path) -> Path:
    """Fill the file system to the last byte: every further allocation is ENOSPC."""
    filler = point / "filler"
    with open(filler, "wb", buffering=0) as f:
        chunk = b"\0" * 65536
        while True:
            try:
                f.write(chunk)
            except OSError:
                break
        while True:
            try:
                f.write(b"\0")
            except OSError:
                break
    with pytest.raises(OSError):
        (point / "probe").write_bytes(b"x" * 4096)
    return filler


def digests(store: Path) -> dict[str, str]:
    """What holds the store's snapshots: snapshot files and pack files, every job's
    rows and manifests, every chunk row."""
    found = {
        str(p.relative_to(store)): hashlib.sha256(p.read_bytes()).hexdigest()
        for folder in ("snapshots", "chunks")
        for p in sorted((store / folder).rglob("*"))
        if p.is_file()
    }
    catalog = SqliteCatalog(str(store))
    try:
        jobs = [j.job_id for j in catalog.list_jobs()]
    finally:
        catalog.close()
    for job in jobs:
        found[f"job {job}"] = hashlib.sha256(repr(stored_state(store, job)).encode()).hexdigest()
    assert any(key.startswith("job ") for key in found)
    return found


def assert_store_failed(
    run_stderr: str, returncode: int, store: Path, job: str, what: str = "the store failed:"
) -> None:
    assert returncode == 1, run_stderr
    assert what in run_stderr and str(store) in run_stderr, run_stderr
    assert f"snaprun resume {job}" in run_stderr
    assert "Traceback" not in run_stderr and "OperationalError" not in run_stderr
    assert f"job {job} failed" not in run_stderr


def assert_interrupted(store: Path, job: str) -> None:
    catalog = SqliteCatalog(str(store))
    row = catalog.get_job(job)
    assert catalog.effective_status(row, time.time()) == "interrupted", row
    assert row.status != "failed" and not any(e.kind == "failed" for e in catalog.events(job))
    assert catalog.latest(job).seq == 1
    catalog.close()


@pytest.mark.parametrize("mode", ["effect", "return", "snapshot", "snapshot-pack"])
def test_disk_full_leaves_the_job_interrupted_and_resumable(tmp_path, tmpfs, mode):
    """ENOSPC on a full tmpfs while the runner records progress: recording an effect
    (mode effect: the failure reaches the agent's code: its finally block must not run
    and the effect must not be sent), the job's final status (mode return: the issue's
    "job X failed: OperationalError"), or writing snapshot 2 (mode snapshot: small, so
    its chunks go inside the catalog transaction, which fails like any other: "the store
    failed", after which recording "interrupted" fails too; mode snapshot-pack: large,
    so its pack file is written first, which fails: a SnapshotWriteError, "could not be
    written", the temp file removed). Exit 1, the
    message names the store, the job stays interrupted with snapshot 1 intact; after
    freeing space, resume ends with the uninterrupted output and the effect delivered
    exactly once."""
    store = tmpfs / "store"
    agent = PACK_AGENT if mode == "snapshot-pack" else AGENT
    proc = start("run", "--store", store, "--job", "full", agent, tmp_path, mode, cwd=tmp_path)
    wait_for(tmp_path / "ready", proc)
    before = digests(store)
    filler = fill(tmpfs)
    (tmp_path / "go").touch()
    out, err = proc.communicate(timeout=60)
    assert_store_failed(
        err,
        proc.returncode,
        store,
        "full",
        "could not be written" if mode == "snapshot-pack" else "the store failed:",
    )
    if mode != "return":
        assert out == "first\n"
        assert not (tmp_path / "finally").exists(), "agent code ran after the store failed"
        assert not (tmp_path / "deliveries").exists()
    else:  # the agent had finished; only its end could not be recorded
        assert out == "first\nsecond 0\n"
    filler.unlink()
    assert_interrupted(store, "full")
    assert digests(store) == before
    done = snaprun("resume", "--store", store, "full", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    # What an uninterrupted run prints after snapshot 1 and returns.
    expected = 700 if mode == "effect" else 0
    assert (done.stdout, done.result) == (f"second {expected}\n", str(expected))
    if mode == "effect":
        assert (tmp_path / "deliveries").read_text() == "7\n"


def test_read_only_store_is_reported_and_resumes_once_writable(tmp_path, tmpfs):
    """A store whose file system became read-only (runner killed after snapshot 1, then
    the tmpfs remounted ro): `snaprun resume` says the store failed, naming it (exit 1,
    no traceback), changes nothing, and resumes to the uninterrupted output once the
    store is writable again."""
    store = tmpfs / "store"
    (tmp_path / "go").touch()
    killed = snaprun(
        "run",
        "--store",
        store,
        "--job",
        "ro",
        AGENT,
        tmp_path,
        "return",
        cwd=tmp_path,
        fault="after-snapshot:1",
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    before = digests(store)
    remount = _mount("-o", "remount,ro", str(tmpfs))
    assert remount.returncode == 0, remount.stderr
    try:
        refused = snaprun("resume", "--store", store, "ro", cwd=tmp_path)
    finally:
        assert _mount("-o", "remount,rw", str(tmpfs)).returncode == 0
    assert_store_failed(refused.stderr, refused.returncode, store, "ro")
    assert refused.stdout == ""
    assert_interrupted(store, "ro")
    assert digests(store) == before
    done = snaprun("resume", "--store", store, "ro", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (killed.stdout + done.stdout, done.result) == ("first\nsecond 0\n", "0")


def test_sqlite_failures_map_to_store_failure_in_process(tmp_path):
    """The mapping itself, in process: the store's connection swapped for a read-only
    one (SQLite then fails with SQLITE_READONLY, the error a read-only file system
    gives), so recording a status raises StoreFailure naming the store, never a bare
    sqlite3.OperationalError, and nothing changes."""
    store = SqliteCatalog(str(tmp_path / "s"))
    store.create_job("j", {"module": "m", "function": "main", "path": None}, [])
    store.close()
    store._local.db = sqlite3.connect(f"file:{store.path}?mode=ro", uri=True, isolation_level=None)
    with pytest.raises(
        StoreFailure,
        match=f"the store failed: attempt to write a readonly database at {tmp_path / 's'}",
    ):
        store.set_status("j", "done")
    store.close()
    again = SqliteCatalog(str(tmp_path / "s"))
    assert again.get_job("j").status == "running"
    again.close()
