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

from ..runtime._errors import HeaderMismatch, SnapshotWriteError, StaleWriter
from . import _fs, _sealing, _snapfile
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
        _fs.make_private_dir(self.directory)
        _fs.make_private_dir(os.path.join(self.directory, "snapshots"))
        self.fs = fs
        self.catalog = catalog or SqliteStore(self.directory)
        self.keys = KeyRing(self.directory)
        self.config = self._load_config()
        self._seal_catalog()
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
        if hasattr(self.catalog, "reseal"):
            # Rows written before the switch are sealed (or opened) now; an interrupted
            # switch is completed by running it again.
            self.catalog.reseal(_sealing.Sealer(self.keys, self.encrypt))
        self._seal_catalog()

    def _seal_catalog(self) -> None:
        """Give the catalog the sealer of this store's setting: in an encrypted store,
        what the agent produced is sealed in the catalog too (serializers._sealing)."""
        if hasattr(self.catalog, "sealer"):
            self.catalog.sealer = _sealing.Sealer(self.keys, self.encrypt)

    @property
    def encrypt(self) -> bool:
        return bool(self.config.get("encrypt"))

    # ---------------------------------------------------------------- files
    def relative(self, path: str) -> str:
        return os.path.relpath(os.path.abspath(path), self.directory)

    def absolute(self, file: str) -> str:
        return os.path.join(self.directory, file)

    def job_directory(self, job_id: str) -> str:
        return os.path.join(self.directory, "snapshots", job_id)

    def snapshot_path(self, job_id: str, seq: int, epoch: int) -> str:
        return os.path.join(self.job_directory(job_id), f"{seq:06d}-e{epoch}.snap")

    def write_snapshot(self, job_id: str, seq: int, epoch: int, label: str | None,
                       header: dict, payload: bytes) -> SnapshotRow:
        """Write the file durably (not yet in the catalog). SnapshotWriteError on any
        I/O failure: never retried."""
        path = self.snapshot_path(job_id, seq, epoch)
        if self.encrypt:
            header = _sealing.seal_header(header, self.keys)
        try:
            _fs.make_private_dir(os.path.dirname(path))
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
                self.fs.unlink(self.absolute(row.file))
            except FileNotFoundError:
                pass
            raise

    def verify(self, path: str) -> dict:
        """The header of a verified snapshot file of a job (nothing unpickled)."""
        header = _snapfile.verify(path, self.keys, require_encryption=self.encrypt)
        return _job_header(path, _sealing.open_header(header, self.keys, path))

    def read(self, path: str) -> tuple[dict, bytes]:
        header, payload = _snapfile.read_payload(path, self.keys,
                                                 require_encryption=self.encrypt)
        return _job_header(path, _sealing.open_header(header, self.keys, path)), payload

    def read_row(self, row: SnapshotRow) -> tuple[dict, bytes]:
        header, payload = self.read(self.absolute(row.file))
        return header, payload

    def copy_snapshot(self, source: str, job_id: str, seq: int, epoch: int = 0) -> str:
        """Copy (hard-link when possible) a verified snapshot file into a job's folder."""
        target = self.snapshot_path(job_id, seq, epoch)
        _fs.make_private_dir(os.path.dirname(target))
        try:
            os.link(source, target)
        except OSError:
            _fs.write_atomic(target, _read_chunks(source), self.fs)
        return target

    def delete_file(self, file: str) -> None:
        try:
            os.unlink(self.absolute(file))
        except FileNotFoundError:
            pass

    def delete_job_files(self, job_id: str) -> None:
        shutil.rmtree(self.job_directory(job_id), ignore_errors=True)

    def sweep_temp_files(self) -> int:
        """Remove temp files left by writers that died (SIGKILL mid-write)."""
        removed = 0
        root = os.path.join(self.directory, "snapshots")
        for job in os.listdir(root):
            folder = os.path.join(root, job)
            if not os.path.isdir(folder):
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
        known = {row.file for row in self.catalog.snapshots(job_id)}
        folder = self.job_directory(job_id)
        if not os.path.isdir(folder):
            return []
        return [self.relative(os.path.join(folder, n)) for n in sorted(os.listdir(folder))
                if n.endswith(".snap") and self.relative(os.path.join(folder, n)) not in known]

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

