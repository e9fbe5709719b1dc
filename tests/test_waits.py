"""Hibernation at a wait (runtime/_waits.py, runtime/_job.py, runtime/_timers.py): a
long wait takes a snapshot right at the call, records why the job waits (status waiting,
exit 3) and ends the process; a resume polls the wait before any agent code runs. The
clock seam (SNAPSTATE_CLOCK_OFFSET) moves time instead of the tests waiting for it."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from chunked import export_file
from helpers import snaprun
from stored import stored_state

from snapstate.serializers import _snapfile
from snapstate.serializers._keys import KeyRing
from snapstate.serializers._sqlite import SqliteCatalog
from snapstate.serializers._sqlite._db import SCHEMA_VERSION

AGENT = textwrap.dedent(
    """
    import snapstate

    def main():
        seen = ["start"]
        print("before", seen, flush=True)
        snapstate.sleep(SHORT)
        print("short sleep over", flush=True)
        try:
            snapstate.sleep(7200)  # two hours
            seen.append("woke")
        finally:
            print("finally", seen, flush=True)
        print("after", seen, flush=True)
        return seen
    """
)
EXPECTED_STDOUT = (
    "before ['start']\nshort sleep over\nfinally ['start', 'woke']\nafter ['start', 'woke']\n"
)


def write_agent(path: Path, short: float = 0.2) -> Path:
    agent = path / "sleeper.py"
    agent.write_text(AGENT.replace("SHORT", repr(short)))
    return agent


_OPEN: list[SqliteCatalog] = []


def reader(path: Path) -> SqliteCatalog:
    """The store's catalog opened read-only, closed after the test (autouse fixture)."""
    catalog = SqliteCatalog(str(path / ".snapstate"), create=False, writable=False)
    _OPEN.append(catalog)
    return catalog


@pytest.fixture(autouse=True)
def _close_readers():
    yield
    while _OPEN:
        _OPEN.pop().close()


def later(seconds: float) -> dict[str, str]:
    return {"SNAPSTATE_CLOCK_OFFSET": str(seconds)}


def test_a_long_sleep_hibernates_and_completes_through_the_clock_seam(tmp_path):
    """A two-hour sleep: the run exits 3 (waiting) with a snapshot at the sleep; an early
    resume waits again without a new snapshot or any agent output; a resume two hours
    later finishes, and the stdout of all runs adds up to an uninterrupted run's."""
    write_agent(tmp_path)
    first = snaprun("run", "--job", "s1", "sleeper.py", cwd=tmp_path)
    assert first.returncode == 3, first.stderr
    assert "job s1 waits: sleep at" in first.stderr and "Traceback" not in first.stderr
    assert first.stdout == "before ['start']\nshort sleep over\n"
    catalog = reader(tmp_path)
    assert catalog.get_job("s1").status == "waiting"
    wait = catalog.get_wait("s1")
    assert wait is not None and wait.kind == "timer" and wait.seq == 1
    assert "sleeper.py:10" in wait.reason
    assert [r.label for r in catalog.snapshots("s1")][0].startswith("waiting: sleep at")
    files = stored_state(tmp_path / ".snapstate", "s1")
    assert [r[0] for r in files[0]] == [1]
    early = snaprun("resume", "s1", cwd=tmp_path, env=later(3600))
    assert early.returncode == 3, early.stderr
    assert early.stdout == ""  # no agent code ran
    assert stored_state(tmp_path / ".snapstate", "s1") == files  # no new snapshot
    assert catalog.get_job("s1").status == "waiting"
    done = snaprun("resume", "s1", cwd=tmp_path, env=later(7300))
    assert done.returncode == 0, done.stderr
    assert done.result == "['start', 'woke']"
    assert first.stdout + early.stdout + done.stdout == EXPECTED_STDOUT
    assert catalog.get_wait("s1") is None
    assert catalog.get_job("s1").status == "done"


def test_the_threshold_decides_what_hibernates(tmp_path):
    """SNAPSTATE_HIBERNATE_AFTER=0 hibernates even a 5 s sleep, which a resume 10 s later
    finds due; the runs add up to the uninterrupted output."""
    write_agent(tmp_path, short=5)
    offset = {"SNAPSTATE_HIBERNATE_AFTER": "100000"}
    run = snaprun(
        "run", "--job", "s2", "sleeper.py", cwd=tmp_path, env={"SNAPSTATE_HIBERNATE_AFTER": "0"}
    )
    assert run.returncode == 3 and run.stdout == "before ['start']\n", run.stderr
    resumed = snaprun("resume", "s2", cwd=tmp_path, env=later(10))
    assert resumed.returncode == 3 and resumed.stdout == "short sleep over\n", resumed.stderr
    last = snaprun("resume", "s2", cwd=tmp_path, env={**later(7300), **offset})
    assert last.returncode == 0, last.stderr
    assert run.stdout + resumed.stdout + last.stdout == EXPECTED_STDOUT


def test_killed_right_after_the_hibernation_snapshot(tmp_path):
    """Crash window: SIGKILL after the wait's snapshot is committed, before the wait row
    is recorded. The job shows interrupted; a resume polls the wait (not due: waits again,
    exit 3), and once due it finishes with the uninterrupted output."""
    write_agent(tmp_path)
    killed = snaprun("run", "--job", "s3", "sleeper.py", cwd=tmp_path, fault="after-snapshot:1")
    assert killed.returncode == -9
    catalog = reader(tmp_path)
    assert catalog.get_wait("s3") is None
    waiting = snaprun("resume", "s3", cwd=tmp_path)
    assert waiting.returncode == 3 and waiting.stdout == "", waiting.stderr
    assert catalog.get_wait("s3") is not None
    done = snaprun("resume", "s3", cwd=tmp_path, env=later(7300))
    assert done.returncode == 0, done.stderr
    assert killed.stdout + done.stdout == EXPECTED_STDOUT


@pytest.mark.smoke
def test_a_wait_that_cannot_be_frozen_raises_at_the_call(tmp_path):
    """An unpicklable local at a long wait: SnapshotError is raised into the agent at the
    sleep() call (it can handle it); nothing hibernates."""
    (tmp_path / "locked.py").write_text(
        textwrap.dedent(
            """
            import socket
            import snapstate

            def main():
                s = socket.socket()
                try:
                    snapstate.sleep(7200)
                except snapstate.SnapshotError as exc:
                    print("refused:", "socket" in str(exc), flush=True)
                s.close()
                return "handled"
            """
        )
    )
    run = snaprun("run", "--job", "s4", "locked.py", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "refused: True\n"


def test_bad_clock_settings_are_refused(tmp_path):
    """A SNAPSTATE_CLOCK_OFFSET or SNAPSTATE_HIBERNATE_AFTER that is not a number: a clear
    error naming the variable, exit 2, no traceback."""
    write_agent(tmp_path)
    for env in (
        {"SNAPSTATE_CLOCK_OFFSET": "soon"},
        {"SNAPSTATE_HIBERNATE_AFTER": "-1"},
        {"SNAPSTATE_EFFECT_THREADS": "0"},
    ):
        run = snaprun("run", "--job", "bad", "sleeper.py", cwd=tmp_path, env=env)
        assert run.returncode == 2, (env, run.returncode, run.stderr)
        assert "Traceback" not in run.stderr
        assert next(iter(env)) in run.stderr


def test_inspect_and_ls_of_a_waiting_job_change_nothing(tmp_path):
    """Read-only commands on a hibernated job: status waiting, the snapshot's label, no
    change to the catalog file."""
    write_agent(tmp_path)
    assert snaprun("run", "--job", "s5", "sleeper.py", cwd=tmp_path).returncode == 3
    db = tmp_path / ".snapstate" / "catalog.db"
    before = db.read_bytes()
    ls = snaprun("ls", "--json", cwd=tmp_path)
    assert ls.returncode == 0 and '"waiting"' in ls.stdout
    inspect = snaprun("inspect", "s5", cwd=tmp_path)
    assert inspect.returncode == 0, inspect.stderr
    assert db.read_bytes() == before


def test_a_schema_2_catalog_is_read_as_is_and_upgraded_by_a_writable_open(tmp_path):
    """A catalog of schema 2 (no waits, approvals, manifests or chunks tables; its
    snapshot a file): `ls` reads it without changing it (nothing waits), a resume
    upgrades it in place (to the current schema) and can hibernate."""
    import sqlite3

    write_agent(tmp_path)
    assert snaprun("run", "--job", "old", "sleeper.py", cwd=tmp_path).returncode == 3
    store = tmp_path / ".snapstate"
    db_path = store / "catalog.db"
    # Its snapshot as a schema-2 store held it: a snapshot file, the row naming it.
    snap = store / "snapshots" / "old" / "000001-e1.snap"
    snap.parent.mkdir(parents=True)
    export_file(store, "old", 1, snap)
    _, digest = _snapfile.verify_digest(str(snap), KeyRing(str(store)), require_encryption=False)
    db = sqlite3.connect(db_path)
    db.execute(
        "UPDATE snapshots SET file = ?, size = ?, digest = ? WHERE job_id = 'old' AND seq = 1",
        ("snapshots/old/000001-e1.snap", snap.stat().st_size, digest),
    )
    db.commit()
    db.executescript(
        "ALTER TABLE jobs DROP COLUMN mac; ALTER TABLE effects DROP COLUMN mac;"
        "DROP TABLE waits; DROP TABLE approvals; DROP TABLE manifests; DROP TABLE chunks;"
        "UPDATE jobs SET status = 'interrupted'; PRAGMA user_version = 2;"
    )
    db.close()
    # and its key file as that release wrote it: no record of signed rows
    keys = json.loads((store / "keys.json").read_text())
    del keys["rows_signed"]
    (store / "keys.json").write_text(json.dumps(keys))
    before = db_path.read_bytes()
    ls = snaprun("ls", "--json", cwd=tmp_path)
    assert ls.returncode == 0 and '"interrupted"' in ls.stdout, ls.stderr
    assert db_path.read_bytes() == before
    resumed = snaprun("resume", "old", cwd=tmp_path)
    assert resumed.returncode == 3, resumed.stderr
    catalog = reader(tmp_path)
    assert catalog.schema_version == SCHEMA_VERSION and catalog.get_wait("old") is not None
    assert [r.file for r in catalog.snapshots("old")] == ["snapshots/old/000001-e1.snap"]
