"""A store directory: the catalog, the keys, the settings and the snapshot files.

    <store>/catalog.db                    jobs, snapshots, leases, timeline (SQLite, WAL)
    <store>/keys.json                     signing/encryption keys (0600)
    <store>/config.json                   settings (encryption required or not)
    <store>/snapshots/<job>/<seq>-e<epoch>.snap

A snapshot is durable in two steps: its file is written atomically (temp, fsync,
rename, fsync the directory), then its catalog row is committed with compare-and-
swap. A crash between the two leaves a file without a row, which is never read and
is swept; a stale writer's file is deleted when its commit is refused.
"""

from __future__ import annotations

import json
import os
import shutil

from ..runtime._errors import (HeaderMismatch, InvalidJobId, SnapshotWriteError, StaleWriter,
                              StoreDamaged)
from . import _fs, _snapfile
from ._ids import validate_job_id
from ._keys import KeyRing
from ._sqlite import SqliteStore
from ._store import SnapshotRow, Store

__all__ = ["Home", "default_home"]

_CONFIG = "config.json"


def default_home(store: str | None = None) -> str:
    return os.path.abspath(store or os.environ.get("SNAPSTATE_HOME") or ".snapstate")


class Home:
    def __init__(self, directory: str, *, fs: _fs.FileSystem = _fs.OS,
                 catalog: Store | None = None):
        self.directory = os.path.abspath(directory)
        os.makedirs(os.path.join(self.directory, "snapshots"), exist_ok=True)
        self.fs = fs
        self.catalog = catalog or SqliteStore(self.directory)
        self.keys = KeyRing(self.directory)
        self.config = self._load_config()
        self.sweep_temp_files()

    # ---------------------------------------------------------------- settings
    def _load_config(self) -> dict:
        path = os.path.join(self.directory, _CONFIG)
        try:
            with open(path) as f:
                return json.load(f)
        except FileNotFoundError:
            return {"encrypt": False}

    def set_encryption(self, required: bool) -> None:
        self.config = dict(self.config, encrypt=bool(required))
        data = json.dumps(self.config, indent=1).encode()
        _fs.write_atomic(os.path.join(self.directory, _CONFIG), [data])

    @property
    def encrypt(self) -> bool:
        return bool(self.config.get("encrypt"))

    # ---------------------------------------------------------------- files
    # Every path the store derives (from a job id or a catalog row's `file`) is proven
    # to lie inside <store>/snapshots before it is read, written or deleted: ids are
    # validated, and the real path (symlinks resolved) must be below the real snapshots
    # folder. Catalog rows are hostile input too (a tampered catalog.db).
    def relative(self, path: str) -> str:
        return os.path.relpath(os.path.abspath(path), self.directory)

    def _confine(self, path: str, inside: str, what: str) -> str:
        """`path`, if its real path lies strictly inside the real path of `inside`;
        StoreDamaged naming `what` otherwise."""
        root = os.path.realpath(inside)
        real = os.path.realpath(path)
        if os.path.commonpath([root, real]) != root or real == root:
            raise StoreDamaged(
                f"{what} resolves to {real}, outside {root}: the store {self.directory} is "
                "damaged or was tampered with; refusing to read, write or delete it")
        return path

    def absolute(self, file: str, job_id: str | None = None) -> str:
        """The path of a catalog row's `file`, confined to <store>/snapshots (to the
        job's own folder when `job_id` is given)."""
        what = f"the catalog's file {file!r}" + (f" of job {job_id!r}" if job_id else "")
        if not isinstance(file, str) or not file or "\0" in file or os.path.isabs(file):
            raise StoreDamaged(f"{what} is not a path inside the store {self.directory}: the "
                               "store is damaged or was tampered with; refusing it")
        inside = (self._job_folder(job_id, what) if job_id is not None
                  else os.path.join(self.directory, "snapshots"))
        return self._confine(os.path.join(self.directory, file), inside, what)

    def _job_folder(self, job_id: str, what: str) -> str:
        try:
            validate_job_id(job_id)
        except InvalidJobId as exc:
            raise StoreDamaged(f"{what}: {exc}") from None
        return os.path.join(self.directory, "snapshots", job_id)

    def row_path(self, row: SnapshotRow) -> str:
        """The file of a catalog row, confined to its job's folder."""
        return self.absolute(row.file, row.job_id)

    def job_directory(self, job_id: str) -> str:
        """<store>/snapshots/<job>: InvalidJobId for an id outside the safe alphabet."""
        validate_job_id(job_id)
        return self._confine(os.path.join(self.directory, "snapshots", job_id),
                             os.path.join(self.directory, "snapshots"),
                             f"the folder of job {job_id!r}")

    def snapshot_path(self, job_id: str, seq: int, epoch: int) -> str:
        if not isinstance(seq, int) or not isinstance(epoch, int) or seq < 0 or epoch < 0:
            raise StoreDamaged(f"snapshot {seq!r} (epoch {epoch!r}) of job {job_id!r} is not a "
                               "valid sequence number")
        return os.path.join(self.job_directory(job_id), f"{seq:06d}-e{epoch}.snap")

    def write_snapshot(self, job_id: str, seq: int, epoch: int, label: str | None,
                       header: dict, payload: bytes) -> SnapshotRow:
        """Write the file durably (not yet in the catalog). SnapshotWriteError on any
        I/O failure: never retried."""
        path = self.snapshot_path(job_id, seq, epoch)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            size = _snapfile.write(path, header, payload, self.keys, encrypt=self.encrypt,
                                   fs=self.fs)
        except OSError as exc:
            raise SnapshotWriteError(
                f"snapshot {seq} of job {job_id} could not be written to {path} "
                f"({exc.strerror or exc}); it is not retried. The job stopped; its previous "
                f"snapshot is intact: fix the cause, then `snaprun resume {job_id}`.") from exc
        return SnapshotRow(job_id, seq, label, self.relative(path), size, header["created_at"],
                           epoch)

    def commit_snapshot(self, row: SnapshotRow) -> None:
        """Make a written snapshot the job's latest (compare-and-swap); a refused
        writer's file is removed so it can never be mistaken for a snapshot."""
        try:
            self.catalog.commit_snapshot(row)
        except StaleWriter:
            try:
                self.fs.unlink(self.row_path(row))
            except FileNotFoundError:
                pass
            raise

    def verify(self, path: str) -> dict:
        """The header of a verified snapshot file of a job (nothing unpickled)."""
        return _job_header(path, _snapfile.verify(path, self.keys,
                                                  require_encryption=self.encrypt))

    def read(self, path: str) -> tuple[dict, bytes]:
        header, payload = _snapfile.read_payload(path, self.keys,
                                                 require_encryption=self.encrypt)
        return _job_header(path, header), payload

    def read_row(self, row: SnapshotRow) -> tuple[dict, bytes]:
        header, payload = self.read(self.row_path(row))
        return header, payload

    def copy_snapshot(self, source: str, job_id: str, seq: int, epoch: int = 0) -> str:
        """Copy a verified snapshot file into a job's folder (durably: temp, fsync,
        rename). Never a hard link: the user's file (an import) or another job's (a
        fork) stays independent of the store's copy."""
        target = self.snapshot_path(job_id, seq, epoch)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        self._confine(target, os.path.join(self.directory, "snapshots"),
                      f"snapshot {seq} of job {job_id!r}")
        _fs.write_atomic(target, _read_chunks(source), self.fs)
        return target

    def delete_file(self, file: str, job_id: str | None = None) -> None:
        """Delete a catalog row's file (confined like absolute())."""
        try:
            os.unlink(self.absolute(file, job_id))
        except FileNotFoundError:
            pass

    def delete_job_files(self, job_id: str) -> None:
        """Delete a job's folder <store>/snapshots/<job> (never anything else)."""
        folder = self.job_directory(job_id)
        if os.path.islink(folder):
            raise StoreDamaged(f"the folder of job {job_id!r} ({folder}) is a symbolic link: "
                               "the store was tampered with; refusing to delete it")
        shutil.rmtree(folder, ignore_errors=True)

    def sweep_temp_files(self) -> int:
        """Remove temp files left by writers that died (SIGKILL mid-write)."""
        removed = 0
        root = os.path.join(self.directory, "snapshots")
        for job in os.listdir(root):
            folder = os.path.join(root, job)
            if not os.path.isdir(folder) or os.path.islink(folder):  # never sweep outside
                continue
            for name in os.listdir(folder):
                if _fs.writer_is_gone(name):
                    try:
                        os.unlink(os.path.join(folder, name))
                        removed += 1
                    except FileNotFoundError:
                        pass
        return removed

    def orphan_files(self, job_id: str) -> list[str]:
        """Snapshot files of a job that the catalog does not list."""
        folder = self.job_directory(job_id)
        known = {os.path.normpath(row.file) for row in self.catalog.snapshots(job_id)}
        if not os.path.isdir(folder):
            return []
        return [self.relative(os.path.join(folder, n)) for n in sorted(os.listdir(folder))
                if n.endswith(".snap") and self.relative(os.path.join(folder, n)) not in known
                and os.path.isfile(os.path.join(folder, n))
                and not os.path.islink(os.path.join(folder, n))]

    def close(self) -> None:
        self.catalog.close()


JOB_HEADER_FIELDS = frozenset({"job_id", "seq", "label", "created_at", "versions", "entry",
                               "argv", "frames", "modules"})


def _job_header(path: str, header: dict) -> dict:
    missing = JOB_HEADER_FIELDS - set(header)
    if missing:
        raise HeaderMismatch(f"{path} is signed but is no job snapshot (its header lacks "
                             f"{', '.join(sorted(missing))}); refusing it")
    if not isinstance(header["entry"], dict) or not isinstance(header["seq"], int):
        raise HeaderMismatch(f"{path} is signed but its header is not a job snapshot's")
    return header


def _read_chunks(path: str, size: int = 1 << 20):
    with open(path, "rb") as f:
        while chunk := f.read(size):
            yield chunk

