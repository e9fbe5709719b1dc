"""Numeric settings read from the environment (SNAPSTATE_EFFECT_THREADS,
SNAPSTATE_HIBERNATE_AFTER, SNAPSTATE_ASYNC_SETTLE, SNAPSTATE_MAX_RETRY_AFTER...): unset or empty gives the default;
anything else must be a number in the setting's range, or a SnapstateError names the
variable, the range and the default. The Python API and snaprun check them all before a
job starts (runtime/_api.py, check_settings)."""

from __future__ import annotations

import math
import os

from .._errors import SnapstateError

__all__ = ["env_int", "env_seconds"]


def env_int(name: str, default: int, low: int, high: int, unit: str) -> int:
    """An integer setting from `low` to `high` (`unit` names what it counts)."""
    text = os.environ.get(name)
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise SnapstateError(
            f"{name}={text!r} is not a number of {unit} from {low} to {high}; unset it "
            f"(default {default}) or give one"
        )
    return value


def env_seconds(name: str, default: float, high: float = math.inf, low: float = 0.0) -> float:
    """A number of seconds from `low` (default 0) to `high`."""
    text = os.environ.get(name)
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and low <= value <= high):
        upto = f"{low:g} or more" if high == math.inf else f"from {low:g} to {high:g}"
        raise SnapstateError(
            f"{name}={text!r} is not a number of seconds ({upto}); unset it "
            f"(default {default:g}) or give one"
        )
    return value
