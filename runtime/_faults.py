"""Named fault points: the seam crash tests use to kill a real process at an exact
moment. `SNAPSTATE_FAULT=after-snapshot:3` makes the process SIGKILL itself right
after snapshot 3 is durably written; `after-snapshot:*` after every one;
`effect-before-send:2:stop` makes it SIGSTOP itself there instead (a paused runner: the
test continues it with SIGCONT). Unset, a fault point costs two dictionary lookups.

The variable is read when a fault point is reached, not when this module is imported: a
process forked from one that had imported snapstate (tests/forkserver.py starts
snaprun that way) has an environment of its own.

SNAPSTATE_FAULT_TRACE=FILE is the other side of the seam: every fault point reached
appends a line `NAME SEQ OFFSET` to FILE (before a kill there), OFFSET being stdout's
file position once it is flushed (-1 when stdout is no regular file). `snaprun
crashtest` (runtime/_crashtest.py) learns from it where an uninterrupted run can be
killed, which output a killed run had written when each snapshot was committed, and
whether an effect's request went out before the kill. Unset, it costs one more lookup."""

from __future__ import annotations

import os
import signal
import sys

__all__ = ["fault_point", "TRACE_VARIABLE"]

TRACE_VARIABLE = "SNAPSTATE_FAULT_TRACE"


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
    trace = os.environ.get(TRACE_VARIABLE)
    if trace:
        _trace(trace, name, seq)
    spec = _points().get(name)
    if spec is None:
        return
    when, _, action = spec.partition(":")
    if when == "*" or (seq is not None and when == str(seq)):
        os.kill(os.getpid(), signal.SIGSTOP if action == "stop" else signal.SIGKILL)


def _trace(path: str, name: str, seq: int | str | None) -> None:
    """One line per fault point reached: its name, its seq, stdout's offset. One
    O_APPEND write, so the lines of the runs (and threads) of a trace never interleave;
    it is in the file before a kill at this point."""
    offset = -1
    try:
        sys.stdout.flush()
        offset = os.lseek(sys.stdout.fileno(), 0, os.SEEK_CUR)
    except (OSError, ValueError, AttributeError):  # a pipe, a closed or replaced stdout
        pass
    line = f"{name} {'-' if seq is None else seq} {offset}\n".encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
