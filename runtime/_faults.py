"""Named fault points: the seam crash tests use to kill a real process at an exact
moment. `SNAPSTATE_FAULT=after-snapshot:3` makes the process SIGKILL itself right
after snapshot 3 is durably written; `after-snapshot:*` after every one;
`effect-before-send:2:stop` makes it SIGSTOP itself there instead (a paused runner: the
test continues it with SIGCONT). Unset, a fault point costs one dictionary lookup."""

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


_POINTS = _parse(os.environ.get("SNAPSTATE_FAULT"))


def fault_point(name: str, seq: int | None = None) -> None:
    spec = _POINTS.get(name)
    if spec is None:
        return
    when, _, action = spec.partition(":")
    if when == "*" or (seq is not None and when == str(seq)):
        os.kill(os.getpid(), signal.SIGSTOP if action == "stop" else signal.SIGKILL)
