"""Credentials inside objects the adapters rebuild (an SDK client's API key, an HTTP
auth's password, a token in a header) are never written into a snapshot in clear.

    credential(value, env=("OPENAI_API_KEY",))
        returns an object that pickles as
          - a reference to the environment variable the value came from (the first
            of `env`, or any variable given to `from_env`, whose current value is
            exactly `value`): after a restore the variable is read again, so a key
            rotated in the meantime is the one used;
          - otherwise the value sealed with AES-256-GCM under a key derived from the
            store's current key (serializers._sealing.Sealer): the snapshot file
            holds ciphertext only, in encrypted and plain stores alike.
        Unpickled, it is the plain str.

The runtime binds the store's keys with `bind(keys)` before it pickles or unpickles a
job's state; without a binding, sealing refuses (a snapshot would otherwise hold the
secret in clear). Inside `digesting()` (the effect ledger's argument digest) a
credential pickles as a fixed marker: the digest must be the same in every process
(a sealed value is random each time) and never depends on the secret.
"""

from __future__ import annotations

import contextlib
import os
import pickle
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TypedDict, overload

from .._errors import ResourceReopenError

if TYPE_CHECKING:
    from ..serializers._keys import KeyRing
    from ..serializers._sealing import Sealer
from .._abi import pinned

__all__ = ["bind", "credential", "Credential", "Sealed", "seal_once"]

_PLACE = ("snapshot", "credential", "-")


class _State(TypedDict):
    keys: KeyRing | None
    digest: bool


_STATE: _State = {"keys": None, "digest": False}
_MARKER = "<credential>"


def bind(keys: KeyRing | None) -> None:
    """Seal and open credentials with this store's KeyRing (None: unbind)."""
    _STATE["keys"] = keys


@contextlib.contextmanager
def digesting() -> Iterator[None]:
    """Credentials pickle as a fixed marker within this block (for digests only: what is
    pickled here is never unpickled)."""
    before, _STATE["digest"] = _STATE["digest"], True
    try:
        yield
    finally:
        _STATE["digest"] = before


def _sealer() -> Sealer | None:
    from ..serializers._sealing import Sealer

    keys = _STATE["keys"]
    if keys is None:
        return None
    return Sealer(keys, True)


class Credential:
    """A credential inside an adapter's reduce tuple; see the module doc. It unpickles
    as the plain str (an adapter wraps it again at the next snapshot)."""

    __slots__ = ("value", "env")
    value: str
    env: tuple[str, ...]

    def __init__(self, value: str, env: tuple[str, ...] = ()) -> None:
        self.value, self.env = value, tuple(env)

    def __repr__(self) -> str:
        return "Credential(<hidden>)"

    def __reduce__(self) -> tuple[Callable[..., str], tuple[object]]:
        if _STATE["digest"]:
            return (str, (_MARKER,))
        for name in self.env:
            if os.environ.get(name) == self.value:
                return (_from_env, (name,))
        sealer = _sealer()
        if sealer is None:
            raise pickle.PicklingError(
                "a credential cannot be saved: no store keys are bound to seal it (snapstate "
                "bug: the runtime binds them before every snapshot)"
            )
        return (_unseal, (sealer.seal(self.value, *_PLACE),))


@overload
def credential(value: str, env: tuple[str, ...] = ()) -> Credential: ...
@overload
def credential(value: None, env: tuple[str, ...] = ()) -> None: ...
@overload
def credential(value: str | None, env: tuple[str, ...] = ()) -> Credential | None: ...
def credential(value: object, env: tuple[str, ...] = ()) -> Credential | None:
    """`value` wrapped to pickle as an environment reference or sealed; None stays None."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"a credential is a str, not {type(value).__name__}")
    return Credential(value, env)


class Sealed:
    """A credential sealed once: it pickles as the same sealed bytes each time it is
    saved, so a value saved unchanged at consecutive snapshots is the same byte run
    (which the store deduplicates; a fresh nonce every time would defeat that). It
    unpickles, as a Credential does, as the plain str. Made by `seal_once`."""

    __slots__ = ("value", "key", "blob")

    def __init__(self, value: str, key: tuple[str, bytes], blob: bytes) -> None:
        self.value, self.key, self.blob = value, key, blob

    def __repr__(self) -> str:
        return "Sealed(<hidden>)"

    def __reduce__(self) -> tuple[Callable[..., str], tuple[object]]:
        return (_unseal, (self.blob,))


def seal_once(value: str, previous: Sealed | None) -> Sealed | Credential:
    """`value` to pickle sealed: `previous` again when it sealed the same value with the
    store's current key (identical bytes; equal ciphertexts show only that the value
    did not change), else a new seal. Without bound keys, or inside `digesting()`, a
    plain Credential (which refuses to pickle, or pickles as the marker, as usual)."""
    keys = _STATE["keys"]
    if keys is None or _STATE["digest"]:
        return Credential(value)
    current = keys.current
    key = (current.key_id, current.secret)
    if previous is not None and previous.key == key and previous.value == value:
        return previous
    sealer = _sealer()
    assert sealer is not None  # keys are bound
    blob = sealer.seal(value, *_PLACE)
    assert isinstance(blob, bytes)  # an enabled sealer seals
    return Sealed(value, key, blob)


@pinned("credential_from_env")
def _from_env(name: str) -> str:
    try:
        return os.environ[name]
    except KeyError:
        raise ResourceReopenError(
            f"the environment variable {name} is not set; a value in this snapshot was "
            f"{name}'s (a key or another secret), and it is never saved. Set {name} and "
            "resume the job again (the snapshot is intact)."
        ) from None


@pinned("credential_from_env_bytes")
def _from_env_bytes(name: str) -> bytes:
    """A bytes value equal to the variable's (serializers._envsecrets), read again."""
    return _from_env(name).encode("utf-8", "surrogateescape")


@pinned("credential_from_env_bytearray")
def _from_env_bytearray(name: str) -> bytearray:
    """A bytearray equal to the variable's value (serializers._envsecrets), read again."""
    return bytearray(_from_env_bytes(name))


@pinned("credential_unseal")
def _unseal(blob: bytes) -> str:
    sealer = _sealer()
    if sealer is None:
        raise ResourceReopenError(
            "a sealed credential cannot be opened: no store keys are bound (snapstate bug)"
        )
    value = sealer.open(blob, *_PLACE)
    assert isinstance(value, str)  # credential() seals only a str
    return value
