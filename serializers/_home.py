"""A store directory: the catalog, the keys, the settings and the snapshot files.

    <store>/catalog.db                    jobs, snapshots, leases, timeline (SQLite, WAL)
    <store>/keys.json                     signing/encryption keys (0600)
    <store>/config.json                   settings (encryption required or not)
    <store>/store.json                    the store's identity (serializers/_identity.py)
    <store>/store.lock                    held while a store is opened or created
    <store>/snapshots/<job>/<seq>-e<epoch>.snap   snapshot files (imported, or older)
    <store>/chunks/*.pack                 chunks of large chunked snapshots

Opening decides whether the directory is a new store or an existing one (store.json,
catalog.db or snapshot files present). An existing store's missing or damaged
catalog, or missing keys.json, is refused (StoreDamaged), never re-created.
`create=False` never creates a store; `writable=False` (read-only commands) also
writes nothing: no store.json for an old store, no schema upgrade, no temp sweep.

A job's snapshots are chunked (serializers/_chunkstore.py): the body is cut into
content-defined chunks stored once per store, and the snapshot is its signed manifest
and the chunks the store did not hold yet, committed with its catalog row in one
compare-and-swap transaction (a large set of new chunks is first written to one pack
file). Snapshot files (format 2: a header, the whole body, a signed trailer) are what
`export` writes and `resume FILE` and `import` read; a store keeps an imported file,
and files written by earlier releases, as they are. A file is durable in two steps:
written atomically (temp, fsync, rename, fsync the directory), then its row is
committed; a crash between the two leaves a file without a row, which is never read
and is swept.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from typing import Any

from .._errors import (
    HeaderMismatch,
    InvalidJobId,
    SnapshotNotFound,
    StoreDamaged,
    StoreError,
)
from . import _binding, _fs, _identity, _sealing, _snapfile
from ._buffer import StreamReader
from ._catalog import Catalog
from ._chunkstore import PACKS, ChunkStore, Prepared
from ._ids import validate_job_id
from ._keys import KeyRing
from ._location import is_postgres_url, redact
from ._manifest import MANIFEST_FORMAT, Manifest
from ._sqlite import SCHEMA_VERSION, SqliteCatalog
from ._store import CHUNKED, SnapshotBody, SnapshotRow

__all__ = ["Home", "default_home", "open_store", "is_postgres_url", "redact", "Prepared"]

_CONFIG = "config.json"


def default_home(store: str | None = None) -> str:
    """The store in use: `store` (--store), else SNAPSTATE_STORE, else SNAPSTATE_HOME,
    else ./.snapstate; a directory as an absolute path, a postgresql:// URL as it is."""
    location = store or os.environ.get("SNAPSTATE_STORE") or os.environ.get("SNAPSTATE_HOME")
    if location and is_postgres_url(location):
        return location
    return os.path.abspath(location or ".snapstate")


def open_store(location: str, **options: Any) -> Home:
    """The store at `location`: a directory (the embedded SQLite store) or a
    postgresql:// URL (serializers/_pghome.py; needs `snapstate[postgres]`)."""
    if not is_postgres_url(location):
        return Home(location, **options)
    try:
        from ._pghome import PostgresHome
    except ImportError as exc:
        raise StoreError(
            f"the store {redact(location)} is a PostgreSQL store, and this installation lacks "
            f"its driver ({exc.name}): pip install 'snapstate[postgres]'"
        ) from None
    return PostgresHome(location, **options)


class Home:
    keeps_files = True  # snapshot files and pack files in a directory (not PostgreSQL's)
    catalog_kind = "sqlite"  # which catalog schema `catalog_schema` numbers (headers)
    catalog_schema = SCHEMA_VERSION
    catalog: Catalog
    keys: KeyRing
    identity: _identity.StoreIdentity | None  # None: no store.json (opened read-only)
    config: dict[str, Any]

    def __init__(
        self,
        directory: str,
        *,
        fs: _fs.FileSystem = _fs.OS,
        catalog: Catalog | None = None,
        create: bool = True,
        writable: bool | None = None,
    ):
        self.directory = os.path.abspath(directory)
        self.location = self.directory  # what opens this store again (--store)
        self.writable = create if writable is None else writable
        self.fs = fs
        self.chunks = ChunkStore(
            self.directory, lambda: self.catalog, lambda: self.keys, lambda: self.encrypt, fs
        )
        if create:
            _fs.make_private_dir(self.directory)
        elif not os.path.isdir(self.directory) or not _identity.is_store(self.directory):
            raise StoreError(
                f"no store at {self.directory}: name an existing store with --store DIR or "
                "SNAPSTATE_HOME (`snaprun ls --store DIR` lists its jobs); stores are created "
                "by `snaprun run` and `snaprun init`"
            )
        with _identity.store_lock(self.directory, exclusive=self.writable, create=self.writable):
            if _identity.is_store(self.directory):
                self._open_existing(catalog)
            else:
                self._create(catalog)
            self.config = self._load_config()
            self._seal_catalog()
            self._sign_rows()
        if self.writable:
            self.sweep_temp_files()

    def _create(self, catalog: Catalog | None) -> None:
        """A new store: catalog and keys first, store.json last (its presence means the
        store is complete); all under the store lock."""
        _fs.make_private_dir(os.path.join(self.directory, "snapshots"))
        self.catalog = catalog or SqliteCatalog(self.directory)
        self.keys = KeyRing(self.directory)
        self.identity = _identity.create(self.directory, self._fingerprints())

    def _open_existing(self, catalog: Catalog | None) -> None:
        directory = self.directory
        if catalog is None:
            problem = _identity.catalog_problem(directory)
            if problem:
                raise StoreDamaged(
                    f"{problem}, in the store {directory}; " + _identity.repair_hint(directory)
                )
        keys_path = os.path.join(directory, _identity.KEYS_FILE)
        keys_lost = (
            f"the key file {keys_path} of the store {directory} is missing: its "
            "snapshots cannot be verified without it, and a new key would verify none "
            "of them, so none was made. Restore keys.json from a backup (or import the "
            "store's key); `snaprun repair` cannot recreate a key"
        )
        self.identity = identity = _identity.load(directory)
        # No identity and no snapshot: maybe a creation cut short (or a catalog passed in).
        unfinished = identity is None and not _identity.has_snapshot_files(directory)
        has_keys = os.path.exists(keys_path)
        if not has_keys and not unfinished:
            raise StoreDamaged(keys_lost)
        if has_keys:
            self.keys = KeyRing(directory)
            self._check_keys()
        try:
            self.catalog = catalog or SqliteCatalog(
                directory,
                create=False,
                writable=self.writable and identity is not None,
                signed_rows=has_keys and self.keys.rows_signed,
            )
        except StoreDamaged as exc:
            raise StoreDamaged(f"{exc}; " + _identity.repair_hint(directory)) from None
        try:
            if not has_keys:
                if not self.writable or self.catalog.list_jobs():
                    raise StoreDamaged(keys_lost)
                self.keys = KeyRing(directory)  # finish the creation: no job yet
            if identity is None:
                self.identity = self._adopt_identity(catalog is None)
        except BaseException:
            self.catalog.close()
            raise
        if self.writable:
            _fs.make_private_dir(os.path.join(directory, "snapshots"))

    def _adopt_identity(self, own_catalog: bool) -> _identity.StoreIdentity | None:
        """An existing store without store.json: one of the previous release (schema
        version 1), or one whose creation was cut short (no job yet), gets one on its
        first writable open; any other lost its identity file."""
        version = getattr(self.catalog, "schema_version", SCHEMA_VERSION)
        # Schemas from 4 on (this release's) were written with store.json: one without it
        # lost it (a schema bump must not make such a store look like an old one).
        if version >= 4 and self.catalog.list_jobs():
            path = os.path.join(self.directory, _identity.IDENTITY_FILE)
            raise StoreDamaged(
                f"the store identity {path} is missing; " + _identity.repair_hint(self.directory)
            )
        if not self.writable:
            return None
        keys = KeyRing(self.directory)
        identity = _identity.create(self.directory, self._fingerprints(keys))
        if own_catalog and version != SCHEMA_VERSION:  # now upgrade the schema
            self.catalog.close()
            self.catalog = SqliteCatalog(self.directory, create=False, writable=True)
        return identity

    def _fingerprints(self, keys: KeyRing | None = None) -> dict[str, str]:
        return _identity.key_fingerprints(keys or self.keys)

    def _check_keys(self) -> None:
        """keys.json must hold at least one of the keys the store was created with; a
        writable open records keys added since (rotation, import)."""
        if self.identity is None:
            return
        mine = self._fingerprints()
        recorded = set(self.identity.keys.values())
        if recorded and mine and not recorded & set(mine.values()):
            raise StoreDamaged(
                f"the key file {os.path.join(self.directory, _identity.KEYS_FILE)} holds none "
                f"of the keys the store {self.directory} was created with (it was replaced); "
                "restore the store's keys.json from a backup"
            )
        if self.writable and not set(mine.values()) <= recorded:
            self.identity = _identity.StoreIdentity(
                self.identity.store_id, self.identity.created, dict(self.identity.keys, **mine)
            )
            _identity.save(self.directory, self.identity)

    def record_keys(self) -> None:
        """Record in the store's identity the keys its key ring gained since it was
        opened (a key imported by `snaprun migrate-store`), as a writable open would."""
        if self.writable:
            self._check_keys()

    @property
    def store_id(self) -> str | None:
        return self.identity.store_id if self.identity else None

    # ---------------------------------------------------------------- settings
    def _load_config(self) -> dict[str, Any]:
        path = os.path.join(self.directory, _CONFIG)
        try:
            with open(path) as f:
                config: dict[str, Any] = json.load(f)
                return config
        except FileNotFoundError:
            return {"encrypt": False}

    def set_encryption(self, required: bool) -> None:
        self.config = dict(self.config, encrypt=bool(required))
        data = json.dumps(self.config, indent=1).encode()
        _fs.write_atomic(os.path.join(self.directory, _CONFIG), [data])
        if hasattr(self.catalog, "reseal"):
            # Rows written before the switch are sealed (or opened) now; an interrupted
            # switch is completed by running it again.
            self.catalog.reseal(
                _sealing.Sealer(self.keys, self.encrypt, signed=self.keys.rows_signed)
            )
        self._seal_catalog()

    def _seal_catalog(self) -> None:
        """Give the catalog the sealer of this store's setting: in an encrypted store,
        what the agent produced is sealed in the catalog too (serializers._sealing)."""
        if hasattr(self.catalog, "sealer"):
            self.catalog.sealer = _sealing.Sealer(
                self.keys, self.encrypt, signed=self.keys.rows_signed
            )

    def _sign_rows(self) -> None:
        """A catalog written before rows carried signatures (schema < 5), upgraded by
        this writable open: sign its rows once with the store's key, then record in the
        key file that they are signed. From then on a row without a signature is
        refused, and so is a catalog of an older schema (a rollback), since the key file
        is what the catalog's writer cannot change (docs/design.md, "Catalog trust")."""
        if self.keys.rows_signed or not self.writable or not hasattr(self.catalog, "sign_rows"):
            return
        if getattr(self.catalog, "schema_version", SCHEMA_VERSION) != SCHEMA_VERSION:
            return  # opened read-only over an older schema: nothing is signed yet
        self.catalog.sign_rows()
        self.keys.mark_rows_signed()
        self._seal_catalog()

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
                "damaged or was tampered with; refusing to read, write or delete it"
            )
        return path

    def absolute(self, file: str, job_id: str | None = None) -> str:
        """The path of a catalog row's `file`, confined to <store>/snapshots (to the
        job's own folder when `job_id` is given)."""
        what = f"the catalog's file {file!r}" + (f" of job {job_id!r}" if job_id else "")
        if not isinstance(file, str) or not file or "\0" in file or os.path.isabs(file):
            raise StoreDamaged(
                f"{what} is not a path inside the store {self.directory}: the "
                "store is damaged or was tampered with; refusing it"
            )
        inside = (
            self._job_folder(job_id, what)
            if job_id is not None
            else os.path.join(self.directory, "snapshots")
        )
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
        return self._confine(
            os.path.join(self.directory, "snapshots", job_id),
            os.path.join(self.directory, "snapshots"),
            f"the folder of job {job_id!r}",
        )

    def snapshot_path(self, job_id: str, seq: int, epoch: int) -> str:
        if not isinstance(seq, int) or not isinstance(epoch, int) or seq < 0 or epoch < 0:
            raise StoreDamaged(
                f"snapshot {seq!r} (epoch {epoch!r}) of job {job_id!r} is not a "
                "valid sequence number"
            )
        return os.path.join(self.job_directory(job_id), f"{seq:06d}-e{epoch}.snap")

    def write_snapshot(
        self,
        job_id: str,
        seq: int,
        epoch: int,
        label: str | None,
        header: dict[str, Any],
        payload: bytes,
    ) -> Prepared:
        """Store the snapshot's new chunks durably and sign its manifest (nothing in the
        catalog yet: commit_snapshot commits it). SnapshotWriteError on any I/O failure:
        never retried."""
        validate_job_id(job_id)
        if not isinstance(seq, int) or not isinstance(epoch, int) or seq < 0 or epoch < 0:
            raise StoreDamaged(f"snapshot {seq!r} (epoch {epoch!r}) of job {job_id!r} is not valid")
        # The header binds the snapshot to this store, job, sequence number and epoch.
        # format and schema: the file format and catalog schema it was written in (CHANGELOG.md).
        header = dict(
            header,
            store_id=self.store_id,
            job_id=job_id,
            seq=seq,
            epoch=epoch,
            format=MANIFEST_FORMAT,
            schema=self.catalog_schema,
            **({"catalog": self.catalog_kind} if self.catalog_kind != "sqlite" else {}),
        )
        if self.encrypt:
            header = _sealing.seal_header(header, self.keys)
        return self.chunks.prepare(job_id, seq, epoch, label, header, payload)

    def commit_snapshot(self, prepared: Prepared) -> None:
        """Make a written snapshot the job's latest (compare-and-swap, with its manifest
        and new chunks in the same transaction). A refused writer's pack stays until a
        prune sweeps it (no chunk row names it)."""
        self.chunks.commit(prepared, self.catalog.commit_snapshot)

    def snapshot_row(self, job_id: str, seq: int | None = None) -> SnapshotRow:
        """The catalog row of snapshot `seq` of a job, or of its latest with None:
        JobNotFound or SnapshotNotFound naming what is missing."""
        self.catalog.get_job(job_id)
        if seq is not None:
            return self.catalog.snapshot(job_id, seq)
        rows = self.catalog.snapshots(job_id)
        if not rows:
            raise SnapshotNotFound(f"job {job_id} has no snapshot yet")
        return rows[-1]

    def where(self, row: SnapshotRow) -> str:
        """How messages name a snapshot: its file, or the job and seq of a chunked one."""
        if row.file == CHUNKED:
            return f"snapshot {row.seq} of job {row.job_id}"
        return self.row_path(row)

    def _manifest(self, row: SnapshotRow) -> tuple[dict[str, Any], Manifest]:
        """A chunked row's verified manifest, bound to the row: (job header, manifest)."""
        where = self.where(row)
        manifest = self.chunks.manifest(row, self.keys, self.encrypt, where)
        header = _job_header(where, _sealing.open_header(manifest.header, self.keys, where))
        self._check_row(row, header, manifest.digest)
        return header, manifest

    def row_header(self, row: SnapshotRow) -> dict[str, Any]:
        """A snapshot's header, verified and bound to its row, decoding no body: a
        chunked snapshot's manifest (its signature covers the header); a file whole."""
        if row.file == CHUNKED:
            return self._manifest(row)[0]
        return self.verify_row(row)[0]

    def export_row(self, row: SnapshotRow, output: str) -> None:
        """Write snapshot `row` as one self-contained snapshot file at `output`: a file
        row's file as it is; a chunked snapshot (verified first, every chunk) as a
        snapshot file (format 2) with the same header, signed with the store's current
        key and encrypted when the snapshot is."""
        if row.file != CHUNKED:
            _fs.write_atomic(output, _read_chunks(self.row_path(row)), self.fs)
            return
        _, manifest = self._manifest(row)
        payload = self.chunks.read(manifest, self.where(row))
        header = {
            k: v
            for k, v in manifest.header.items()
            if k not in ("key_id", "codecs", "size", "chunker", "chunk_size", "nonce_prefix")
        }
        header["format"] = _snapfile.FORMAT_VERSION
        _snapfile.write_signed(
            output, header, bytes(payload), self.keys, encrypt=manifest.sealed, fs=self.fs
        )

    def verify(self, path: str) -> dict[str, Any]:
        """The header of a verified snapshot file of a job (nothing unpickled)."""
        header = _snapfile.verify(path, self.keys, require_encryption=self.encrypt)
        return _job_header(path, _sealing.open_header(header, self.keys, path))

    def read(self, path: str) -> tuple[dict[str, Any], bytearray]:
        header, payload = _snapfile.read_payload(path, self.keys, require_encryption=self.encrypt)
        return _job_header(path, _sealing.open_header(header, self.keys, path)), payload

    def _check_row(self, row: SnapshotRow, header: dict[str, Any], digest: str) -> None:
        parent = None
        if row.digest is None:  # a previous release's row: its job may be a fork
            try:
                parent = self.catalog.get_job(row.job_id).parent
            except StoreError:
                pass
        _binding.check(
            row, header, digest, store_id=self.store_id, path=self.where(row), parent=parent
        )

    def read_row(self, row: SnapshotRow) -> tuple[dict[str, Any], bytearray]:
        """Verify a row's file, check that it is the very file the row recorded (store,
        job, seq, epoch, digest: HeaderMismatch otherwise), then decode its body."""
        if row.file == CHUNKED:
            header, manifest = self._manifest(row)
            return header, self.chunks.read(manifest, self.where(row))
        path = self.row_path(row)
        header, payload, digest = _snapfile.read_verified(
            path, self.keys, require_encryption=self.encrypt
        )
        header = _job_header(path, _sealing.open_header(header, self.keys, path))
        self._check_row(row, header, digest)
        return header, payload

    @contextlib.contextmanager
    def open_row(self, row: SnapshotRow) -> Iterator[tuple[dict[str, Any], StreamReader]]:
        """read_row() for the inert decoder (serializers/_inert.py) only: (header, body
        stream), the body decoded piece by piece as it is read, never assembled. A
        chunked row's chunks are each checked against their id before a byte is read;
        a file is verified whole first and its MAC recomputed as it is read (reading
        to the end, body.rest(), raises TamperedSnapshot if the file changed)."""
        if row.file == CHUNKED:
            header, manifest = self._manifest(row)
            body = StreamReader(self.chunks.chunks(manifest, self.where(row)))
            try:
                yield header, body
            finally:
                body.close()
            return
        path = self.row_path(row)
        with _snapfile.open_verified(path, self.keys, require_encryption=self.encrypt) as (
            header,
            body,
            digest,
        ):
            header = _job_header(path, _sealing.open_header(header, self.keys, path))
            self._check_row(row, header, digest)
            yield header, body

    @contextlib.contextmanager
    def open_file(self, path: str) -> Iterator[tuple[dict[str, Any], StreamReader]]:
        """read() for the inert decoder only, streamed as open_row()."""
        with _snapfile.open_verified(path, self.keys, require_encryption=self.encrypt) as (
            header,
            body,
            _,
        ):
            yield _job_header(path, _sealing.open_header(header, self.keys, path)), body

    def verify_row(self, row: SnapshotRow) -> tuple[dict[str, Any], str]:
        """read_row() without assembling the body: (header, digest). A chunked row's
        chunks are each decoded and checked."""
        if row.file == CHUNKED:
            header, manifest = self._manifest(row)
            self.chunks.check(manifest, self.where(row))
            return header, manifest.digest
        path = self.row_path(row)
        header, digest = _snapfile.verify_digest(path, self.keys, require_encryption=self.encrypt)
        header = _job_header(path, _sealing.open_header(header, self.keys, path))
        self._check_row(row, header, digest)
        return header, digest

    def copy_row(self, row: SnapshotRow, job_id: str) -> SnapshotRow:
        """Copy a job's snapshot (checked against its row first, so a swapped file is
        never laundered; a chunked one's manifest, its chunks checked by the caller)
        into another job (a fork); the new row expects what the file's
        header says and binds its digest."""
        if row.file == CHUNKED:  # the same manifest over the same chunks (fork_job)
            target, digest = None, self._manifest(row)[1].digest
        else:
            _, digest = self.verify_row(row)
            target = self.copy_snapshot(self.row_path(row), job_id, row.seq)
        return SnapshotRow(
            job_id,
            row.seq,
            row.label,
            CHUNKED if target is None else self.relative(target),
            row.size,
            row.created,
            0,
            digest,
            _binding.expected(row, self.store_id),
        )

    def import_file(
        self, path: str, job_id: str
    ) -> tuple[dict[str, Any], SnapshotRow, SnapshotBody | None]:
        """Copy a verified snapshot file from outside into job `job_id`: (its header, the
        row to record, None: no chunks; nothing is recorded here)."""
        header, digest = _snapfile.verify_digest(path, self.keys, require_encryption=self.encrypt)
        header = _job_header(path, _sealing.open_header(header, self.keys, path))
        target = self.copy_snapshot(path, job_id, header["seq"])
        return (
            header,
            SnapshotRow(
                job_id,
                header["seq"],
                header["label"],
                self.relative(target),
                os.path.getsize(target),
                header["created_at"],
                0,
                digest,
                _binding.origin_of(header, self.store_id, job_id, 0),
            ),
            None,
        )

    def copy_snapshot(self, source: str, job_id: str, seq: int, epoch: int = 0) -> str:
        """Copy a verified snapshot file into a job's folder (durably: temp, fsync,
        rename). Never a hard link: the user's file (an import) or another job's (a
        fork) stays independent of the store's copy."""
        target = self.snapshot_path(job_id, seq, epoch)
        _fs.make_private_dir(os.path.dirname(target))
        self._confine(
            target, os.path.join(self.directory, "snapshots"), f"snapshot {seq} of job {job_id!r}"
        )
        _fs.write_atomic(target, _read_chunks(source), self.fs)
        return target

    def delete_file(self, file: str, job_id: str | None = None) -> None:
        """Delete a catalog row's file (confined like absolute()); nothing for a chunked
        row (its chunks are swept by sweep_chunks)."""
        if file == CHUNKED:
            return
        try:
            self.fs.unlink(self.absolute(file, job_id))
        except FileNotFoundError:
            pass

    def delete_job_files(self, job_id: str) -> None:
        """Delete a job's folder <store>/snapshots/<job> (never anything else)."""
        folder = self.job_directory(job_id)
        if os.path.islink(folder):
            raise StoreDamaged(
                f"the folder of job {job_id!r} ({folder}) is a symbolic link: "
                "the store was tampered with; refusing to delete it"
            )
        with contextlib.suppress(OSError):  # what is left has no row: never read
            self.fs.remove_tree(folder)

    def sweep_chunks(self) -> tuple[int, int]:
        """Mark and sweep: delete the chunks no snapshot lists, then the pack files no
        chunk lives in (whose writer is gone). Returns (chunks, packs) deleted."""
        chunks, _ = self.catalog.sweep_chunks()
        return chunks, self.chunks.sweep_packs()

    def sweep_temp_files(self) -> int:
        """Remove temp files left by writers that died (SIGKILL mid-write)."""
        removed = 0
        root = os.path.join(self.directory, "snapshots")
        folders = [os.path.join(root, job) for job in os.listdir(root)]
        folders.append(os.path.join(self.directory, PACKS))
        for folder in folders:
            if not os.path.isdir(folder) or os.path.islink(folder):  # never sweep outside
                continue
            for name in os.listdir(folder):
                if _fs.writer_is_gone(name):
                    try:
                        self.fs.unlink(os.path.join(folder, name))
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
        return [
            self.relative(os.path.join(folder, n))
            for n in sorted(os.listdir(folder))
            if n.endswith(".snap")
            and self.relative(os.path.join(folder, n)) not in known
            and os.path.isfile(os.path.join(folder, n))
            and not os.path.islink(os.path.join(folder, n))
        ]

    def close(self) -> None:
        self.catalog.close()


JOB_HEADER_FIELDS = frozenset(
    {"job_id", "seq", "label", "created_at", "versions", "entry", "argv", "frames", "modules"}
)


def _job_header(path: str, header: dict[str, Any]) -> dict[str, Any]:
    missing = JOB_HEADER_FIELDS - set(header)
    if missing:
        raise HeaderMismatch(
            f"{path} is signed but is no job snapshot (its header lacks "
            f"{', '.join(sorted(missing))}); refusing it"
        )
    if not isinstance(header["entry"], dict) or not isinstance(header["seq"], int):
        raise HeaderMismatch(f"{path} is signed but its header is not a job snapshot's")
    return header


def _read_chunks(path: str, size: int = 1 << 20) -> Iterator[bytes]:
    with open(path, "rb") as f:
        while chunk := f.read(size):
            yield chunk
