"""Named fault points: the seam crash tests use to kill a real process at an exact
moment. `SNAPSTATE_FAULT=after-snapshot:3` makes the process SIGKILL itself right
after snapshot 3 is durably written; `after-snapshot:*` after every one;
`effect-before-send:2:stop` makes it SIGSTOP itself there instead (a paused runner: the
test continues it with SIGCONT). Unset, a fault point costs two dictionary lookups.

The variable is read when a fault point is reached, not when this module is imported: a
process forked from one that had imported snapstate (tests/forkserver.py starts
snaprun that way) has an environment of its own."""

from __future__ import annotations

import os
import signal

__all__ = ["fault_point"]


def _parse(spec: str | None) -> dict[str, str]:
    points = {}
    for item in (spec or "").split(","):
        name, _, when = item.strip().partition(":")
        if name:
            points[name] = when or "*"
    return points


_PARSED: tuple[str | None, dict[str, str]] = (None, {})  # the last spec read, parsed


def _points() -> dict[str, str]:
    global _PARSED
    spec = os.environ.get("SNAPSTATE_FAULT")
    if spec != _PARSED[0]:
        _PARSED = (spec, _parse(spec))
    return _PARSED[1]


def fault_point(name: str, seq: int | str | None = None) -> None:
    """seq: a snapshot's number, an effect's ordinal, or a spawned task's effect as
    "<task id>#<n>" (runtime/_tasks.py)."""
    spec = _points().get(name)
    if spec is None:
        return
    when, _, action = spec.partition(":")
    if when == "*" or (seq is not None and when == str(seq)):
        os.kill(os.getpid(), signal.SIGSTOP if action == "stop" else signal.SIGKILL)
