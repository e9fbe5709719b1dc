"""Holes found by an adversarial review of the issue-8 work, each pinned by a test that
fails on the code before its fix:

  - a stale runner (its lease taken over while an effect was out) never runs agent
    code again: the StaleWriter of its outcome write is not raised into the agent;
  - the done rule holds where the lease is taken (Job.run through the Python API);
  - the agent's sys.exit() is the agent's failure (exit 1), never one of snaprun's
    exit codes;
  - `export -o` never overwrites a file, inside the store or out;
  - a catalog that lost a job (stale WAL, old backup) never lets a new job of that id
    overwrite the old job's snapshots;
  - read-only commands never checkpoint the catalog into catalog.db;
  - an interrupted checkpoint (catalog.db shorter than its header, the WAL holding the
    rest) is not mistaken for a truncated catalog;
  - `repair` of an encrypted store seals the rows it rebuilds;
  - bad numbers (an effect number past SQLite's range, --grace nan) and a FIFO given as
    a snapshot file get a clear error, never a traceback or a hang.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import struct
import time
from pathlib import Path

import pytest
from chunked import snapshot_seqs, to_file_rows
from helpers import AGENTS, snaprun, snapshot_files

from snapstate import JobFinished, StaleWriter
from snapstate.runtime._agent import EntryPoint
from snapstate.runtime._job import Job
from snapstate.serializers import _identity
from snapstate.serializers._home import Home

LOOPS = AGENTS / "loops.py"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _tree(root: Path) -> dict[str, str]:
    """Every file's digest; SQLite's shared-memory index (-shm) changes on any read."""
    return {
        str(p.relative_to(root)): _digest(p)
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.endswith("-shm")
    }


@pytest.fixture(scope="module")
def _killed_store(tmp_path_factory):
    """One loops.py job SIGKILLed right after its snapshot 3, for the module: its store
    (./.snapstate) is never opened again; tests work on copies."""
    root = tmp_path_factory.mktemp("killed")
    run = snaprun("run", "--job", "w", LOOPS, cwd=root, fault="after-snapshot:3")
    assert run.returncode == -9, run.stderr
    return root / ".snapstate"


@pytest.fixture
def killed(_killed_store, tmp_path):
    """loops.py SIGKILLed right after its snapshot 3: WAL left behind, job interrupted
    (a byte-for-byte copy of the module's killed store, as tmp_path/.snapstate)."""
    shutil.copytree(_killed_store, tmp_path / ".snapstate")
    return tmp_path


STALE_AGENT = """\
import os, sqlite3, sys
from snapstate import effect, snapshot

STORE = os.environ["TEST_STORE"]


@effect
def send(n):
    # Another runner takes the job over while this call is out (its epoch grows).
    db = sqlite3.connect(os.path.join(STORE, "catalog.db"), isolation_level=None)
    db.execute("UPDATE leases SET epoch = epoch + 1")
    db.execute("UPDATE jobs SET epoch = epoch + 1")
    db.close()
    return n


def main():
    snapshot("start")
    try:
        send(1)
    except Exception as exc:
        open(os.path.join(STORE, "..", "caught"), "w").write(repr(exc))
    open(os.path.join(STORE, "..", "after"), "w").write("ran on")
    return 1
"""


def test_a_stale_runner_runs_no_agent_code_after_its_effect(tmp_path, monkeypatch):
    """Taken over while an effect was out: recording its outcome is refused
    (StaleWriter) and the run stops there with the agent paused; the agent's except
    block and the code after the call never run (before: the StaleWriter was raised
    into the agent, which caught it and carried on)."""
    script = tmp_path / "stale_agent.py"
    script.write_text(STALE_AGENT)
    store = tmp_path / "store"
    monkeypatch.setenv("TEST_STORE", str(store))
    home = Home(str(store))
    job = Job.create(home, EntryPoint.parse(str(script)), [], "s")
    with pytest.raises(StaleWriter):
        job.run()
    assert not (tmp_path / "caught").exists() and not (tmp_path / "after").exists()
    home.close()


def test_a_done_job_is_refused_where_the_lease_is_taken(tmp_path):
    """Job.open(...).run() of a done job raises JobFinished before any agent code runs
    and leaves it done (before: the entry function ran again and the job was left
    interrupted, so `snaprun resume` re-ran a finished job)."""
    done = snaprun("run", "--job", "d", LOOPS, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    home = Home(str(tmp_path / ".snapstate"))
    with pytest.raises(JobFinished):
        Job.open(home, "d").run()
    assert home.catalog.get_job("d").status == "done"
    home.close()
    again = snaprun("resume", "d", cwd=tmp_path)
    assert again.returncode == 2 and "is done" in again.stderr, again.stderr


@pytest.mark.parametrize("code", ["0", "4", "'bye'"])
def test_the_agents_sys_exit_is_its_failure(tmp_path, code):
    """main() calling sys.exit(...) is the agent failing (exit 1, "failed: SystemExit"),
    never a snaprun exit code (before: sys.exit(0) exited 0 "done" with the job
    failed, sys.exit(4) exited 4 "parked")."""
    script = tmp_path / "exits.py"
    script.write_text(f"import sys\n\ndef main():\n    sys.exit({code})\n")
    run = snaprun("run", "--job", "x", script, cwd=tmp_path)
    assert run.returncode == 1, run.stderr
    assert "job x failed: SystemExit" in run.stderr
    assert "snaprun: error" not in run.stderr


def test_a_module_level_sys_exit_creates_no_job(tmp_path):
    """sys.exit(3) while the agent's module is imported: exit 1 (the agent's failure),
    no job created (before: snaprun exited 3, "waiting", saying nothing)."""
    script = tmp_path / "exits.py"
    script.write_text("import sys\nsys.exit(3)\n\ndef main():\n    return 1\n")
    run = snaprun("run", "--job", "x", script, cwd=tmp_path)
    assert run.returncode == 1, run.stderr
    assert "no job was created" in run.stderr
    assert "\nx " not in snaprun("ls", cwd=tmp_path).stdout


def test_export_never_overwrites_a_file(killed):
    """`export -o` refuses a path inside the store (the catalog, the key file, another
    snapshot's file: w's snapshots made file rows, as imported ones are) and any
    existing file, exit 2, changing nothing (before: it replaced them)."""
    store = killed / ".snapstate"
    mine = killed / "mine.txt"
    mine.write_text("my data")
    to_file_rows(store, "w")  # (its connection folded the WAL away: a reader makes it again)
    assert snaprun("ls", cwd=killed).returncode == 0
    targets = [store / "catalog.db", store / "keys.json", snapshot_files(store, "w")[-1], mine]
    before = _tree(killed)
    for target in targets:
        run = snaprun("export", "w@1", "-o", target, cwd=killed)
        assert run.returncode == 2, run.stderr
        assert "Traceback" not in run.stderr
    assert _tree(killed) == before
    fresh = snaprun("export", "w@1", "-o", killed / "out.snap", cwd=killed)
    assert fresh.returncode == 0, fresh.stderr


def test_a_job_lost_by_a_stale_catalog_is_never_overwritten(killed):
    """The catalog lost job w (its rows gone, as with a deleted WAL or an old backup)
    while w's snapshot files remain (w's snapshots made file rows first, as an earlier
    release's or imported ones are; a chunked snapshot goes with its rows): a new
    `run --job w` is refused (exit 2, pointing at repair) and the old files stay
    byte-identical; Home.write_snapshot never writes over an existing file (it writes
    a chunked snapshot, no file) (before: the new job rewrote 000001-e1.snap ...)."""
    store = killed / ".snapstate"
    assert len(to_file_rows(store, "w")) == 3
    db = sqlite3.connect(store / "catalog.db")
    with db:
        for table in ("snapshots", "leases", "events", "effects", "metrics", "jobs"):
            db.execute(f"DELETE FROM {table} WHERE job_id = 'w'")
    db.close()
    files = {p.name: _digest(p) for p in snapshot_files(store, "w")}
    run = snaprun("run", "--job", "w", LOOPS, cwd=killed)
    assert run.returncode == 2, run.stderr
    assert "repair" in run.stderr and "Traceback" not in run.stderr
    assert {p.name: _digest(p) for p in snapshot_files(store, "w")} == files
    assert snapshot_seqs(store, "w") == []
    home = Home(str(store))
    existing = snapshot_files(store, "w")[0]
    prepared = home.write_snapshot("w", 1, 1, None, {"created_at": time.time()}, b"x")
    assert prepared.row.file == ""  # chunked: no file written
    assert {p.name: _digest(p) for p in snapshot_files(store, "w")} == files
    assert _digest(existing) == files[existing.name]
    home.close()


def test_read_only_commands_do_not_checkpoint_the_catalog(killed):
    """After a kill the WAL holds the latest rows; `ls`, `log`, `stats` and `inspect`
    read them without checkpointing them into catalog.db (before: closing the last
    connection rewrote catalog.db)."""
    store = killed / ".snapstate"
    assert (store / "catalog.db-wal").stat().st_size > 0
    before = _digest(store / "catalog.db")
    for command in (("ls",), ("log", "w"), ("stats", "w"), ("inspect", "w")):
        shown = snaprun(*command, cwd=killed)
        assert shown.returncode == 0, (command, shown.stderr)
    assert _digest(store / "catalog.db") == before
    assert "interrupted" in snaprun("ls", cwd=killed).stdout


def test_an_interrupted_checkpoint_is_not_a_truncated_catalog(tmp_path):
    """catalog.db shorter than its header's page count is refused as truncated, except
    while a WAL holds pages (a checkpoint cut short by a full disk or a kill: SQLite
    completes it from the WAL; before, the store was refused for good)."""
    Home(str(tmp_path)).close()
    path = tmp_path / "catalog.db"
    data = bytearray(path.read_bytes())
    pages = struct.unpack(">I", data[28:32])[0]
    data[28:32] = struct.pack(">I", pages + 5)  # the header claims more pages
    path.write_bytes(bytes(data))
    wal = tmp_path / "catalog.db-wal"
    if wal.exists():
        wal.unlink()
    assert "truncated" in (_identity.catalog_problem(str(tmp_path)) or "")
    wal.write_bytes(b"\x37\x7f\x06\x82" + bytes(60))
    assert _identity.catalog_problem(str(tmp_path)) is None


def test_repair_of_an_encrypted_store_seals_what_it_rebuilds(tmp_path):
    """`repair` after the catalog of an encrypted store is lost: the rebuilt rows are
    sealed (ls and log work, labels come back from the sealed headers, no label in
    clear in the catalog) (before: the rebuilt catalog was plaintext and every command
    then refused it). Repair reads snapshot files: w's snapshots are made file rows
    (encrypted files) before the catalog is lost."""
    assert snaprun("init", "--encrypt", cwd=tmp_path).returncode == 0
    run = snaprun("run", "--job", "w", LOOPS, cwd=tmp_path, fault="after-snapshot:3")
    assert run.returncode == -9, run.stderr
    store = tmp_path / ".snapstate"
    files = to_file_rows(store, "w")
    assert all(b"nested-x0" not in f.read_bytes() for f in files)
    for name in ("catalog.db", "catalog.db-wal", "catalog.db-shm"):
        if (store / name).exists():
            (store / name).unlink()
    repaired = snaprun("repair", cwd=tmp_path)
    assert repaired.returncode == 0, repaired.stderr
    listed = snaprun("ls", "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert '"label": "nested-x0"' in listed.stdout
    assert snaprun("log", "w", cwd=tmp_path).returncode == 0
    assert b"nested-x0" not in (store / "catalog.db").read_bytes()


def test_bad_numbers_and_a_fifo_get_clear_errors(killed):
    """An effect number past SQLite's integer range, a --grace of nan and a FIFO given
    to verify: exit 2 with a message, no traceback, no hang (before: an OverflowError
    traceback, a grace of "nan" seconds, and verify blocked forever on the FIFO)."""
    huge = snaprun("reconcile", "w", "99999999999999999999", "--committed", cwd=killed)
    assert huge.returncode == 2 and "Traceback" not in huge.stderr, huge.stderr
    nan = snaprun("run", "--grace", "nan", LOOPS, cwd=killed)
    assert nan.returncode == 2 and "Traceback" not in nan.stderr, nan.stderr
    fifo = killed / "pipe.snap"
    os.mkfifo(fifo)
    verify = snaprun("verify", fifo, cwd=killed, timeout=30)
    assert verify.returncode == 2 and "not a regular file" in verify.stderr, verify.stderr
