"""Faults at the operations the file-system seam gained (serializers/_fs.py): key files,
deletions and repair's renames go through a FileSystem, so each step can be failed
in-process, and a failure at any one of them leaves nothing half-done.

- keys.json (create, rotate): the file on disk is the old one or the complete new one,
  never a partial one; the keys the process signs with are all in it; no temp file is
  left; the store works again once the file system does.
- an exported key (`snaprun keys export`): the target file is absent or complete, an
  existing file is never replaced, no temp file is left.
- prune: the catalog drops its rows before the files go, so a failed delete leaves only
  files no row names (swept by the next prune), never a row naming a missing file.
- repair: a failed rename leaves the damaged catalog where it was or moved aside whole;
  the next repair completes; a scratch folder it could not delete is deleted next time.
"""

from __future__ import annotations

import errno
import json
import os
from collections import Counter
from pathlib import Path

import pytest
import writer_proc
from chunked import to_file_rows

from snapstate._errors import StoreError
from snapstate.runtime import _admin, _repair
from snapstate.serializers import _fs
from snapstate.serializers._home import Home
from snapstate.serializers._keys import KeyRing
from snapstate.serializers._store import Owner

KEY_WRITE = ("create", "write", "fsync", "close", "rename", "fsync_dir")
ENTRY = {"module": "writer", "function": "main", "path": None, "search_path": None}


class Faulty(_fs.FileSystem):
    """The real file system, except that the `at`-th call of `op` fails (OSError EIO)
    before doing anything; `remove_tree` fails after removing one file, as a tree
    deletion stopped halfway does. Calls are counted in `calls`."""

    def __init__(self, op: str, at: int = 1):
        self.op, self.at = op, at
        self.calls: Counter[str] = Counter()
        self.failed = False

    def _fault(self, op: str) -> None:
        self.calls[op] += 1
        if op == self.op and self.calls[op] == self.at:
            self.failed = True
            raise OSError(errno.EIO, f"injected {op} fault")

    def create(self, path):
        self._fault("create")
        return super().create(path)

    def write(self, fd, data):
        self._fault("write")
        return super().write(fd, data)

    def fsync(self, fd):
        self._fault("fsync")
        super().fsync(fd)

    def close(self, fd):
        super().close(fd)  # a failing close still closes the descriptor
        self._fault("close")

    def rename(self, src, dst):
        self._fault("rename")
        super().rename(src, dst)

    def link(self, src, dst):
        self._fault("link")
        super().link(src, dst)

    def fsync_dir(self, directory):
        self._fault("fsync_dir")
        super().fsync_dir(directory)

    def unlink(self, path):
        self._fault("unlink")
        super().unlink(path)

    def remove_dir(self, path):
        self._fault("remove_dir")
        super().remove_dir(path)

    def remove_tree(self, path):
        if self.op == "remove_tree":
            first = next((os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs), None)
            if first is not None:
                os.unlink(first)
        self._fault("remove_tree")
        super().remove_tree(path)


def temp_files(folder: Path) -> list[str]:
    return sorted(n for n in os.listdir(folder) if n.endswith(".tmp"))


def stored_keys(directory: Path) -> dict[str, dict]:
    """keys.json as the next process reads it (it must parse: never a partial file)."""
    return json.loads((directory / "keys.json").read_bytes())["keys"]


# ------------------------------------------------------------------------ keys.json
@pytest.mark.parametrize("op", KEY_WRITE)
def test_a_fault_while_rotating_keys_leaves_a_whole_key_file(tmp_path, op):
    """Crash window: each step of rewriting keys.json for `snaprun keys rotate`. The
    rotation raises; keys.json is the old file (or, for a fault at the directory fsync,
    the complete new one that the rename had put in place); every key the process
    would sign with is in the file on disk, so nothing it signs becomes unverifiable;
    no temp file is left; a rotation through a healthy file system then succeeds."""
    KeyRing(str(tmp_path))
    before = stored_keys(tmp_path)
    fs = Faulty(op)
    ring = KeyRing(str(tmp_path), fs=fs)  # reads the existing file: writes nothing
    current = ring.current.key_id
    with pytest.raises(OSError, match=f"injected {op} fault"):
        ring.rotate()
    assert fs.failed
    on_disk = stored_keys(tmp_path)
    if op == "fsync_dir":
        assert set(on_disk) > set(before)
    else:
        assert on_disk == before
    assert ring.current.key_id == current  # the failed rotation changed nothing in use
    assert {k.key_id for k in ring.keys()} <= set(on_disk)
    assert temp_files(tmp_path) == []
    new = KeyRing(str(tmp_path)).rotate()
    assert new.key_id in stored_keys(tmp_path)


@pytest.mark.parametrize("op", KEY_WRITE)
def test_a_fault_while_creating_the_key_file_leaves_none_or_a_whole_one(tmp_path, op):
    """Crash window: each step of writing a new store's first keys.json. Creating the
    key ring raises; there is no keys.json (or the complete one, for a fault at the
    directory fsync) and no temp file; the next KeyRing makes or reads it."""
    fs = Faulty(op)
    with pytest.raises(OSError, match=f"injected {op} fault"):
        KeyRing(str(tmp_path), fs=fs)
    if op == "fsync_dir":
        assert len(stored_keys(tmp_path)) == 1
    else:
        assert not (tmp_path / "keys.json").exists()
    assert temp_files(tmp_path) == []
    ring = KeyRing(str(tmp_path))
    assert ring.current.key_id in stored_keys(tmp_path)


@pytest.mark.parametrize("op", ("create", "write", "fsync", "close", "link", "fsync_dir"))
def test_a_fault_while_exporting_a_key_leaves_no_partial_file(tmp_path, op):
    """Crash window: each step of `snaprun keys export ID -o FILE`. The export fails
    with a StoreError naming the file; the file is absent (or complete, for a fault at
    the directory fsync after the link: it imports) and no temp file is left beside
    it; the export then succeeds through a healthy file system."""
    store, out = tmp_path / "store", tmp_path / "out"
    out.mkdir()
    key_id = KeyRing(str(store)).current.key_id
    target = out / "key.json"
    with pytest.raises(StoreError, match=f"cannot write {target}: injected {op} fault"):
        KeyRing(str(store), fs=Faulty(op)).export(key_id, str(target))
    if op == "fsync_dir":
        other = KeyRing(str(tmp_path / "other"))
        assert other.import_file(str(target))[0].key_id == key_id
        target.unlink()
    assert os.listdir(out) == []
    KeyRing(str(store)).export(key_id, str(target))
    assert json.loads(target.read_bytes())["key_id"] == key_id


def test_an_export_never_replaces_a_file_created_meanwhile(tmp_path):
    """Crash window: none; a race. Another process creates the target file between
    the export's check and its link: the export is refused naming the file, the other
    file keeps its bytes, and the export's temp file is removed."""
    store, out = tmp_path / "store", tmp_path / "out"
    out.mkdir()
    key_id = KeyRing(str(store)).current.key_id
    target = out / "key.json"

    class Racer(_fs.FileSystem):
        def link(self, src, dst):
            Path(dst).write_bytes(b"theirs")
            super().link(src, dst)

    with pytest.raises(StoreError, match="already exists; it was not overwritten"):
        KeyRing(str(store), fs=Racer()).export(key_id, str(target))
    assert target.read_bytes() == b"theirs"
    assert os.listdir(out) == ["key.json"]


# ------------------------------------------------------------------------ deletions
def _store(path: Path, fs: _fs.FileSystem, seqs: int = 3) -> Home:
    """A store with job j: `seqs` committed snapshots, its lease released, held as
    snapshot files (file rows, as a store of an earlier release or one that imported
    them holds them: prune deletes their files, repair rebuilds from them; a chunked
    snapshot has no file)."""
    home = Home(str(path), fs=fs)
    home.catalog.create_job("j", ENTRY, [])
    epoch = home.catalog.acquire_lease("j", Owner.me(), 30)
    for seq in range(1, seqs + 1):
        header, payload = writer_proc.content("j", seq, epoch)
        home.commit_snapshot(home.write_snapshot("j", seq, epoch, f"s{seq}", header, payload))
    home.catalog.release_lease("j", epoch)
    to_file_rows(path, "j")
    assert all(row.file for row in home.catalog.snapshots("j"))
    return home


def _listed_files_exist(home: Home) -> list[int]:
    rows = home.catalog.snapshots("j")
    for row in rows:
        assert home.verify(home.absolute(row.file))["seq"] == row.seq
    return [r.seq for r in rows]


def test_a_failed_delete_in_prune_leaves_only_unlisted_files(tmp_path):
    """Crash window: prune has dropped snapshot rows and fails deleting their files.
    The prune raises; the catalog lists only the kept snapshot, whose file verifies;
    the files it could not delete are orphans no row names, and the next prune sweeps
    them."""
    fs = Faulty("unlink")
    home = _store(tmp_path / "s", fs)
    folder = tmp_path / "s" / "snapshots" / "j"
    try:
        with pytest.raises(OSError, match="injected unlink fault"):
            _admin.prune(home, keep_last=1)
        assert _listed_files_exist(home) == [3]
        assert len(os.listdir(folder)) == 3  # the first delete failed: both files stayed
        assert len(home.orphan_files("j")) == 2
    finally:
        home.close()
    home = Home(str(tmp_path / "s"))
    try:
        report = _admin.prune(home, keep_last=1, orphan_grace=-1)
        assert report.orphans == 2
        assert _listed_files_exist(home) == [3]
        assert os.listdir(folder) == ["000003-e1.snap"]
    finally:
        home.close()


def test_a_failed_folder_delete_in_prune_leaves_no_row(tmp_path):
    """Crash window: prune --finished has dropped a finished job's rows and the
    deletion of its folder stops halfway. The job is gone from the catalog (nothing
    names the files left), the prune reports it dropped, and the store opens and
    prunes again."""
    fs = Faulty("remove_tree")
    home = _store(tmp_path / "s", fs)
    try:
        home.catalog.set_status("j", "done")
        report = _admin.prune(home, finished=True)
        assert report.jobs == ["j"] and fs.failed
        assert home.catalog.list_jobs() == []
        left = os.listdir(tmp_path / "s" / "snapshots" / "j")
        assert len(left) == 2  # one file was deleted before the fault
    finally:
        home.close()
    home = Home(str(tmp_path / "s"))
    try:
        assert _admin.prune(home, finished=True).damaged == []
    finally:
        home.close()


# ------------------------------------------------------------------------ repair
def _damage(store: Path) -> bytes:
    (store / "catalog.db-wal").unlink(missing_ok=True)
    (store / "catalog.db-shm").unlink(missing_ok=True)
    damaged = b"not a database" * 100
    (store / "catalog.db").write_bytes(damaged)
    (store / "catalog.db-wal").write_bytes(b"wal bytes")
    return damaged


@pytest.mark.parametrize("at", [1, 2, 3])
def test_a_failed_rename_in_repair_leaves_the_damaged_catalog_whole(tmp_path, at):
    """Crash window: each rename of a repair (the damaged catalog.db and its -wal moved
    aside, then the rebuilt catalog put in place). The repair raises; every byte of the
    damaged catalog is either where it was or in catalog.damaged-*/, and there is no
    rebuilt catalog half in place; the next repair completes and lists the job with
    all its snapshots."""
    store = tmp_path / "s"
    _store(store, _fs.OS).close()
    damaged = _damage(store)
    fs = Faulty("rename", at)
    with pytest.raises(OSError, match="injected rename fault"):
        _repair.repair(str(store), fs)
    asides = sorted(store.glob("catalog.damaged-*"))
    found = {
        name: (store / name).read_bytes()
        for name in ("catalog.db", "catalog.db-wal")
        if (store / name).exists()
    }
    for aside in asides:
        for name in os.listdir(aside):
            found[name] = (aside / name).read_bytes()
    assert found == {"catalog.db": damaged, "catalog.db-wal": b"wal bytes"}
    report = _repair.repair(str(store))
    assert [(j.job_id, j.seqs) for j in report.jobs] == [("j", [1, 2, 3])]
    assert not list(store.glob("repair.tmp-*"))


def test_a_scratch_folder_repair_could_not_delete_goes_next_time(tmp_path):
    """Crash window: after the rebuilt catalog is in place, deleting the scratch folder
    fails halfway. The repair still succeeds (its catalog is complete); the folder left
    behind is deleted by the next repair, which finds the store healthy."""
    store = tmp_path / "s"
    _store(store, _fs.OS).close()
    _damage(store)
    report = _repair.repair(str(store), Faulty("remove_tree"))
    assert [(j.job_id, j.seqs) for j in report.jobs] == [("j", [1, 2, 3])]
    assert list(store.glob("repair.tmp-*"))
    assert _repair.repair(str(store)).healthy
    assert not list(store.glob("repair.tmp-*"))
