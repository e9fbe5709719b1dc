"""Snapshot metadata: a snapshot's `meta` and the job's pinned versions.

    meta    snapshot(label, meta={...}): a JSON-able dict recorded in that snapshot's
            header only (`snaprun ls --json`, `snaprun inspect`, SnapshotInfo.meta)
    pins    pin(model="gpt-4o", prompt_version="3"): job-level values recorded in the
            header of every LATER snapshot and kept in the frozen state, so a restored
            job has them again (snapstate.pins(), SnapshotInfo.pins) and can recheck
            the assumptions they stand for

Both are the agent's data: in an encrypted store they are sealed with the header's
other private fields (serializers/_sealing.py HEADER_PRIVATE). Both are plain JSON
(dicts, lists, str, int, float, bool, None), copied when given: changing the dict
afterwards changes nothing recorded. Anything else is refused with a TypeError that
names the offending value, before anything is written.

Outside a job (the agent run by plain Python) pin() records the values for this
process only, so pins() and snapshot() behave the same way there.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from . import _context
from ._jsonvalue import check_json

if TYPE_CHECKING:
    from ._job import Job

__all__ = ["check_meta", "pin", "pins", "current", "restore"]

MAX_BYTES = 64 * 1024  # the JSON of one meta dict, or of all pins: headers stay small
MAX_DEPTH = 32

_OUTSIDE: dict[str, Any] = {}  # pins set outside a job (plain Python)

_SCALARS = (str, int, float, bool, type(None))


def _copy(value: dict[str, Any], what: str) -> dict[str, Any]:
    text = json.dumps(value, sort_keys=True, allow_nan=False)
    if len(text.encode()) > MAX_BYTES:
        raise TypeError(
            f"{what} takes {len(text.encode())} bytes as JSON, more than {MAX_BYTES}: keep "
            "large data in the agent's variables (they are frozen) or in files"
        )
    copied: dict[str, Any] = json.loads(text)
    return copied


def check_meta(meta: object) -> dict[str, Any] | None:
    """A snapshot's meta as recorded (a JSON copy), or None; TypeError for anything but a
    JSON-able dict with str keys."""
    if meta is None:
        return None
    if not isinstance(meta, dict):
        raise TypeError(
            f"snapshot(meta=...) takes a dict of JSON values, not a "
            f"{type(meta).__module__}.{type(meta).__qualname__}"
        )
    check_json(meta, "snapshot(meta=...): meta", max_depth=MAX_DEPTH)
    return _copy(meta, "snapshot(meta=...)")


def current(job: Job | None) -> dict[str, Any]:
    """The pins in force (the job's, or this process's outside a job): the live dict."""
    if job is None:
        return _OUTSIDE
    found: dict[str, Any] | None = getattr(job, "_pins", None)
    if found is None:
        found = job._pins = {}
    return found


def pin(**versions: str | int | float | bool | None) -> None:
    """Pin job-level values (e.g. `pin(model="gpt-4o", prompt_version="3")`): every later
    snapshot's header records them, `snaprun ls --json` and `snaprun inspect` show them,
    and after a restore `pins()` and SnapshotInfo.pins give them back, so the agent can
    recheck what it assumed. A value is a str, int, float or bool; None removes the pin.
    Pins accumulate: pin(a="1") then pin(b="2") pins both."""
    for name, value in versions.items():
        if value is not None and (
            not isinstance(value, _SCALARS) or isinstance(value, float) and not math.isfinite(value)
        ):
            raise TypeError(
                f"pin({name}=...) takes a str, int, float or bool (None removes the pin), "
                f"not a {type(value).__module__}.{type(value).__qualname__}: pin a version or "
                "an id, e.g. a model name or a prompt's version number"
            )
    pinned = current(_context.active_job())
    merged = {k: v for k, v in {**pinned, **versions}.items() if v is not None}
    _copy(merged, "pin(...)")  # refuses pins too large for a header
    pinned.clear()
    pinned.update(merged)


def pins() -> dict[str, Any]:
    """A copy of the pinned values in force (pin()); after a restore, those the job had
    pinned when its snapshot was taken."""
    return dict(current(_context.active_job()))


def restore(job: Job, saved: object) -> None:
    """Put back the pins a restored snapshot kept (none for older snapshots)."""
    job._pins = dict(saved) if isinstance(saved, dict) else {}
