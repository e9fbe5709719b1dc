"""A store in PostgreSQL: the catalog, the snapshot bodies (chunks, as `bytea`) and the
store's identity and settings in one database, so workers on many machines share it;
the keys stay with the operator.

    --store postgresql://USER@HOST:PORT/DB   (or SNAPSTATE_STORE)
    SNAPSTATE_KEY_FILE=PATH   the store's key file (a keys.json: created, 0600, with a
                              new key when a new store is set up), or
    SNAPSTATE_KEY=HEX         the key itself (at least 32 bytes)
    SNAPSTATE_BODIES=DIR      optional: a folder every machine mounts; chunk sets larger
                              than 64 KiB go to pack files there, the catalog keeps
                              where they lie (default: every chunk in the database)

A PostgreSQL store never reads a key from the database. What the database holds about
the store (table store_meta): its id, the fingerprints of the keys it was created with
(a key that matches none is refused, as a replaced keys.json is), and its settings,
signed with the store's key, so the database's writer cannot turn encryption off.

Every snapshot is chunked, so export, verify, inspect, fork and `resume FILE` work as
on a directory store: a snapshot file imported is cut into chunks under a manifest
signed with this store's key, its origin recorded as for a file row.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import time
from typing import Any

from .._errors import HeaderMismatch, StoreDamaged, StoreError
from . import _binding, _fs, _identity, _sealing, _snapfile
from ._chunkstore import ChunkStore
from ._home import Home, _job_header
from ._ids import validate_job_id
from ._keys import ENV_KEY, KeyRing
from ._location import redact
from ._postgres import SCHEMA_VERSION as PG_SCHEMA_VERSION
from ._postgres import PostgresCatalog
from ._store import CHUNKED, SnapshotBody, SnapshotRow

__all__ = ["PostgresHome", "KEY_FILE_ENV", "BODIES_ENV"]

KEY_FILE_ENV = "SNAPSTATE_KEY_FILE"
BODIES_ENV = "SNAPSTATE_BODIES"
_CONFIG_MAC = b"snapstate postgres store config"


class PostgresHome(Home):
    """A store whose catalog and bodies are in PostgreSQL (see the module doc)."""

    keeps_files = False
    catalog_kind = "postgresql"
    catalog_schema = PG_SCHEMA_VERSION
    catalog: PostgresCatalog

    def __init__(
        self,
        url: str,
        *,
        fs: _fs.FileSystem = _fs.OS,
        create: bool = True,
        writable: bool | None = None,
    ):
        self.url = url
        self.location = url
        self.directory = redact(url)
        self.writable = create if writable is None else writable
        self.fs = fs
        bodies = os.environ.get(BODIES_ENV) or None
        if bodies is not None and not os.path.isabs(bodies):
            raise StoreError(f"{BODIES_ENV}={bodies!r}: give the shared folder as an absolute path")
        self.bodies = bodies
        self.chunks = ChunkStore(
            bodies or "",
            lambda: self.catalog,
            lambda: self.keys,
            lambda: self.encrypt,
            fs,
            packs=os.path.join(bodies, "chunks") if bodies else None,
        )
        # An empty database is set up on first use; an older schema waits for
        # `snaprun db upgrade` (every machine's snapstate must know the new one first).
        self.catalog = PostgresCatalog(url, create=create, writable=self.writable, upgrade=False)
        try:
            if not create and "store_id" not in self.catalog.meta():
                raise StoreError(
                    f"no snapstate store in {self.directory} yet (its tables hold no store): "
                    "stores are created by `snaprun run` and `snaprun init`"
                )
            self.keys = self._key_ring(create)
            self._identify(create)
            self.config = self._load_config()
            self._seal_catalog()
        except BaseException:
            self.catalog.close()
            raise

    # ------------------------------------------------------------------ keys
    def _key_ring(self, create: bool) -> KeyRing:
        path = os.environ.get(KEY_FILE_ENV)
        if path:
            path = os.path.abspath(path)
            if not os.path.exists(path) and not create:
                raise StoreDamaged(
                    f"the key file {path} ({KEY_FILE_ENV}) of the store {self.directory} is "
                    "missing: its snapshots cannot be verified without it. Restore it from a "
                    "backup"
                )
            return KeyRing(os.path.dirname(path), create=create, path=path)
        if os.environ.get(ENV_KEY):
            return KeyRing.from_env()
        raise StoreError(
            f"the PostgreSQL store {self.directory} needs its key from you, never from the "
            f"database: set {KEY_FILE_ENV}=PATH (a key file; a new store creates it) or "
            f"{ENV_KEY}=HEX (at least 32 bytes), the same on every machine"
        )

    def _fingerprints(self, keys: KeyRing | None = None) -> dict[str, str]:
        return {k.key_id: _identity.fingerprint(k.secret) for k in (keys or self.keys).keys()}

    def _identify(self, create: bool) -> None:
        meta = self.catalog.meta()
        mine = self._fingerprints()
        if "store_id" not in meta:
            if not (create and self.writable):
                raise StoreError(f"no snapstate store in {self.directory} yet")
            # Several processes may set a new store up at once: the first one's facts win.
            store_id = self.catalog.set_meta("store_id", os.urandom(16).hex(), only_new=True)
            created = float(self.catalog.set_meta("created", repr(time.time()), only_new=True))
            recorded = json.loads(
                self.catalog.set_meta("keys", json.dumps(mine, sort_keys=True), only_new=True)
            )
        else:
            try:
                store_id, created = meta["store_id"], float(meta["created"])
                recorded = json.loads(meta["keys"])
                if not isinstance(recorded, dict) or len(store_id) != 32:
                    raise ValueError("bad store id or fingerprints")
            except (KeyError, ValueError, TypeError) as exc:
                raise StoreDamaged(
                    f"the store identity in {self.directory} (table store_meta) is damaged "
                    f"({exc}); restore the database from a backup"
                ) from None
        if recorded and not set(recorded.values()) & set(mine.values()):
            raise StoreDamaged(
                f"none of the keys given ({KEY_FILE_ENV} or {ENV_KEY}) is one the store "
                f"{self.directory} was created with: it would verify none of its snapshots. "
                "Give the store's key file or key"
            )
        if self.writable and not set(mine.values()) <= set(recorded.values()):
            recorded = dict(recorded, **mine)
            self.catalog.set_meta("keys", json.dumps(recorded, sort_keys=True))
        self.identity = _identity.StoreIdentity(store_id, created, recorded)

    def record_keys(self) -> None:
        if self.writable:
            self._identify(create=False)

    def _seal_catalog(self) -> None:
        """Every row of a PostgreSQL store is signed from birth: a row without its
        signature is always refused (whatever the key file says of a directory store)."""
        self.catalog.sealer = _sealing.Sealer(self.keys, self.encrypt, signed=True)

    # ------------------------------------------------------------------ settings
    def _config_mac(self, text: str, key_id: str) -> str:
        key = self.keys.get(key_id)
        mac = hmac.new(key.mac_key, _CONFIG_MAC + text.encode(), hashlib.sha256).hexdigest()
        return f"{key_id}:{mac}"

    def _load_config(self) -> dict[str, Any]:
        meta = self.catalog.meta()
        text, mac = meta.get("config"), meta.get("config_mac")
        if text is None:
            if not self.writable:
                return {"encrypt": False}
            self._save_config({"encrypt": False}, only_new=True)
            meta = self.catalog.meta()
            text, mac = meta.get("config"), meta.get("config_mac")
        try:
            key_id = str(mac).split(":", 1)[0]
            good = hmac.compare_digest(str(mac), self._config_mac(str(text), key_id))
            config = json.loads(str(text)) if good else None
        except (StoreError, ValueError):
            good, config = False, None
        if not good or not isinstance(config, dict):
            raise StoreDamaged(
                f"the settings of the store {self.directory} (table store_meta) fail "
                "authentication with the store's key: they were edited. Restore the "
                "database from a backup"
            )
        return config

    def _save_config(self, config: dict[str, Any], *, only_new: bool = False) -> None:
        text = json.dumps(config, sort_keys=True)
        mac = self._config_mac(text, self.keys.current.key_id)
        self.catalog.set_meta("config_mac", mac, only_new=only_new)
        self.catalog.set_meta("config", text, only_new=only_new)

    def set_encryption(self, required: bool) -> None:
        self.config = dict(self.config, encrypt=bool(required))
        self._save_config(self.config)
        self.catalog.reseal(_sealing.Sealer(self.keys, self.encrypt, signed=True))
        self._seal_catalog()

    # ------------------------------------------------------------------ files
    def job_directory(self, job_id: str) -> str:
        raise StoreError(
            f"job {job_id}: a PostgreSQL store keeps no snapshot files (its bodies are in "
            "the database)"
        )

    def absolute(self, file: str, job_id: str | None = None) -> str:
        raise StoreDamaged(
            f"the catalog names a snapshot file {file!r}"
            + (f" for job {job_id!r}" if job_id else "")
            + f", but the PostgreSQL store {self.directory} keeps none: it was tampered with"
        )

    def copy_snapshot(self, source: str, job_id: str, seq: int, epoch: int = 0) -> str:
        raise StoreError("a PostgreSQL store keeps no snapshot files")

    def import_file(
        self, path: str, job_id: str
    ) -> tuple[dict[str, Any], SnapshotRow, SnapshotBody | None]:
        """A verified snapshot file from outside, as the chunks and manifest of a
        snapshot of job `job_id` (its header kept, signed again with this store's key;
        nothing committed here)."""
        validate_job_id(job_id)
        raw, payload, digest = _snapfile.read_verified(
            path, self.keys, require_encryption=self.encrypt
        )
        header = _job_header(path, _sealing.open_header(raw, self.keys, path))
        del digest  # the file's own; the snapshot's digest is its manifest's signature
        seq, epoch = header["seq"], 0
        if not isinstance(seq, int) or seq < 0:
            raise HeaderMismatch(f"{path} is signed but its header's seq is not valid")
        prepared = self.chunks.prepare(job_id, seq, epoch, header["label"], raw, bytes(payload))
        origin = _binding.origin_of(header, self.store_id, job_id, epoch)
        row = SnapshotRow(
            job_id,
            seq,
            header["label"],
            CHUNKED,
            prepared.row.size,
            header["created_at"],
            epoch,
            prepared.row.digest,
            origin,
        )
        self.chunks.forget(job_id)
        return header, row, prepared.body

    def delete_file(self, file: str, job_id: str | None = None) -> None:
        if file != CHUNKED:
            self.absolute(file, job_id)  # refused: no file rows here

    def delete_job_files(self, job_id: str) -> None:
        validate_job_id(job_id)

    def sweep_temp_files(self) -> int:
        return 0

    def orphan_files(self, job_id: str) -> list[str]:
        return []
