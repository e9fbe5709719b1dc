"""The clock seam: every wait in snapstate (sleep(), timers, rate limits, approval
expiry, the worker's due checks) reads the time and sleeps through here, so tests move
time instead of waiting for it.

- In a process, `set_clock(FakeClock(start))` replaces the clock: its sleep() moves its
  time forward at once.
- Across processes, SNAPSTATE_CLOCK_OFFSET=SECONDS shifts the time every snapstate
  process reads (a resume "two hours later" is `SNAPSTATE_CLOCK_OFFSET=7200`). It is read
  at each call, so a forked process sees its own environment. It only moves time
  forward (0 to about 100 years): a negative offset would let whoever sets the
  environment make an expired approval valid again, a huge one leaves datetime's range."""

from __future__ import annotations

import math
import os
import threading
import time as _time

from .._errors import SnapstateError

__all__ = [
    "Clock",
    "SystemClock",
    "FakeClock",
    "clock",
    "set_clock",
    "OFFSET_VARIABLE",
    "SleepInterrupted",
]

OFFSET_VARIABLE = "SNAPSTATE_CLOCK_OFFSET"
# Larger shifts put the time outside what datetime (and time_t) represent.
_MAX_OFFSET = 100 * 366 * 86400.0


def _offset() -> float:
    text = os.environ.get(OFFSET_VARIABLE)
    if not text:
        return 0.0
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 <= value <= _MAX_OFFSET):
        raise SnapstateError(
            f"{OFFSET_VARIABLE}={text!r} is not a number of seconds from 0 to "
            f"{_MAX_OFFSET:.0f} (about 100 years); unset it or give one (it moves "
            "snapstate's clock forward, for tests: never back, which would make expired "
            "approvals valid again)"
        )
    return value


class SleepInterrupted(BaseException):
    """Raised by the SIGTERM --grace handler (runtime/_signals.py) into the job's hub
    while it sleeps in the process through a short wait (Job._settle): the job then
    hibernates at that wait at once instead of sleeping on (runtime/_worker.py)."""


class Clock:
    """Wall-clock time in seconds since the epoch, and sleeping."""

    def time(self) -> float:
        raise NotImplementedError

    def sleep(self, seconds: float) -> None:
        raise NotImplementedError

    def wait(self, event: threading.Event, seconds: float) -> bool:
        """Wait for `event` at most `seconds`; True if it was set."""
        raise NotImplementedError


class SystemClock(Clock):
    def time(self) -> float:
        return _time.time() + _offset()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            _time.sleep(seconds)

    def wait(self, event: threading.Event, seconds: float) -> bool:
        return event.wait(max(0.0, seconds))


class FakeClock(Clock):
    """A clock tests move: sleep() and an unset wait() advance it at once."""

    def __init__(self, start: float | None = None) -> None:
        self.now = _time.time() if start is None else start
        self.slept: list[float] = []

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += max(0.0, seconds)

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def wait(self, event: threading.Event, seconds: float) -> bool:
        if event.is_set():
            return True
        self.sleep(seconds)
        return event.is_set()


_CLOCK: list[Clock] = [SystemClock()]


def clock() -> Clock:
    """The clock in use."""
    return _CLOCK[0]


def set_clock(new: Clock) -> Clock:
    """Use `new` from now on; returns the clock it replaces (for tests)."""
    old, _CLOCK[0] = _CLOCK[0], new
    return old
