"""A store's identity, kept outside its catalog: `<store>/store.json` (0600).

    {"format": 1, "store_id": "<32 hex>", "created": <unix time>,
     "keys": {"<key id>": "<fingerprint>", ...}}

It is written atomically when a store is created (last, so its presence means the
store was created completely), and it tells that a store exists even when catalog.db
or keys.json is gone: such a store is refused as damaged instead of being silently
re-created (an empty catalog orphans every snapshot; a fresh key verifies none).

The store id is written into every snapshot header (Home.write_snapshot), so a file
is bound to the store that wrote it. A key's fingerprint is derived from its secret
with HKDF (never the secret itself), so a keys.json replaced by one with unrelated
keys is told apart from the store's own.

This module also holds the cheap health checks of catalog.db done before SQLite is
allowed to touch it (SQLite treats a missing or 0-byte file as a new empty database).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from .._errors import StoreDamaged
from . import _fs

if TYPE_CHECKING:
    from ._keys import KeyRing

__all__ = [
    "StoreIdentity",
    "IDENTITY_FILE",
    "CATALOG_FILE",
    "KEYS_FILE",
    "LOCK_FILE",
    "load",
    "create",
    "save",
    "fingerprint",
    "key_fingerprints",
    "has_snapshot_files",
    "is_store",
    "catalog_problem",
    "store_lock",
    "repair_hint",
]

IDENTITY_FILE = "store.json"
CATALOG_FILE = "catalog.db"
KEYS_FILE = "keys.json"
LOCK_FILE = "store.lock"
_FORMAT = 1
_SQLITE_MAGIC = b"SQLite format 3\0"


@dataclass(frozen=True)
class StoreIdentity:
    store_id: str
    created: float
    keys: dict[str, str] = field(default_factory=dict)  # key id -> fingerprint


def fingerprint(secret: bytes) -> str:
    """A key's public fingerprint: HKDF of its secret (one-way, never the secret)."""
    return (
        HKDF(algorithm=hashes.SHA256(), length=16, salt=None, info=b"snapstate key fingerprint")
        .derive(secret)
        .hex()
    )


def key_fingerprints(keys: KeyRing) -> dict[str, str]:
    """{key id: fingerprint} of a KeyRing's keys, except SNAPSTATE_KEY's (not the
    store's own)."""
    from ._keys import ENV_KEY

    env = os.environ.get(ENV_KEY, "").strip().lower()
    return {k.key_id: fingerprint(k.secret) for k in keys.keys() if k.secret.hex() != env}


def repair_hint(directory: str) -> str:
    return (
        f"nothing was re-created. Restore the file from a backup, or rebuild the "
        f"catalog from the signed snapshot files with `snaprun repair --store {directory}`"
    )


def load(directory: str) -> StoreIdentity | None:
    """The store's identity, None when store.json does not exist; StoreDamaged when it
    is unreadable."""
    path = os.path.join(directory, IDENTITY_FILE)
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read(1 << 20))
        identity = StoreIdentity(
            data["store_id"], float(data["created"]), dict(data.get("keys") or {})
        )
        if not (
            isinstance(identity.store_id, str)
            and len(identity.store_id) == 32
            and all(c in "0123456789abcdef" for c in identity.store_id)
            and all(isinstance(v, str) for v in identity.keys.values())
        ):
            raise ValueError("bad store id or fingerprints")
        return identity
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        raise StoreDamaged(
            f"the store identity {path} is damaged ({exc}); " + repair_hint(directory)
        ) from None


def save(directory: str, identity: StoreIdentity) -> None:
    """Write store.json atomically and durably (mode 0600)."""
    data = json.dumps(
        {
            "format": _FORMAT,
            "store_id": identity.store_id,
            "created": identity.created,
            "keys": identity.keys,
        },
        indent=1,
        sort_keys=True,
    ).encode()
    _fs.write_atomic(os.path.join(directory, IDENTITY_FILE), [data])


def create(
    directory: str, key_fingerprints: dict[str, str], store_id: str | None = None
) -> StoreIdentity:
    identity = StoreIdentity(store_id or secrets.token_hex(16), time.time(), dict(key_fingerprints))
    save(directory, identity)
    return identity


def has_snapshot_files(directory: str) -> bool:
    """True if any job folder under snapshots/ holds a snapshot file."""
    root = os.path.join(directory, "snapshots")
    try:
        jobs = os.scandir(root)
    except (FileNotFoundError, NotADirectoryError):
        return False
    with jobs:
        for job in jobs:
            if not job.is_dir(follow_symlinks=False):
                continue
            with os.scandir(job.path) as files:
                if any(f.name.endswith(".snap") for f in files):
                    return True
    return False


def is_store(directory: str) -> bool:
    """Whether `directory` already holds a store (complete or damaged): its identity,
    its catalog or snapshot files are there."""
    return (
        os.path.exists(os.path.join(directory, IDENTITY_FILE))
        or os.path.lexists(os.path.join(directory, CATALOG_FILE))
        or has_snapshot_files(directory)
    )


def catalog_problem(directory: str) -> str | None:
    """What is wrong with catalog.db at the byte level (None when it looks like an
    SQLite database of the right size): missing, empty, not SQLite (zeroed, random)
    or shorter than its header says (truncated). The schema is checked by the catalog
    itself once opened."""
    path = os.path.join(directory, CATALOG_FILE)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(100)
    except FileNotFoundError:
        return f"the catalog {path} is missing"
    except IsADirectoryError:
        return f"the catalog {path} is a directory"
    except OSError as exc:
        return f"the catalog {path} cannot be read ({exc.strerror or exc})"
    if size == 0:
        return f"the catalog {path} is empty (0 bytes)"
    if not head.startswith(_SQLITE_MAGIC):
        return f"the catalog {path} is not an SQLite database (zeroed or overwritten)"
    if len(head) < 100:
        return f"the catalog {path} is truncated ({size} bytes)"
    page_size = struct.unpack(">H", head[16:18])[0]
    page_size = 65536 if page_size == 1 else page_size
    pages, valid_for = struct.unpack(">I", head[28:32])[0], struct.unpack(">I", head[92:96])[0]
    change_counter = struct.unpack(">I", head[24:28])[0]
    if page_size < 512 or page_size & (page_size - 1):
        return f"the catalog {path} has a damaged header"
    wal = path + "-wal"
    # A checkpoint cut short (disk full, kill -9) leaves the file shorter than its
    # header says while the WAL still holds the pages: SQLite recovers that itself.
    try:  # (another process may checkpoint and remove it meanwhile)
        wal_holds_pages = os.stat(wal).st_size > 32
    except OSError:
        wal_holds_pages = False
    if size % page_size or (
        valid_for == change_counter and size < pages * page_size and not wal_holds_pages
    ):
        return (
            f"the catalog {path} is truncated ({size} bytes; its header says {pages * page_size})"
        )
    return None


@contextlib.contextmanager
def store_lock(directory: str, *, exclusive: bool, create: bool) -> Iterator[None]:
    """Hold the store's open lock: creating or checking a store is done under it, so
    a store being created by one process is never seen half-made by another. Without
    `create`, a missing lock file is not created (read-only opening) and no lock is
    taken."""
    path = os.path.join(directory, LOCK_FILE)
    try:
        fd = os.open(path, (os.O_RDWR | os.O_CREAT) if create else os.O_RDONLY, 0o600)
    except FileNotFoundError:
        if create:
            raise
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)
