"""`snaprun repair` rebuilds a lost or damaged catalog from the signed snapshot files:
jobs, snapshots, latest seq and epoch come back, the damaged catalog is moved aside
(never deleted), unverifiable files are reported and left alone, and every rebuilt
job is parked until `snaprun repair --accept JOB` (its effect ledger was lost).

Repair reads snapshot FILES only: a chunked snapshot (its manifest in catalog.db, the
usual form of a job's snapshot) is lost with the catalog. So the stores here hold their
jobs' snapshots as files, as a store of an earlier release (or one that imported its
snapshots) does: each job's chunked snapshots are exported to its folder and its rows
made file rows (tests/chunked.py: to_file_rows)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from chunked import export_file, to_file_rows
from click.testing import CliRunner
from helpers import AGENTS, snaprun

from snapstate import JobParked, StoreDamaged
from snapstate.runtime._cli import cli
from snapstate.runtime._job import Job
from snapstate.serializers._home import Home

LOOPS = AGENTS / "loops.py"


def _cli(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """root/base: loops.py run uninterrupted (root/base.out: its stdout). root/store:
    job j SIGKILLed after snapshot 3 (root/j.out: its stdout), f forked from j@2, and
    d killed after 3, resumed --at 1 and killed after its new snapshot 2 (epoch 2), with
    the files of its dropped branch (2 and 3 of epoch 1) put back as leftovers. Every
    snapshot of the store is a file row (to_file_rows), f's copied from j's files."""
    root = tmp_path_factory.mktemp("repair")
    base = snaprun("run", "--store", root / "base", "--job", "b", LOOPS, cwd=root)
    assert base.returncode == 0, base.stderr
    (root / "base.out").write_text(base.stdout)
    store = root / "store"
    for job in ("j", "d"):
        run = snaprun(
            "run", "--store", store, "--job", job, LOOPS, cwd=root, fault="after-snapshot:3"
        )
        assert run.returncode == -9, run.stderr
        (root / f"{job}.out").write_text(run.stdout)
    dropped = {
        f"{seq:06d}-e1.snap": export_file(store, "d", seq, root / f"d-{seq}.snap").read_bytes()
        for seq in (2, 3)
    }
    run = snaprun("resume", "--store", store, "--at", "1", "d", cwd=root, fault="after-snapshot:2")
    assert run.returncode == -9, run.stderr
    for job in ("j", "d"):
        to_file_rows(store, job)
    for name, data in dropped.items():
        (store / "snapshots" / "d" / name).write_bytes(data)
    forked = _cli("fork", "--store", store, "--as", "f", "j@2")
    assert forked.exit_code == 0, forked.stderr
    assert sorted(p.name for p in (store / "snapshots" / "f").iterdir()) == [
        "000001-e0.snap",
        "000002-e0.snap",
    ]
    return root


@pytest.fixture
def root(pristine, tmp_path) -> Path:
    shutil.copytree(pristine, tmp_path / "root")
    return tmp_path / "root"


def tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _jobs(store: Path) -> dict:
    home = Home(str(store), create=False)
    try:
        return {
            j.job_id: (
                j.status,
                [(r.seq, r.epoch) for r in home.catalog.snapshots(j.job_id)],
                j.parent,
            )
            for j in home.catalog.list_jobs()
        }
    finally:
        home.close()


@pytest.mark.smoke
def test_repair_after_deleting_the_catalog(root):
    """Catalog deleted: every command refuses the store (exit 2); `snaprun repair`
    brings back j (1-3), the fork f (1-2, parent j) and d's latest branch (1 at epoch
    1, 2 at epoch 2; its dropped branch's files reported and left alone), all parked.
    `resume j` exits 4 saying why and changes nothing, so does the Python API, until
    `snaprun repair --accept j`; then j resumes to the same output as an uninterrupted
    run, and d resumes under a lease epoch above every epoch its files carry."""
    store = root / "store"
    for name in ("catalog.db", "catalog.db-wal", "catalog.db-shm"):
        (store / name).unlink(missing_ok=True)
    assert _cli("ls", "--store", store).exit_code == 2
    repaired = _cli("repair", "--store", store)
    assert repaired.exit_code == 0, repaired.stderr
    assert "000003-e1.snap" in repaired.stderr and "000002-e1.snap" in repaired.stderr
    assert _jobs(store) == {
        "d": ("parked", [(1, 1), (2, 2)], None),
        "f": ("parked", [(1, 0), (2, 0)], "j"),
        "j": ("parked", [(1, 1), (2, 1), (3, 1)], None),
    }
    assert (store / "snapshots" / "d" / "000003-e1.snap").exists()  # left alone

    refused = snaprun("resume", "--store", store, "j", cwd=root)
    assert refused.returncode == 4 and refused.stdout == "", refused.stderr
    assert "repair --accept j" in refused.stderr and "ledger" in refused.stderr
    home = Home(str(store), create=False, writable=True)
    try:
        with pytest.raises(JobParked, match="repair --accept j"):
            Job.open(home, "j").resume()
    finally:
        home.close()
    assert _jobs(store)["j"][0] == "parked"

    assert _cli("repair", "--store", store, "--accept", "j").exit_code == 0
    resumed = snaprun("resume", "--store", store, "j", cwd=root)
    assert resumed.returncode == 0, resumed.stderr
    assert (root / "j.out").read_text() + resumed.stdout == (root / "base.out").read_text()

    assert _cli("repair", "--store", store, "--accept", "d").exit_code == 0
    resumed = snaprun("resume", "--store", store, "d", cwd=root)
    assert resumed.returncode == 0 and "resumed from snapshot 2" in resumed.stderr
    log = json.loads(_cli("log", "--store", store, "--json", "d").stdout)
    assert any(e["kind"] == "lease" and e["detail"].startswith("epoch 3 ") for e in log)


@pytest.mark.parametrize("how", ["random", "zeroed", "empty"])
def test_repair_moves_the_damaged_catalog_aside(root, how):
    """A random, zeroed or empty catalog.db (with a -wal beside it) is moved, byte for
    byte, into catalog.damaged-<time>/, never deleted; the rebuilt store lists j."""
    store = root / "store"
    catalog = store / "catalog.db"
    data = {"random": os.urandom(8192), "zeroed": bytes(8192), "empty": b""}[how]
    catalog.write_bytes(data)
    (store / "catalog.db-wal").write_bytes(b"wal bytes")
    result = _cli("repair", "--store", store)
    assert result.exit_code == 0, result.stderr
    (aside,) = store.glob("catalog.damaged-*")
    assert (aside / "catalog.db").read_bytes() == data
    assert (aside / "catalog.db-wal").read_bytes() == b"wal bytes"
    assert _jobs(store)["j"][1] == [(1, 1), (2, 1), (3, 1)]


def test_unverifiable_files_are_reported_and_left_alone(root):
    """A tampered file (one byte flipped) and a file signed with another store's key are
    reported by repair, left byte-identical, and never become snapshot rows."""
    store = root / "store"
    good = (store / "snapshots" / "j" / "000003-e1.snap").read_bytes()
    flipped = bytearray(good)
    flipped[len(flipped) // 2] ^= 0xFF
    (store / "snapshots" / "j" / "000004-e1.snap").write_bytes(bytes(flipped))
    other = snaprun(
        "run", "--store", root / "other", "--job", "evil", LOOPS, cwd=root, fault="after-snapshot:1"
    )
    assert other.returncode == -9
    (store / "snapshots" / "evil").mkdir()
    export_file(root / "other", "evil", 1, store / "snapshots" / "evil" / "000001-e1.snap")
    (store / "catalog.db").unlink()
    before = {k: v for k, v in tree(store).items() if k.startswith("snapshots")}
    result = _cli("repair", "--store", store)
    assert result.exit_code == 0, result.stderr
    assert "000004-e1.snap" in result.stderr and "evil/000001-e1.snap" in result.stderr
    assert {k: v for k, v in tree(store).items() if k.startswith("snapshots")} == before
    jobs = _jobs(store)
    assert "evil" not in jobs and jobs["j"][1] == [(1, 1), (2, 1), (3, 1)]


def test_repair_of_a_healthy_store_rebuilds_nothing(root):
    """On a healthy store repair says so and changes no snapshot, key or catalog row."""
    store = root / "store"
    before = _jobs(store)
    result = _cli("repair", "--store", store)
    assert result.exit_code == 0 and "healthy" in result.stderr
    assert _jobs(store) == before and not list(store.glob("catalog.damaged-*"))


def test_lost_store_json_is_written_again_with_the_same_id(root):
    """store.json deleted next to a healthy catalog: the store is refused; repair
    writes it again with the store id its snapshot headers carry, so the bound files
    restore."""
    store = root / "store"
    store_id = json.loads((store / "store.json").read_text())["store_id"]
    (store / "store.json").unlink()
    with pytest.raises(StoreDamaged, match="store.json"):
        Home(str(store))
    result = _cli("repair", "--store", store)
    assert result.exit_code == 0, result.stderr
    assert json.loads((store / "store.json").read_text())["store_id"] == store_id
    home = Home(str(store), create=False)
    try:
        assert home.read_row(home.catalog.latest("j"))[0]["store_id"] == store_id
    finally:
        home.close()


def test_repair_without_keys_is_refused(root):
    """keys.json missing: nothing can be verified, so repair exits 2 naming keys.json
    and changes nothing (the damaged catalog stays where it is)."""
    store = root / "store"
    (store / "keys.json").unlink()
    (store / "catalog.db").write_bytes(b"")
    before = tree(store)
    result = _cli("repair", "--store", store)
    assert result.exit_code == 2 and "keys.json" in result.stderr, result.stderr
    assert tree(store) == before
