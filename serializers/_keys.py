"""Signing and encryption keys.

A store creates its key on first use in `keys.json` (mode 0600) in the store
directory; `SNAPSTATE_KEY` (hex, at least 32 bytes) overrides it, so a file exported
from one store resumes in another that shares the key. Every key has an id written
into each snapshot's header: `snaprun keys rotate` makes a new key current (old
snapshots still load with theirs), `snaprun keys retire ID` stops trusting one.

One master key per id; the HMAC key and the AEAD key are derived from it with HKDF,
so the two uses never share key material.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import secrets
import time
from dataclasses import dataclass

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ..runtime._errors import RetiredKey, StoreError, UnknownKey

__all__ = ["Key", "KeyRing", "ENV_KEY"]

ENV_KEY = "SNAPSTATE_KEY"
_FILE = "keys.json"


@dataclass(frozen=True)
class Key:
    key_id: str
    secret: bytes
    created: float
    retired: bool = False

    def _derive(self, purpose: bytes) -> bytes:
        return HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                    info=b"snapstate " + purpose).derive(self.secret)

    @functools.cached_property
    def mac_key(self) -> bytes:
        return self._derive(b"hmac-sha256")

    @functools.cached_property
    def aead_key(self) -> bytes:
        return self._derive(b"aes-256-gcm")


def _env_key() -> Key | None:
    value = os.environ.get(ENV_KEY)
    if not value:
        return None
    try:
        secret = bytes.fromhex(value.strip())
    except ValueError:
        raise StoreError(f"{ENV_KEY} must be hex (at least 64 hex digits, 32 bytes)") from None
    if len(secret) < 32:
        raise StoreError(f"{ENV_KEY} is {len(secret)} bytes; it must be at least 32 bytes "
                         "(64 hex digits): generate one with `python -c 'import secrets; "
                         "print(secrets.token_hex(32))'`")
    return Key("env-" + hashlib.sha256(secret).hexdigest()[:12], secret, 0.0)


def _new_id(number: int) -> str:
    """k<n>-<random>: numbered for people, unique across stores, so a file from another
    store is reported as signed with an unknown key, not as tampered."""
    return f"k{number}-{secrets.token_hex(4)}"


class KeyRing:
    """The keys of one store directory (plus SNAPSTATE_KEY when set)."""

    def __init__(self, directory: str):
        self.directory = directory
        self.path = os.path.join(directory, _FILE)
        self._keys: dict[str, Key] = {}
        self._current: str | None = None
        self._load()
        env = _env_key()
        if env is not None:
            self._keys[env.key_id] = env
            self._current = env.key_id

    def _load(self) -> None:
        if not os.path.exists(self.path):
            self._create()
            return
        with open(self.path) as f:
            data = json.load(f)
        self._keys = {k: Key(k, bytes.fromhex(v["secret"]), v["created"], v.get("retired", False))
                      for k, v in data["keys"].items()}
        self._current = data["current"]

    def _create(self) -> None:
        os.makedirs(self.directory, exist_ok=True)
        key = Key(_new_id(1), secrets.token_bytes(32), time.time())
        self._keys, self._current = {key.key_id: key}, key.key_id
        self._save(exclusive=True)

    def _save(self, exclusive: bool = False) -> None:
        data = {"current": self._current,
                "keys": {k.key_id: {"secret": k.secret.hex(), "created": k.created,
                                    "retired": k.retired}
                         for k in self._keys.values() if not k.key_id.startswith("env-")}}
        tmp = self.path + f".{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        if exclusive and os.path.exists(self.path):   # another process created it first
            os.unlink(tmp)
            self._load()
            return
        os.replace(tmp, self.path)

    @property
    def current(self) -> Key:
        return self._keys[self._current]

    def get(self, key_id: str) -> Key:
        key = self._keys.get(key_id)
        if key is None:
            raise UnknownKey(
                f"signed with key {key_id!r}, which this store does not have (it has "
                f"{', '.join(sorted(self._keys)) or 'none'}). Set {ENV_KEY} to the key of the "
                "store that wrote it.")
        if key.retired:
            raise RetiredKey(f"signed with key {key_id!r}, which was retired; it is no longer "
                             "trusted. Only snapshots signed with a current key can be resumed.")
        return key

    def keys(self) -> list[Key]:
        return sorted(self._keys.values(), key=lambda k: (k.created, k.key_id))

    def rotate(self) -> Key:
        """Make a new key current; older keys keep verifying their snapshots."""
        numbers = [int(k[1:].split("-")[0]) for k in self._keys
                   if k.startswith("k") and k[1:].split("-")[0].isdigit()]
        key = Key(_new_id(max(numbers, default=0) + 1), secrets.token_bytes(32), time.time())
        self._keys[key.key_id] = key
        self._current = key.key_id
        self._save()
        return key

    def retire(self, key_id: str) -> Key:
        key = self._keys.get(key_id)
        if key is None or key_id.startswith("env-"):
            raise StoreError(f"no stored key {key_id!r} (keys: {', '.join(sorted(self._keys))})")
        if key_id == self._current:
            raise StoreError(f"key {key_id!r} is current; run `snaprun keys rotate` first")
        self._keys[key_id] = Key(key.key_id, key.secret, key.created, True)
        self._save()
        return self._keys[key_id]
