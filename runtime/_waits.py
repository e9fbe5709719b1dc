"""Waits: a task asks the runtime to go on only once something has happened (a time
has come, a person decided an approval, a rate limit reset), without holding a process
open for it.

A wait is plain data (`Wait`: its kind, its arguments, the agent's call site), so a
snapshot holds it without naming any snapstate class. The agent's task switches to
the hub at `wait_point()`; the hub asks the kind's poller whether the task may go on:

- `Ready(value)` / `Ready(error=exc)`: the call returns value, or raises exc in the
  agent at the call;
- `NotYet(due, reason)`: not yet. A due time within `hibernate_after()` seconds is
  slept through in the process (through the clock seam); a later one, or none (an
  approval nobody decided), hibernates the job: a snapshot is taken right at the wait,
  the catalog records why it waits and when it is due (status waiting, exit 3), and the
  process ends. `snaprun worker` (or `snaprun resume`) restores it later and the hub
  polls again before any of its code runs: still not ready, it hibernates again without
  a new snapshot.

Pollers are registered by kind (runtime/_timers.py, runtime/_approvals.py), found
through KINDS so that a restore in a fresh process imports the module that polls."""

from __future__ import annotations

import importlib
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._errors import SnapstateError

if TYPE_CHECKING:
    from ._job import Job

__all__ = [
    "Wait",
    "Ready",
    "NotYet",
    "Then",
    "register",
    "poll",
    "hibernate_after",
    "call_site",
    "HIBERNATE_VARIABLE",
]

HIBERNATE_VARIABLE = "SNAPSTATE_HIBERNATE_AFTER"
_DEFAULT_HIBERNATE_AFTER = 60.0


@dataclass(frozen=True)
class Wait:
    """What a task waits for: plain data, kept in the snapshot taken at the wait."""

    kind: str  # a key of KINDS
    args: dict[str, Any] = field(default_factory=dict)  # the poller's, JSON-like
    site: str = "?"  # the agent's call site, file:line

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "args": dict(self.args), "site": self.site}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Wait:
        return cls(str(data["kind"]), dict(data.get("args") or {}), str(data.get("site", "?")))


@dataclass(frozen=True)
class Ready:
    """The task goes on: the wait returns `value`, or raises `error` at its call."""

    value: object = None
    error: BaseException | None = None


@dataclass(frozen=True)
class Then:
    """Ready(Then(fn)): the wait's value is fn(), called in the agent's task once the
    wait is over (a rate-limited effect is sent again there: effects are sent from the
    agent's task only). Never stored: a poller builds it from its Wait's args."""

    fn: Callable[[], object]


@dataclass(frozen=True)
class NotYet:
    """Not yet: due at `due` (seconds since the epoch), or None for a wait only an
    outside event ends (an approval decided). `reason` is shown by `snaprun ls`."""

    due: float | None
    reason: str
    approval_id: str | None = None


Poller = Callable[["Job", Wait], "Ready | NotYet"]
_POLLERS: dict[str, Poller] = {}
# kind -> the module that registers its poller on import
KINDS: dict[str, str] = {
    "timer": "snapstate.runtime._timers",
    "rate-limit": "snapstate.runtime._timers",
    "approval": "snapstate.runtime._approvals",
}


def register(kind: str, poller: Poller) -> None:
    if kind not in KINDS:
        raise ValueError(f"unknown wait kind {kind!r}; add it to KINDS")
    _POLLERS[kind] = poller


def poll(job: Job, wait: Wait) -> Ready | NotYet:
    poller = _POLLERS.get(wait.kind)
    if poller is None and wait.kind in KINDS:
        importlib.import_module(KINDS[wait.kind])
        poller = _POLLERS.get(wait.kind)
    if poller is None:
        raise SnapstateError(
            f"job {job.job_id} waits at {wait.site} for a {wait.kind!r}, which this snapstate "
            "does not know; resume it with the snapstate release that wrote it"
        )
    return poller(job, wait)


def hibernate_after() -> float:
    """Waits due further away than this many seconds hibernate the job instead of
    sleeping in the process (SNAPSTATE_HIBERNATE_AFTER, default 60)."""
    text = os.environ.get(HIBERNATE_VARIABLE)
    if not text:
        return _DEFAULT_HIBERNATE_AFTER
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise SnapstateError(
            f"{HIBERNATE_VARIABLE}={text!r} is not a number of seconds (0 or more); unset it "
            f"(default {_DEFAULT_HIBERNATE_AFTER:.0f}) or give one"
        )
    return value


def call_site(depth: int = 2) -> str:
    """file:line of the agent's call (depth frames above the caller)."""
    frame = sys._getframe(depth)
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"
