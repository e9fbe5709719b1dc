"""A store knows it exists: a lost or damaged catalog or key file next to existing
snapshots is refused (exit 2, naming the file and the way out), never silently
re-created; read-only commands never create a store.

The CLI is run in-process (click's runner over the real `snaprun` command group and
real store files): every case fails at the store's opening, before any agent code."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
from pathlib import Path

import click.testing
import pytest
from chunked import export_file, to_file_rows
from click.testing import CliRunner
from helpers import AGENTS, snaprun

from snapstate import StoreDamaged, StoreError
from snapstate.runtime._cli import cli
from snapstate.serializers import _identity
from snapstate.serializers._home import Home
from snapstate.serializers._sqlite import SCHEMA_VERSION

LOOPS = AGENTS / "loops.py"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """A store holding job `j` (loops.py, run to the end: 6 snapshots). Never changed:
    tests work on copies."""
    root = tmp_path_factory.mktemp("identity")
    store = root / "store"
    run = snaprun("run", "--store", store, "--job", "j", LOOPS, cwd=root)
    assert run.returncode == 0, run.stderr
    export_file(store, "j", 1, root / "j-1.snap")
    return store


@pytest.fixture
def store(pristine, tmp_path) -> Path:
    copy = tmp_path / "store"
    shutil.copytree(pristine, copy)
    return copy


@pytest.fixture
def snap(pristine, tmp_path) -> Path:
    """Snapshot j@1 of the store, exported to a snapshot file outside it."""
    return Path(shutil.copy(pristine.parent / "j-1.snap", tmp_path / "j-1.snap"))


def tree(root: Path) -> dict[str, str]:
    """Every file under root (relative path -> SHA-256 of its bytes), but SQLite's own
    side files when they hold nothing of the store: its shared-memory index (-shm) and
    an empty WAL, which a read-only connection leaves behind."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
        and not p.name.endswith("-shm")
        and not (p.name.endswith("-wal") and p.stat().st_size == 0)
    }


def cli_run(*args, cwd: Path, monkeypatch) -> click.testing.Result:
    monkeypatch.chdir(cwd)
    monkeypatch.delenv("SNAPSTATE_HOME", raising=False)
    monkeypatch.delenv("SNAPSTATE_KEY", raising=False)
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=True)


def clean_exit_2(result, *needles: str) -> str:
    """exit 2 through sys.exit (no exception escaped), one error line with the needles."""
    assert isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == 2, (result.exit_code, result.stderr)
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("snaprun: error:")]
    assert len(errors) == 1, result.stderr
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]


def damage(store: Path, how: str) -> None:
    catalog = store / "catalog.db"
    size = catalog.stat().st_size
    if how == "deleted":
        catalog.unlink()
    elif how == "empty":
        catalog.write_bytes(b"")
    elif how == "zeroed":
        catalog.write_bytes(bytes(size))
    elif how == "random":
        catalog.write_bytes(os.urandom(size))
    elif how == "truncated":
        catalog.write_bytes(catalog.read_bytes()[: size // 2])


def commands(store: Path, snap: Path, out: Path) -> list[list]:
    """Every command that opens a store, read-only and writable."""
    s = ["--store", store]
    return [
        ["ls", *s],
        ["log", *s, "j"],
        ["inspect", *s, "j"],
        ["inspect", *s, "j@1"],
        ["inspect", *s, snap],
        ["verify", *s, snap],
        ["effects", *s, "j"],
        ["stats", *s],
        ["export", *s, "-o", out, "j@1"],
        ["replay", *s, "j@1"],
        ["resume", *s, "j"],
        ["resume", *s, "--as", "copy", snap],
        ["run", *s, LOOPS],
        ["fork", *s, "j@1"],
        ["prune", *s, "--finished"],
        ["reconcile", *s, "--committed", "j", "1"],
        ["keys", "list", *s],
        ["keys", "rotate", *s],
        ["init", *s],
    ]


@pytest.mark.parametrize("how", ["deleted", "empty", "zeroed", "random", "truncated"])
def test_damaged_catalog_is_refused_by_every_command(store, snap, tmp_path, monkeypatch, how):
    """A deleted, empty, zeroed, random or half-truncated catalog.db of a store with
    snapshots: every command (read-only and writable, by --store, with a job or a
    snapshot file exported from the store) exits 2 naming catalog.db and `snaprun repair`; no
    catalog is re-created and every file of the store is byte-identical afterwards
    (before, an empty store was shown with exit 0 and `run` started over it)."""
    damage(store, how)
    before = tree(store)
    out = tmp_path / "exported.snap"
    for args in commands(store, snap, out):
        result = cli_run(*args, cwd=tmp_path, monkeypatch=monkeypatch)
        clean_exit_2(result, str(store / "catalog.db"), "snaprun repair")
    assert tree(store) == before
    assert not out.exists()


def test_deleted_keys_json_is_refused_not_reminted(store, snap, tmp_path, monkeypatch):
    """keys.json deleted from a store with snapshots: ls, verify, resume and run exit 2
    naming keys.json; no new key is minted (before, a fresh key was created, every
    snapshot was refused with a misleading "set SNAPSTATE_KEY", and new jobs ran)."""
    (store / "keys.json").unlink()
    before = tree(store)
    for args in (
        ["ls", "--store", store],
        ["verify", "--store", store, snap],
        ["verify", "--store", store, "j@1"],
        ["resume", "--store", store, "j"],
        ["run", "--store", store, LOOPS],
        ["keys", "rotate", "--store", store],
    ):
        clean_exit_2(
            cli_run(*args, cwd=tmp_path, monkeypatch=monkeypatch), str(store / "keys.json")
        )
    assert tree(store) == before and not (store / "keys.json").exists()


def test_replaced_keys_json_is_refused(store, tmp_path, monkeypatch):
    """keys.json replaced by another store's (valid JSON, unrelated keys): refused by
    its fingerprints in store.json, exit 2; the store is left as it was."""
    other = Home(str(tmp_path / "other"))
    other.close()
    shutil.copy(tmp_path / "other" / "keys.json", store / "keys.json")
    before = tree(store)
    clean_exit_2(
        cli_run("ls", "--store", store, cwd=tmp_path, monkeypatch=monkeypatch),
        "keys.json",
        "none of the keys",
    )
    assert tree(store) == before


@pytest.mark.parametrize("command", [["verify"], ["inspect"], ["inspect", "--json"]])
def test_file_commands_in_a_fresh_directory_create_nothing(snap, tmp_path, monkeypatch, command):
    """`snaprun verify FILE` / `inspect FILE` of a file outside any store, run in an
    empty directory with no --store and no SNAPSTATE_HOME: exit 2 saying there is no
    store, and `./.snapstate` is not created (before, a whole store was)."""
    outside = snap
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    clean_exit_2(
        cli_run(*command, outside, cwd=fresh, monkeypatch=monkeypatch),
        "no store at",
        str(fresh / ".snapstate"),
    )
    assert list(fresh.iterdir()) == []


def test_read_only_commands_on_a_missing_store_create_nothing(tmp_path, monkeypatch):
    """ls, log, stats, effects, export and replay of a --store that does not exist exit
    2 ("no store at DIR") and create neither the directory nor anything in it."""
    missing = tmp_path / "nowhere"
    for args in (
        ["ls"],
        ["log", "j"],
        ["stats"],
        ["effects", "j"],
        ["export", "-o", tmp_path / "x.snap", "j@1"],
        ["replay", "j@1"],
        ["resume", "j"],
        ["fork", "j@1"],
    ):
        clean_exit_2(
            cli_run(args[0], "--store", missing, *args[1:], cwd=tmp_path, monkeypatch=monkeypatch),
            "no store at",
            str(missing),
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_store_json_identity_and_header_binding(store):
    """store.json (mode 0600) holds a 32-hex store id and the fingerprint of the
    store's key (never the secret), and every snapshot header names that store id."""
    data = json.loads((store / "store.json").read_text())
    assert (store / "store.json").stat().st_mode & 0o777 == 0o600
    assert len(data["store_id"]) == 32
    keys = json.loads((store / "keys.json").read_text())
    secrets = [k["secret"] for k in keys["keys"].values()]
    assert set(data["keys"]) == set(keys["keys"])
    assert not any(s in (store / "store.json").read_text() for s in secrets)
    home = Home(str(store), create=False, writable=False)
    try:
        for row in home.catalog.snapshots("j"):
            header, digest = home.verify_row(row)
            assert header["store_id"] == data["store_id"] and digest == row.digest
    finally:
        home.close()


def _make_legacy(store: Path) -> None:
    """Turn a store into one of the previous release: its snapshots in files (file
    rows), no store.json, schema version 1 (no digest or origin columns, no manifests
    or chunks tables)."""
    to_file_rows(store, "j")
    (store / "store.json").unlink()
    db = sqlite3.connect(store / "catalog.db")
    db.execute("DROP TRIGGER snapshot_drops_manifest")
    db.execute("DROP TABLE manifests")
    db.execute("DROP TABLE chunks")
    db.execute("ALTER TABLE snapshots DROP COLUMN digest")
    db.execute("ALTER TABLE snapshots DROP COLUMN origin")
    for table in ("jobs", "effects", "waits", "approvals"):  # no row signatures (schema 5)
        db.execute(f"ALTER TABLE {table} DROP COLUMN mac")
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    keys = json.loads((store / "keys.json").read_text())  # nor a record of signed rows
    del keys["rows_signed"]
    (store / "keys.json").write_text(json.dumps(keys))


def test_previous_release_store_gets_identity_on_first_writable_open(store):
    """A store of the previous release (catalog schema 1, no store.json) is opened, not
    refused: read-only opening writes nothing (no store.json, schema left at 1) and
    still lists its snapshots; the first writable open writes store.json and upgrades
    the schema, and its old rows (no digest) still restore."""
    _make_legacy(store)
    before = tree(store)
    ro = Home(str(store), create=False, writable=False)
    try:
        assert [r.seq for r in ro.catalog.snapshots("j")] == [1, 2, 3, 4, 5, 6]
        assert ro.read_row(ro.catalog.latest("j"))[0]["seq"] == 6
    finally:
        ro.close()
    assert tree(store) == before
    home = Home(str(store), create=False, writable=True)
    try:
        assert (store / "store.json").exists()
        assert home.catalog._db().execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert home.read_row(home.catalog.snapshot("j", 2))[0]["seq"] == 2
    finally:
        home.close()


def test_lost_store_json_with_jobs_is_refused(store):
    """store.json deleted from a store whose catalog has jobs (not one of the previous
    release): refused as damaged, not silently given a new identity (which would make
    every bound snapshot foreign)."""
    (store / "store.json").unlink()
    for kwargs in ({}, {"create": False, "writable": True}, {"create": False}):
        with pytest.raises(StoreDamaged, match="store.json"):
            Home(str(store), **kwargs)
    assert not (store / "store.json").exists()


def test_catalog_without_tables_is_refused(store):
    """A catalog.db that is a valid but empty SQLite database (re-created by some
    tool) next to the snapshots is refused, not filled with a new empty schema."""
    (store / "catalog.db").unlink()
    sqlite3.connect(store / "catalog.db").execute("CREATE TABLE other (x)").connection.close()
    before = tree(store)
    with pytest.raises(StoreDamaged, match="lacks the tables"):
        Home(str(store))
    assert tree(store) == before


def test_no_store_error_for_read_only_opening(tmp_path):
    """Home(dir, create=False) of a directory that is not a store raises StoreError
    and creates nothing, not even the directory."""
    with pytest.raises(StoreError, match="no store at"):
        Home(str(tmp_path / "absent"), create=False, writable=False)
    assert not (tmp_path / "absent").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreError, match="no store at"):
        Home(str(tmp_path / "empty"), create=False, writable=True)
    assert list((tmp_path / "empty").iterdir()) == []


def test_catalog_problem_reads_the_header_only(tmp_path):
    """The byte-level check: missing, empty, non-SQLite and truncated files are named;
    a real catalog passes."""
    home = Home(str(tmp_path / "s"))
    home.close()
    assert _identity.catalog_problem(str(tmp_path / "s")) is None
    assert "missing" in _identity.catalog_problem(str(tmp_path))


def test_concurrent_creation_never_sees_a_half_made_store(tmp_path):
    """Eight threads open the same new store at once (each its own lock file handle,
    as separate processes would): the creation is done under the store lock, so none
    of them sees its catalog half-made and refuses it as damaged; all share one
    identity and one key."""
    import threading

    store = str(tmp_path / "new")
    results, errors = [], []

    def open_it():
        try:
            home = Home(store)
            results.append((home.store_id, home.keys.current.key_id))
            home.close()
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(set(results)) == 1 and len(results) == 8


def test_creation_cut_short_is_finished_not_refused(tmp_path):
    """A store whose creation was cut short (catalog made, no keys.json, no store.json,
    no job, no snapshot) is finished by the next writable open instead of being
    refused; read-only opening still creates nothing."""
    from snapstate.serializers._sqlite import SqliteCatalog

    SqliteCatalog(str(tmp_path / "s")).close()
    before = tree(tmp_path / "s")
    with pytest.raises(StoreDamaged):
        Home(str(tmp_path / "s"), create=False)
    assert tree(tmp_path / "s") == before
    home = Home(str(tmp_path / "s"))
    try:
        assert home.store_id and (tmp_path / "s" / "keys.json").exists()
    finally:
        home.close()
