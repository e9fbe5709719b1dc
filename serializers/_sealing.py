"""Sealing what the agent produced before it reaches the catalog or a header.

In a store that requires encryption (`snaprun init --encrypt`), every catalog value
the agent produced (argv, error texts, labels, timeline details, effect arguments,
notes, results and external ids) is sealed with AES-256-GCM:

    envelope = b"SS1" | u8 key-id length | key id | 12-byte random nonce | ciphertext+tag

The AEAD key is derived (HKDF) from the store key named in the envelope, with its own
info string, so rotation keeps older rows readable and no other use shares the key.
The associated data names the value's place (table, column, job id, row identity): a
sealed value copied to another row or column fails authentication, as does any edit.
Where only equality is needed (effects.args_digest) a keyed digest is kept instead:
HMAC-SHA256 under a derived key, so low-entropy arguments cannot be confirmed by
guessing and hashing.

In a plaintext store the sealer passes every value through unchanged: no format
change for existing stores.

Row signatures (every store, plaintext or encrypted): the catalog fields that decide
what code runs or what value the agent receives (a job's entry point and argv, an
effect row, an approval row with its decision, a wait row) are covered by one
HMAC-SHA256 per row under a key derived from the store key ("snapstate catalog row
hmac-sha256"), over the row's values as the agent sees them (opened) and its identity
(table, job id, ordinal or approval id):

    mac = "m1:" key id ":" hex HMAC(derived key, "snapstate catalog row" | parts...)

each part tagged with its type and length-prefixed. Whoever can write the catalog but
not the key cannot forge a row, edit one, or move one to another job or place: the row
no longer verifies, and the catalog refuses it (StoreDamaged naming the row). A sealer
without keys (a bare catalog, as the conformance suite opens one) neither signs nor
checks; `signed` False accepts a row without a signature (a store whose rows were
written before signatures and are not signed yet: see docs/design.md, "Catalog trust").
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import struct
from typing import Any, TypeVar, cast

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from .._errors import StoreDamaged, TamperedSnapshot, UnknownKey
from ._keys import ENV_KEY, Key, KeyRing

__all__ = [
    "Sealer",
    "PLAIN",
    "KeyedDigest",
    "MAGIC",
    "seal_header",
    "open_header",
    "HEADER_PRIVATE",
    "row_message",
]

MAGIC = b"SS1"
_DIGEST_PREFIX = "hmac-sha256:"
_MAC_PREFIX = "m1:"
_ROW_INFO = b"catalog row hmac-sha256"
_NONCE = 12
# A value sealed as it is given (None passes through).
_V = TypeVar("_V", bound=str | bytes | bytearray | memoryview | None)


def _derive(key: Key, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"snapstate " + info).derive(
        key.secret
    )


def _aad(place: tuple[object, ...]) -> bytes:
    """The value's place, unambiguously encoded (each part length-prefixed)."""
    out = bytearray(b"snapstate sealed value")
    for part in place:
        data = str(part).encode()
        out += struct.pack("<I", len(data)) + data
    return bytes(out)


def row_message(parts: tuple[object, ...]) -> bytes:
    """A row's values, unambiguously encoded for its signature: each part tagged with
    its type and length-prefixed. A whole float counts as the integer it equals (a
    REAL column may give back 5.0 for the 5 written). (Once per row written or read:
    the common types take the short way.)"""
    out = [b"snapstate catalog row"]
    for part in parts:
        kind = type(part)
        if kind is str:
            tag, data = b"s", str.encode(cast(str, part), "utf-8", "surrogatepass")
        elif part is None:
            out.append(b"N")
            continue
        elif kind is int:
            tag, data = b"n", str(part).encode()
        elif kind is bytes:
            tag, data = b"b", cast(bytes, part)
        else:
            tag, data = _tagged(part)
        out.append(tag + len(data).to_bytes(4, "little") + data)
    return b"".join(out)


def _tagged(part: object) -> tuple[bytes, bytes]:
    if isinstance(part, bool):
        return b"t", b"1" if part else b"0"
    if isinstance(part, (int, float)):
        if isinstance(part, float) and part.is_integer() and abs(part) < 2**63:
            part = int(part)
        return b"n", repr(part).encode()
    if isinstance(part, str):  # a subclass (a keyed digest)
        return b"s", str.encode(part, "utf-8", "surrogatepass")
    if isinstance(part, (bytes, bytearray, memoryview)):
        return b"b", bytes(part)
    return b"?", type(part).__name__.encode()  # never verifies as a value


def _where(place: tuple[object, ...]) -> str:
    table, column, job_id, *row = place
    ident = f" {'/'.join(str(p) for p in row)}" if row else ""
    return f"{table}.{column} of job {job_id}{ident}"


class KeyedDigest(str):
    """A stored keyed digest ("hmac-sha256:<key id>:<hex>"). It equals the plain
    SHA-256 hex digest it was made from: comparing it with one recomputes the HMAC
    under the key it names, so the ledger's equality checks work unchanged."""

    _sealer: Sealer

    def __new__(cls, stored: str, sealer: Sealer) -> KeyedDigest:
        self = super().__new__(cls, stored)
        self._sealer = sealer
        return self

    def __eq__(self, other: object) -> bool:
        if isinstance(other, KeyedDigest) or not isinstance(other, str):
            return str.__eq__(self, other)
        if other.startswith(_DIGEST_PREFIX):
            return str.__eq__(self, other)
        kid = self[len(_DIGEST_PREFIX) :].split(":", 1)[0]
        return hmac.compare_digest(str(self), self._sealer._keyed(other, kid))

    def __ne__(self, other: object) -> bool:
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    __hash__ = str.__hash__

    def __reduce__(self) -> tuple[type[str], tuple[str]]:  # pickled as the stored text
        return (str, (str(self),))


class Sealer:
    """Seals and opens catalog values with a store's key ring (see the module doc).
    `enabled` False: values pass through unchanged (a plaintext store). `tolerant`:
    opening passes unsealed values through (only for resealing a whole catalog when
    encryption is turned on, possibly again after an interrupted attempt)."""

    def __init__(
        self,
        keys: KeyRing | None,
        enabled: bool,
        *,
        tolerant: bool = False,
        signed: bool = True,
    ):
        if enabled and keys is None:
            raise ValueError("an enabled sealer needs the store's keys")
        self.keys, self.enabled, self.tolerant = keys, enabled, tolerant
        self.signed = signed
        self._derived: dict[tuple[str, bytes], bytes] = {}

    # ------------------------------------------------------------------ keys
    def _key(self, kid: str, info: bytes) -> bytes:
        cached = self._derived.get((kid, info))
        if cached is None:
            # Retired keys still open the catalog's own values: retiring stops trusting
            # snapshot files signed with a key, it does not erase this store's history.
            assert self.keys is not None  # only a sealer with keys seals or keys digests
            key = next((k for k in self.keys.keys() if k.key_id == kid), None)
            if key is None:
                raise UnknownKey(
                    f"a catalog value is sealed with key {kid!r}, which this store does not "
                    f"have; set {ENV_KEY} to that key (it was current when the value was "
                    "written)"
                )
            cached = self._derived[(kid, info)] = _derive(key, info)
        return cached

    def _current(self) -> str:
        assert self.keys is not None  # an enabled sealer has keys
        return self.keys.current.key_id

    # ------------------------------------------------------------------ values
    def seal(self, value: _V, *place: object) -> _V | bytes:
        """Seal a str or bytes value for its place (table, column, job id, row...);
        None stays None (absence is not secret). Unchanged when not enabled."""
        if not self.enabled or value is None:
            return value
        return self._sealed(value, place)

    def _sealed(self, value: object, place: tuple[object, ...]) -> bytes:
        if isinstance(value, str):
            kind, data = b"s", value.encode()
        elif isinstance(value, (bytes, bytearray, memoryview)):
            kind, data = b"b", bytes(value)
        else:
            raise TypeError(f"cannot seal {type(value).__name__}")
        kid = self._current()
        nonce = os.urandom(_NONCE)
        sealed = AESGCM(self._key(kid, b"catalog aes-256-gcm")).encrypt(
            nonce, kind + data, _aad(place)
        )
        encoded = kid.encode()
        return MAGIC + bytes([len(encoded)]) + encoded + nonce + sealed

    def open(self, stored: Any, *place: object) -> Any:
        """The value sealed at this place; StoreDamaged if it is not sealed, was edited,
        or belongs to another place. Unchanged when not enabled. (Any: a catalog value,
        the str or bytes that was sealed, as its column says, or None.)"""
        if not self.enabled or stored is None:
            return stored
        if (
            not isinstance(stored, bytes)
            or not stored.startswith(MAGIC)
            or len(stored) < len(MAGIC) + 1
        ):
            if self.tolerant:
                return stored
            raise StoreDamaged(
                f"the catalog value {_where(place)} is not sealed, in a store that requires "
                "encryption: the catalog was edited or replaced (or `snaprun init --encrypt` "
                "was interrupted: run it again). Refusing it."
            )
        n = stored[len(MAGIC)]
        start = len(MAGIC) + 1
        kid = stored[start : start + n].decode(errors="replace")
        nonce = stored[start + n : start + n + _NONCE]
        body = stored[start + n + _NONCE :]
        try:
            opened = AESGCM(self._key(kid, b"catalog aes-256-gcm")).decrypt(
                nonce, body, _aad(place)
            )
        except (InvalidTag, ValueError):
            raise StoreDamaged(
                f"the catalog value {_where(place)} fails authentication: it was modified, "
                "or moved from another row or column. Refusing it."
            ) from None
        kind, data = opened[:1], opened[1:]
        return data.decode() if kind == b"s" else data

    # ------------------------------------------------------------------ digests
    def _keyed(self, digest: str, kid: str) -> str:
        mac = hmac.new(
            self._key(kid, b"catalog args-digest hmac-sha256"), digest.encode(), hashlib.sha256
        ).hexdigest()
        return f"{_DIGEST_PREFIX}{kid}:{mac}"

    def digest(self, digest: str) -> str:
        """What to store for a plain SHA-256 digest: a keyed digest when enabled."""
        if not self.enabled or isinstance(digest, KeyedDigest):
            return digest
        return self._keyed(digest, self._current())

    def stored_digest(self, stored: str, *place: object) -> str:
        """A stored digest as the ledger compares it (see KeyedDigest)."""
        if not self.enabled:
            # A keyed digest left by a store that was encrypted still compares right.
            keyed = isinstance(stored, str) and stored.startswith(_DIGEST_PREFIX)
            return KeyedDigest(stored, self) if keyed and self.keys else stored
        if not isinstance(stored, str) or not stored.startswith(_DIGEST_PREFIX):
            if self.tolerant:
                return stored
            raise StoreDamaged(
                f"the catalog value {_where(place)} is not a keyed digest, in a store that "
                "requires encryption: the catalog was edited or replaced. Refusing it."
            )
        return KeyedDigest(stored, self)

    # ------------------------------------------------------------------ rows
    def row_mac(self, *parts: object) -> str | None:
        """The signature of a catalog row (its identity and values, see the module doc)
        under the current key; None without keys (a bare catalog)."""
        if self.keys is None:
            return None
        kid = self._current()
        mac = hmac.new(self._key(kid, _ROW_INFO), row_message(parts), hashlib.sha256)
        return f"{_MAC_PREFIX}{kid}:{mac.hexdigest()}"

    def row_problem(self, stored: object, *parts: object) -> str | None:
        """Why a row's stored signature does not vouch for `parts` (None: it does, or
        this sealer has no keys, or the row is unsigned where that is allowed)."""
        if self.keys is None:
            return None
        if stored is None:
            return "it has no signature" if self.signed else None
        if not isinstance(stored, str) or not stored.startswith(_MAC_PREFIX):
            return "its signature is malformed"
        kid, _, given = stored[len(_MAC_PREFIX) :].partition(":")
        try:
            key = self._key(kid, _ROW_INFO)
        except UnknownKey:
            return (
                f"it is signed with key {kid[:40]!r}, which this store does not have (if "
                f"it is yours, set {ENV_KEY} to it or `snaprun keys import` it)"
            )
        mac = hmac.new(key, row_message(parts), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(mac, given):
            return "its signature does not verify (the row was altered, forged or moved)"
        return None


PLAIN = Sealer(None, False)


# ------------------------------------------------------------------------ headers
# What the agent gave a snapshot: in an encrypted file these header fields are null and
# sealed together in "sealed" (the header itself stays readable for verification).
# Frame qualnames, file names and line numbers are code identity and stay in clear.
# meta and pins (snapshot(meta=...), pin()): files written before them lack them.
HEADER_PRIVATE = ("argv", "label", "meta", "pins")
_HEADER_PRIVATE_SINCE = frozenset({"meta", "pins"})


def seal_header(header: dict[str, Any], keys: KeyRing) -> dict[str, Any]:
    """The header of an encrypted snapshot: argv, label, meta and pins sealed for this
    job and seq."""
    private = json.dumps({name: header.get(name) for name in HEADER_PRIVATE})
    blob = Sealer(keys, True)._sealed(
        private, ("header", "private", header["job_id"], header["seq"])
    )
    return dict(header, **{name: None for name in HEADER_PRIVATE}, sealed=blob.hex())


def open_header(header: dict[str, Any], keys: KeyRing, path: str) -> dict[str, Any]:
    """A verified header with its sealed fields opened (unchanged if it has none)."""
    sealed = header.get("sealed")
    if sealed is None:
        return header
    try:
        opened = json.loads(
            Sealer(keys, True).open(
                bytes.fromhex(sealed), "header", "private", header.get("job_id"), header.get("seq")
            )
        )
        values = {
            name: opened.get(name) if name in _HEADER_PRIVATE_SINCE else opened[name]
            for name in HEADER_PRIVATE
        }
    except (StoreDamaged, TypeError, ValueError, KeyError) as exc:
        raise TamperedSnapshot(
            f"{path}: its sealed header fields do not open ({exc}); refusing it"
        ) from None
    return dict(header, **values)
