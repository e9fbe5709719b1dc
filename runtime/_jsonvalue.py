"""JSON values a job records exactly: a snapshot's meta, the job's pins, an approval's
scope. One check, refusing with a TypeError that names the value's place, whatever JSON
cannot carry exactly (a type it has no form for, NaN and infinities, a key that is not
a string, an int past Python's digit limit, a lone surrogate, too deep a nesting)."""

from __future__ import annotations

import math

__all__ = ["check_json"]

_MAX_INT_BITS = 12_000  # about 3600 digits: Python's int-to-str limit is 4300


def check_json(value: object, path: str, *, max_depth: int, depth: int = 0) -> None:
    """TypeError naming `path` (e.g. "meta['when'][2]") if `value` is not exact JSON."""
    if depth > max_depth:
        raise TypeError(
            f"{path} nests deeper than {max_depth} levels: keep it shallow (flatten it)"
        )
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        if value.bit_length() > _MAX_INT_BITS:
            raise TypeError(
                f"{path} is an integer of {value.bit_length()} bits: too large to record "
                "exactly as JSON; pass it as a string"
            )
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError(
                f"{path} is {value!r}, which JSON cannot hold; use None, a finite number or "
                "a string"
            )
        return
    if isinstance(value, str):
        _encodable(value, path)
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            check_json(item, f"{path}[{i}]", max_depth=max_depth, depth=depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(
                    f"{path} has the key {key!r}: JSON object keys are strings (use {str(key)!r})"
                )
            _encodable(key, f"a key of {path}")
            check_json(item, f"{path}[{key!r}]", max_depth=max_depth, depth=depth + 1)
        return
    raise TypeError(
        f"{path} is a {type(value).__module__}.{type(value).__qualname__}, which is not "
        "JSON; convert it to str, int, float, bool, None, or a list or dict of them "
        "(e.g. a datetime with .isoformat(), an object by its id or str())"
    )


def _encodable(text: str, path: str) -> None:
    try:
        text.encode()
    except UnicodeEncodeError:
        raise TypeError(
            f"{path} holds a string with a lone surrogate ({text[:40]!r}): it cannot be "
            "recorded as UTF-8; pass valid text"
        ) from None
