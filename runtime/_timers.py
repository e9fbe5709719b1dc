"""Durable timers: sleep() and sleep_until().

A wait due within hibernate_after() seconds (SNAPSTATE_HIBERNATE_AFTER, default 60) is
slept through in the process; a longer one snapshots the job right at the call and
hibernates it (status waiting, exit 3) until `snaprun worker` resumes it when it is due.
The due time is computed from snapstate.now(), a value recorded in the ledger, so code
re-executed after a crash waits for the same moment, not a new full interval. All time
goes through the clock seam (runtime/_clock.py).

A rate-limited effect waits the same way (the "rate-limit" wait kind, runtime/_effects.py)."""

from __future__ import annotations

import asyncio
import datetime as _datetime
import math

from . import _context, _waits
from ._clock import clock
from ._recorded import now
from ._switch import in_coroutine
from ._waits import wait_api, wait_point

__all__ = ["sleep", "sleep_until"]

# Longer waits (or later moments) leave what datetime and time_t represent.
_MAX_WAIT = 100 * 366 * 86400.0
_MAX_TIMESTAMP = 253_402_300_799.0  # 9999-12-31 23:59:59 UTC


def _seconds(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, not {type(value).__name__}")
    seconds = float(value)
    if not math.isfinite(seconds) or not 0 <= seconds <= _MAX_WAIT:
        raise ValueError(
            f"{what} must be a finite number of seconds, 0 or more and at most "
            f"{_MAX_WAIT:.0f} (about 100 years) (got {value!r})"
        )
    return seconds


def _timestamp(when: object) -> float:
    if isinstance(when, _datetime.datetime):
        if when.tzinfo is None:
            raise ValueError(
                "sleep_until() needs an aware datetime (with a time zone), e.g. "
                "datetime(2026, 12, 1, 9, tzinfo=timezone.utc): a naive one would mean "
                "another moment on a machine in another time zone"
            )
        return when.timestamp()
    if isinstance(when, bool) or not isinstance(when, (int, float)) or not math.isfinite(when):
        raise TypeError("sleep_until() takes an aware datetime or a POSIX timestamp")
    if abs(when) > _MAX_TIMESTAMP:
        raise ValueError(
            f"sleep_until({when!r}) lies beyond year 9999; give a POSIX timestamp or an aware "
            "datetime before it"
        )
    return float(when)


@wait_api
def sleep(seconds: float) -> None:
    """Wait `seconds`. Outside a job (plain Python) it sleeps. In a job, a short wait
    sleeps in the process; a long one hibernates the job until it is due."""
    seconds = _seconds(seconds, "sleep()'s seconds")
    site = _waits.call_site()
    if _context.active_job() is None:
        if in_coroutine(1):  # `await sleep(...)` in plain asyncio
            return asyncio.sleep(seconds)  # type: ignore[return-value]
        clock().sleep(seconds)
        return None
    due = now().timestamp() + seconds  # recorded: re-executed code waits for the same
    return wait_point(_waits.Wait("timer", {"due": due}, site))  # type: ignore[no-any-return]


@wait_api
def sleep_until(when: _datetime.datetime | float) -> None:
    """Wait until `when` (an aware datetime or a POSIX timestamp), as sleep() does."""
    due = _timestamp(when)
    site = _waits.call_site()
    if _context.active_job() is None:
        if in_coroutine(1):  # `await sleep_until(...)` in plain asyncio
            return asyncio.sleep(max(0.0, due - clock().time()))  # type: ignore[return-value]
        clock().sleep(due - clock().time())
        return None
    return wait_point(_waits.Wait("timer", {"due": due}, site))  # type: ignore[no-any-return]


def _poll_timer(job: object, wait: _waits.Wait) -> _waits.Ready | _waits.NotYet:
    due = float(wait.args["due"])
    if clock().time() >= due:
        return _waits.Ready(None)
    return _waits.NotYet(due, f"sleep at {wait.site}")  # JobWaiting and `ls` add the due time


_waits.register("timer", _poll_timer)
