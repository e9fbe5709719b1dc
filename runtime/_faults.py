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
whether an effect's request went out before the kill. Unset, it costs one more lookup.

SNAPSTATE_FAULT_VALUES=FILE makes the values of snapstate.now(), random() and uuid4()
reproducible from one run to another: FILE holds lines `POSITION KIND HEX`, the sealed
values another run of the same job recorded (POSITION: the ordinal, or "<task id>#<n>"
in a spawned task; KIND: `snapstate.now`...), and a new value at a position FILE names
for that kind is that one instead of a fresh one (the ledger checks its signature with
the store's key, as for any recorded value). `snaprun crashtest` gives every run the
values its uninterrupted run recorded, so a difference between two runs is one the
ledger cannot explain. Unset, a recorded value costs one more lookup."""

from __future__ import annotations

import os
import signal
import sys

from .._errors import SnapstateError

__all__ = ["fault_point", "recorded_value", "TRACE_VARIABLE", "VALUES_VARIABLE"]

TRACE_VARIABLE = "SNAPSTATE_FAULT_TRACE"
VALUES_VARIABLE = "SNAPSTATE_FAULT_VALUES"


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


_VALUES: tuple[str | None, dict[str, tuple[str, bytes]]] = (None, {})  # the file read last


def recorded_value(position: str, kind: str) -> bytes | None:
    """The sealed value SNAPSTATE_FAULT_VALUES's file holds for the recorded value at
    `position` when it is of `kind`; None when it holds none (or the variable is
    unset): a fresh value is drawn."""
    global _VALUES
    path = os.environ.get(VALUES_VARIABLE)
    if not path:
        return None
    if _VALUES[0] != path:
        table = {}
        with open(path) as f:
            for number, line in enumerate(f, 1):
                try:
                    where, name, sealed = line.split()
                    table[where] = (name, bytes.fromhex(sealed))
                except ValueError:
                    raise SnapstateError(
                        f"{VALUES_VARIABLE}={path}: line {number} is not `POSITION KIND HEX` "
                        "(the file `snaprun crashtest` writes); unset the variable"
                    ) from None
        _VALUES = (path, table)
    found = _VALUES[1].get(position)
    return found[1] if found is not None and found[0] == kind else None
