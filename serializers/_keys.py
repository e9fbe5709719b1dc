"""Signing and encryption keys.

A store creates its key on first use in `keys.json` (mode 0600) in the store
directory; `SNAPSTATE_KEY` (hex, at least 32 bytes) is used too (and is current), so a
file exported from one store resumes in another that shares the key. A file is only
ever verified with these keys: a file never brings a key of its own.

Every key has an id written into each snapshot's header, derived from the secret
(`k-` + 20 hex digits of HKDF), so one secret has one id whether it comes from
keys.json, SNAPSTATE_KEY or an imported key file. Ids minted before that ("k1-xxxx",
"env-…") keep loading as stored. `snaprun keys rotate` makes a new key current (old
snapshots still load with theirs), `snaprun keys retire ID` stops trusting one,
`snaprun keys export ID -o FILE` / `snaprun keys import FILE` move a key between stores.

keys.json is refused when other users may read or write it, or when it belongs to
another user (as ssh refuses a private key), and when it is corrupt (StoreDamaged:
never silently replaced, which would make every existing snapshot unverifiable).
Every read-modify-write of keys.json (create, rotate, retire, import) holds an
exclusive flock on `keys.json.lock` and re-reads the file inside it, so concurrent
rotations never lose a key.

One master key per id; the HMAC key and the AEAD key are derived from it with HKDF,
so the two uses never share key material.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import secrets
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from .._errors import RetiredKey, StoreDamaged, StoreError, UnknownKey
from . import _fs

__all__ = ["Key", "KeyRing", "ENV_KEY", "key_id_of"]

T = TypeVar("T")

ENV_KEY = "SNAPSTATE_KEY"
_FILE = "keys.json"
_EXPORT_FORMAT = "snapstate-key/1"
_MIN_SECRET = 32
# Ids name keys in headers and sealed results (one length byte): a short safe alphabet.
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# Ids minted before ids were derived: k<n>-<8 random hex> (stored keys) and
# env-<sha256[:12]> (SNAPSTATE_KEY). The first cannot be checked against its secret.
_LEGACY_STORED = re.compile(r"k[0-9]+-[0-9a-f]{8}")


def key_id_of(secret: bytes) -> str:
    """The id of a secret: HKDF with its own info string, so it reveals nothing of the
    HMAC or AEAD keys derived from the same secret."""
    digest = HKDF(algorithm=hashes.SHA256(), length=10, salt=None, info=b"snapstate key-id").derive(
        secret
    )
    return "k-" + digest.hex()


def _legacy_env_id(secret: bytes) -> str:
    return "env-" + hashlib.sha256(secret).hexdigest()[:12]


@dataclass(frozen=True)
class Key:
    key_id: str
    secret: bytes
    created: float
    retired: bool = False

    def _derive(self, purpose: bytes) -> bytes:
        return HKDF(
            algorithm=hashes.SHA256(), length=32, salt=None, info=b"snapstate " + purpose
        ).derive(self.secret)

    @functools.cached_property
    def mac_key(self) -> bytes:
        return self._derive(b"hmac-sha256")

    @functools.cached_property
    def aead_key(self) -> bytes:
        return self._derive(b"aes-256-gcm")


def _new_key() -> Key:
    secret = secrets.token_bytes(32)
    return Key(key_id_of(secret), secret, time.time())


def _env_key() -> Key | None:
    value = os.environ.get(ENV_KEY)
    if not value:
        return None
    try:
        secret = bytes.fromhex(value.strip())
    except ValueError:
        raise StoreError(f"{ENV_KEY} must be hex (at least 64 hex digits, 32 bytes)") from None
    if len(secret) < _MIN_SECRET:
        raise StoreError(
            f"{ENV_KEY} is {len(secret)} bytes; it must be at least 32 bytes "
            "(64 hex digits): generate one with `python -c 'import secrets; "
            "print(secrets.token_hex(32))'`"
        )
    return Key(key_id_of(secret), secret, 0.0)


def _check_private(path: str, st: os.stat_result, what: str) -> None:
    """Refuse a key file another user owns, or that others may read or write (ssh's
    rule for private keys): its keys could be known or replaced by someone else."""
    if st.st_uid != os.getuid():
        raise StoreError(
            f"{what} {path} belongs to uid {st.st_uid}, not to you (uid "
            f"{os.getuid()}); a key file must be your own: copy it and run "
            f"`chmod 600` on the copy"
        )
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise StoreError(
            f"{what} {path} is readable or writable by others (mode "
            f"{stat.S_IMODE(st.st_mode):04o}); its keys may be known to "
            f"others. Run `chmod 600 {path}` (and consider `snaprun keys "
            "rotate`)"
        )


def _read_private(path: str, what: str) -> bytes:
    """The bytes of a key file after the owner and mode checks (FileNotFoundError if
    there is none)."""
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise StoreDamaged(f"{what} {path} is not a regular file")
        _check_private(path, st, what)
        return f.read()


def _parse_secret(value: object, where: str) -> bytes:
    if not isinstance(value, str):
        raise ValueError(f"{where}: the secret is not a hex string")
    try:
        secret = bytes.fromhex(value)
    except ValueError:
        raise ValueError(f"{where}: the secret is not valid hex") from None
    if len(secret) < _MIN_SECRET:
        raise ValueError(f"{where}: the secret is {len(secret)} bytes, not at least {_MIN_SECRET}")
    return secret


def _parse_created(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where}: 'created' is not a number")
    return float(value)


def _parse_store(data: bytes) -> tuple[dict[str, Key], str]:
    """The keys and the current id of a keys.json; ValueError saying what is wrong."""
    if not data.strip():
        raise ValueError("the file is empty")
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if (
        not isinstance(doc, dict)
        or not isinstance(doc.get("keys"), dict)
        or not isinstance(doc.get("current"), str)
    ):
        raise ValueError("not an object with 'current' and 'keys'")
    keys = {}
    for key_id, entry in doc["keys"].items():
        if not _ID.fullmatch(key_id):
            raise ValueError(f"key id {key_id[:80]!r} is not a valid key id")
        if not isinstance(entry, dict):
            raise ValueError(f"key {key_id}: not an object")
        retired = entry.get("retired", False)
        if not isinstance(retired, bool):
            raise ValueError(f"key {key_id}: 'retired' is not true or false")
        keys[key_id] = Key(
            key_id,
            _parse_secret(entry.get("secret"), f"key {key_id}"),
            _parse_created(entry.get("created"), f"key {key_id}"),
            retired,
        )
    if doc["current"] not in keys:
        raise ValueError(f"the current key {doc['current'][:80]!r} is not among its keys")
    if keys[doc["current"]].retired:
        raise ValueError(f"the current key {doc['current']!r} is retired")
    return keys, doc["current"]


class KeyRing:
    """The keys of one store directory (plus SNAPSTATE_KEY when set).

    create=False: a missing keys.json raises StoreDamaged instead of minting a new key
    (for a store that already has snapshots, which a new key would never verify).
    Key files are written through `fs` (serializers/_fs.py)."""

    def __init__(
        self,
        directory: str,
        *,
        create: bool = True,
        fs: _fs.FileSystem = _fs.OS,
        path: str | None = None,
    ):
        # `path`: a key file of another name than <directory>/keys.json (a PostgreSQL
        # store's, named by SNAPSTATE_KEY_FILE).
        self.directory = directory
        self.fs = fs
        self.path = path or os.path.join(directory, _FILE)
        self._lock_path = self.path + ".lock"
        self._stored: dict[str, Key] = {}
        self._stored_current: str | None = None
        self._env = _env_key()
        if not self._reload():
            if not create:
                raise StoreDamaged(
                    f"the store's key file {self.path} is missing; a new key would verify "
                    "none of the store's snapshots, so none was made. Restore keys.json "
                    f"from a backup, or set {ENV_KEY} to the key that signed them"
                )
            self._update(lambda stored: (None, None))  # creates it under the lock

    # ------------------------------------------------------------ reading
    def _reload(self) -> bool:
        """Read keys.json; False if there is none."""
        try:
            data = _read_private(self.path, "the key file")
        except FileNotFoundError:
            return False
        try:
            self._stored, self._stored_current = _parse_store(data)
        except ValueError as exc:
            raise StoreDamaged(
                f"the store's key file {self.path} is corrupt ({exc}). It was left as it "
                "is: replacing it would make every snapshot signed with its keys "
                f"unverifiable. Restore keys.json from a backup, or set {ENV_KEY} to the "
                "key that signed the snapshots"
            ) from None
        return True

    @property
    def _keys(self) -> dict[str, Key]:
        keys = dict(self._stored)
        if self._env is not None and self._env.key_id not in keys:
            keys[self._env.key_id] = self._env
        return keys

    @property
    def _current(self) -> str:
        if self._env is not None:
            return self._env.key_id
        assert self._stored_current is not None  # set once keys.json is read or made
        return self._stored_current

    @property
    def current(self) -> Key:
        return self._keys[self._current]

    def get(self, key_id: str) -> Key:
        key = self._keys.get(key_id)
        if key is None and self._env is not None and key_id == _legacy_env_id(self._env.secret):
            key = self._env  # a file signed before ids were derived
        if key is None:
            raise UnknownKey(
                f"signed with key {key_id!r}, which the store in use ({self.directory}) "
                f"does not have (it has {', '.join(sorted(self._keys)) or 'none'}). A file "
                "is only verified with the keys of the store in use: in the store that "
                f"wrote it run `snaprun keys export {key_id} -o key.json`, then here "
                f"`snaprun keys import key.json`; or set {ENV_KEY} to that key"
            )
        if key.retired:
            raise RetiredKey(
                f"signed with key {key_id!r}, which was retired; it is no longer "
                "trusted. Only snapshots signed with a current key can be resumed."
            )
        return key

    def keys(self) -> list[Key]:
        return sorted(self._keys.values(), key=lambda k: (k.created, k.key_id))

    # ------------------------------------------------------------ writing
    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        os.makedirs(self.directory, exist_ok=True)
        fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    @classmethod
    def from_env(cls) -> KeyRing:
        """The one key SNAPSTATE_KEY gives, with no key file (a PostgreSQL store run
        with the key in its environment): nothing to rotate, import or retire."""
        ring = cls.__new__(cls)
        ring.directory, ring.fs, ring.path = "", _fs.OS, ""
        ring._lock_path = ""
        ring._stored, ring._stored_current = {}, None
        ring._env = _env_key()
        if ring._env is None:
            raise StoreError(f"{ENV_KEY} is not set")
        return ring

    def _update(self, change: Callable[[dict[str, Key]], tuple[T, str | None]]) -> T:
        """Read-modify-write of keys.json under the lock, on a fresh read of it.
        `change` edits a copy of the stored keys in place and returns its result and
        the id of the key that becomes current (None: the current one stays); the
        file is rewritten only if something changed. The keys in use change only once
        the file holding them is written: a failed write leaves both as they were."""
        if not self.path:
            raise StoreError(
                f"this store's key comes from {ENV_KEY} alone, with no key file to change: "
                "give the key file (SNAPSTATE_KEY_FILE) to rotate, import or retire keys"
            )
        with self._locked():
            if not self._reload():  # first use: make the store's key
                key = _new_key()
                self._save({key.key_id: key}, key.key_id)
                self._stored, self._stored_current = {key.key_id: key}, key.key_id
            stored = dict(self._stored)
            result, current = change(stored)
            current = current or self._stored_current
            if stored != self._stored or current != self._stored_current:
                assert current is not None  # set by the reload or the creation above
                self._save(stored, current)
                self._stored, self._stored_current = stored, current
            return result

    def _save(self, stored: dict[str, Key], current: str) -> None:
        """Write keys.json atomically and durably (temp, fsync, rename, fsync the
        directory): a crash or a failure leaves the previous file whole."""
        data = {
            "current": current,
            "keys": {
                k.key_id: {"secret": k.secret.hex(), "created": k.created, "retired": k.retired}
                for k in stored.values()
            },
        }
        _fs.write_atomic(self.path, [json.dumps(data, indent=1).encode()], self.fs)

    def rotate(self) -> Key:
        """Make a new key current; older keys keep verifying their snapshots."""

        def change(stored: dict[str, Key]) -> tuple[Key, str]:
            key = _new_key()
            stored[key.key_id] = key
            return key, key.key_id

        return self._update(change)

    def retire(self, key_id: str) -> Key:
        def change(stored: dict[str, Key]) -> tuple[Key, None]:
            key = stored.get(key_id)
            if key is None:
                raise StoreError(
                    f"no stored key {key_id!r} in {self.path} (keys: {', '.join(sorted(stored))})"
                )
            if key_id == self._stored_current:
                raise StoreError(f"key {key_id!r} is current; run `snaprun keys rotate` first")
            stored[key_id] = Key(key.key_id, key.secret, key.created, True)
            return stored[key_id], None

        return self._update(change)

    # ------------------------------------------------------------ moving keys
    def export(self, key_id: str, path: str) -> Key:
        """Write key `key_id` to a new file `path` (mode 0600, atomically; an existing
        file is never overwritten)."""
        key = self._keys.get(key_id)
        if key is None:
            raise StoreError(
                f"no key {key_id!r} in the store {self.directory} (keys: "
                f"{', '.join(sorted(self._keys))})"
            )
        if key.retired:
            raise StoreError(
                f"key {key_id!r} is retired: it is no longer trusted, so it is not exported"
            )
        data = json.dumps(
            {
                "format": _EXPORT_FORMAT,
                "key_id": key.key_id,
                "secret": key.secret.hex(),
                "created": key.created or time.time(),
            },
            indent=1,
        ).encode()
        path = os.path.abspath(path)
        if os.path.lexists(path):
            raise StoreError(
                f"{path} already exists; it was not overwritten (choose another file name)"
            )
        try:
            _fs.write_new(path, [data], self.fs)  # atomic, and fails if path exists
        except OSError as exc:
            if isinstance(exc, FileExistsError) and os.path.lexists(path):
                raise StoreError(
                    f"{path} already exists; it was not overwritten (choose another file name)"
                ) from None
            raise StoreError(f"cannot write {path}: {exc.strerror or exc}") from None
        return key

    def import_file(self, path: str) -> tuple[Key, bool]:
        """Add the key of an exported key file as valid (not current). Returns the
        store's key and whether it was new (importing a key the store already has
        changes nothing: a retired one stays retired)."""
        try:
            data = _read_private(path, "the key file")
        except FileNotFoundError:
            raise StoreError(f"no key file {path}") from None
        except IsADirectoryError:
            raise StoreError(f"{path} is a directory, not a key file") from None
        except OSError as exc:
            raise StoreError(f"cannot read {path}: {exc.strerror}") from None
        key = _parse_export(data, path)

        def change(stored: dict[str, Key]) -> tuple[tuple[Key, bool], None]:
            have = stored.get(key.key_id)
            if have is not None:
                if have.secret != key.secret:
                    raise StoreError(
                        f"the store {self.directory} already has a different "
                        f"key with id {key.key_id!r}; {path} was not imported"
                    )
                return (have, False), None
            stored[key.key_id] = key
            return (key, True), None

        return self._update(change)


def _parse_export(data: bytes, path: str) -> Key:
    """The key of an exported key file; StoreError saying what is wrong."""
    try:
        doc = json.loads(data)
        if not isinstance(doc, dict) or doc.get("format") != _EXPORT_FORMAT:
            raise ValueError(f'not a snapstate key file (no "format": "{_EXPORT_FORMAT}")')
        key_id = doc.get("key_id")
        if not isinstance(key_id, str) or not _ID.fullmatch(key_id):
            raise ValueError("its key_id is not a valid key id")
        secret = _parse_secret(doc.get("secret"), "key")
        created = _parse_created(doc.get("created"), "key")
    except (ValueError, RecursionError) as exc:
        raise StoreError(
            f"{path} is not a valid key file: {exc}; nothing was imported. "
            "Make it with `snaprun keys export ID -o FILE`"
        ) from None
    if (
        key_id != key_id_of(secret)
        and key_id != _legacy_env_id(secret)
        and not _LEGACY_STORED.fullmatch(key_id)
    ):
        raise StoreError(
            f"{path}: key id {key_id!r} does not match its secret (its id "
            f"would be {key_id_of(secret)!r}); nothing was imported"
        )
    return Key(key_id, secret, created)
