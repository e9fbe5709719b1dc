"""Secrets found by value: a string in a snapshot equal to a secret environment variable's
value is written as a reference to that variable, never in clear.

The rule: an environment variable whose name has KEY, APIKEY, TOKEN, SECRET, PASSWORD or
CREDENTIAL(S) as one of its underscore-separated words (any case: OPENAI_API_KEY,
github_token; not TOKENIZER_NAME), and whose value looks like one: at least 8
characters, no whitespace, and a digit or at least 20 characters (SORT_KEY=-created_at
names a field: rewriting every "-created_at" in the state would be wrong). After a
state is pickled, the payload is searched for each such value (its bytes as pickle
writes a str; a search per variable, the common case ends there). Where one is found,
the pickle is rewritten around it: frames (pickle's 64 KiB blocks) that hold no
occurrence are copied as they are, the others are read opcode by opcode (pickletools)
and written without their frame header (a pickle loads the same without them), every
str, bytes or bytearray object equal to the value replaced by a call of
`snapstate._abi.credential_from_env(NAME)` (the bytes encoded again), so after a
restore the variable is read again and a rotated key is the one used; the memo slots
stay where they were, so every other reference to that object still finds it. A value
still found after that is part of a longer string or byte string (a header "Bearer
sk-...", a blob): the snapshot is refused with the variable's name, since writing it
would put the secret in the file.

Values that are not in the environment (a key read from a file, pydantic's SecretStr)
are sealed by the adapters that know them (resources._secrets, resources._frameworks).
"""

from __future__ import annotations

import bisect
import io
import os
import pickle
import pickletools
import re
import struct
from collections.abc import Callable

__all__ = ["scrub", "secret_variables", "secret_in", "SECRET_NAME", "SecretInState"]

SECRET_NAME = re.compile(
    r"(?:^|_)(?:API_?KEY|KEY|TOKEN|SECRET|PASSWORD|CREDENTIALS?)(?:_|$)", re.IGNORECASE
)
MIN_LENGTH = 8
_LONG = 20  # a value this long needs no digit to look like a secret

_STRINGS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE"}
_BYTES = {"SHORT_BINBYTES", "BINBYTES", "BINBYTES8"}
_U32 = struct.Struct("<I")


class SecretInState(pickle.PicklingError):
    """A secret environment variable's value is part of a longer string in the state."""

    def __init__(self, name: str, value: str, where: str | None = None):
        self.name, self.value = name, value
        at = f" at {where}" if where else ""
        super().__init__(
            f"the value of the environment variable {name} is part of a longer string, a "
            f"byte string or a bytearray{at} in the job's state (for example an "
            "'Authorization: Bearer ...' "
            "header kept in a dict), and a snapshot never holds a secret in clear; keep the "
            f"key on its own (a value read from os.environ[{name!r}] is saved as a "
            "reference to the variable) or build the longer string after the snapshot"
        )


_DIGIT = re.compile(r"\d")


def _looks_secret(value: str) -> bool:
    return (
        len(value) >= MIN_LENGTH
        and not any(c.isspace() for c in value)
        and (len(value) >= _LONG or _DIGIT.search(value) is not None)
    )


# The environment's write count (the runtime counts writes through os.environ,
# runtime/_process.py), or None when it does not: the secret variables are looked up
# again only when it changed. [count function, (count, secret variables) of the last]
_GENERATION: list[Callable[[], int | None]] = [lambda: None]
_CACHE: list[tuple[int, dict[str, str]] | None] = [None]


def register_generation(count: Callable[[], int | None]) -> None:
    """count() -> a number that changes with every write to os.environ, or None."""
    _GENERATION[0] = count
    _CACHE[0] = None


def secret_variables() -> dict[str, str]:
    """name -> value of the environment variables the rule takes for secrets."""
    generation = _GENERATION[0]()
    cached = _CACHE[0]
    if generation is not None and cached is not None and cached[0] == generation:
        return cached[1]
    found = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("SNAPSTATE_") and SECRET_NAME.search(name) and _looks_secret(value)
    }
    if generation is not None:
        _CACHE[0] = (generation, found)
    return found


def secret_in(*texts: str | None) -> str | None:
    """The name of a secret variable whose value appears in one of texts (a snapshot's
    label, its meta as JSON, a pin), or None: those are written in the header."""
    for name, value in secret_variables().items():
        if any(text and value in text for text in texts):
            return name
    return None


def scrub(payload: bytes) -> bytes:
    """`payload` with every str/bytes equal to a secret variable's value replaced by a
    reference to the variable (see the module doc); SecretInState when a value remains."""
    found: dict[bytes, str] = {}
    for name, value in secret_variables().items():
        data = value.encode("utf-8", "surrogatepass")  # as pickle writes a str
        if data in payload:
            found.setdefault(data, name)
    if not found:
        return payload
    payload = _rewrite(payload, found)
    for data, name in found.items():
        if data in payload:
            raise SecretInState(name, os.environ.get(name, ""))
    return payload


_TARGETS: dict[type, str] = {
    str: "credential_from_env",
    bytes: "credential_from_env_bytes",
    bytearray: "credential_from_env_bytearray",
}


def _call(name: str, kind: type) -> bytes:
    target = _TARGETS[kind]
    text = name.encode("utf-8")
    return (
        pickle.GLOBAL
        + f"snapstate._abi\n{target}\n".encode()
        + pickle.BINUNICODE
        + _U32.pack(len(text))
        + text
        + pickle.TUPLE1
        + pickle.REDUCE
    )


def _rewrite(payload: bytes, found: dict[bytes, str]) -> bytes:
    hits: list[int] = []
    for data in found:
        at = payload.find(data)
        while at != -1:
            hits.append(at)
            at = payload.find(data, at + 1)
    hits.sort()
    out: list[bytes] = []
    f = io.BytesIO(payload)
    pos, size, frame_end = 0, len(payload), -1
    while pos < size:
        f.seek(pos)
        op, arg, _ = next(pickletools.genops(f))
        end = f.tell()
        if op.name == "FRAME":
            assert isinstance(arg, int)
            frame_end = end + arg
            i = bisect.bisect_left(hits, end)
            if i == len(hits) or hits[i] >= frame_end:  # no occurrence: copied whole
                out.append(payload[pos:frame_end])
                pos = frame_end
            else:
                pos = end  # its ops are read one by one, written without the header
            continue
        out.append(_replaced(op.name, arg, found) or payload[pos:end])
        pos = end
        if op.name == "STOP":
            out.append(payload[pos:])
            break
    return b"".join(out)


def _replaced(kind: str, arg: object, found: dict[bytes, str]) -> bytes | None:
    """The call that replaces a str or bytes op equal to a secret, or None."""
    if kind in _STRINGS and isinstance(arg, str):
        try:
            name = found.get(arg.encode("utf-8", "surrogatepass"))
        except UnicodeEncodeError:  # pragma: no cover - surrogatepass encodes any str
            return None
        return None if name is None else _call(name, str)
    if kind in _BYTES and isinstance(arg, bytes):
        name = found.get(arg)
        return None if name is None else _call(name, bytes)
    if kind == "BYTEARRAY8" and isinstance(arg, (bytes, bytearray)):
        name = found.get(bytes(arg))
        return None if name is None else _call(name, bytearray)
    return None
