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

Pollers are registered by kind (runtime/_timers.py, runtime/_approvals.py,
runtime/_effects.py), found through KINDS so that a restore in a fresh process imports
the module that polls.

The agent's side lives here too: `wait_point()` (a plain task switches to the hub with a
`WaitRequest`; a coroutine of an async job gets a `WaitPoint` to await), and `wait_api`,
which marks the public wait functions between the agent's call and wait_point()."""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from types import CodeType
from typing import TYPE_CHECKING, Any, TypeVar

import greenlet

from .._errors import SnapshotError, SnapstateError
from ._context import active_job
from ._points import Point, point_runner, runner_or_none
from ._settings import env_seconds
from ._switch import SWITCH_CODES

if TYPE_CHECKING:
    from ._job import Job

__all__ = [
    "wait_point",
    "wait_api",
    "WaitRequest",
    "WaitPoint",
    "API_CODES",
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
    "rate-limit": "snapstate.runtime._effects",
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
    return env_seconds(HIBERNATE_VARIABLE, _DEFAULT_HIBERNATE_AFTER)


def call_site(depth: int = 2) -> str:
    """file:line of the agent's call (depth frames above the caller)."""
    frame = sys._getframe(depth)
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


# ------------------------------------------------------------------------ the agent's side
@dataclass(frozen=True)
class WaitRequest:
    """The agent waits: the hub polls, sleeps or hibernates (runtime/_job.py)."""

    wait: Wait
    handled: BaseException | None


def wait_point(wait: Wait) -> Any:  # what the wait's poller made ready
    """The agent's side of a wait: switch to the hub, which returns the value the wait
    ends with (or throws its error here) once its poller says the task may go on. A
    snapshot taken to hibernate is taken with the agent paused right here."""
    job = active_job()
    if job is None:
        raise RuntimeError("wait_point() outside a job: the caller handles plain Python")
    if job._async is not None:  # an async job: the agent awaits the wait
        caller = sys._getframe(1)
        while caller.f_back is not None and caller.f_code in API_CODES:
            caller = caller.f_back
        if not caller.f_code.co_flags & (inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR):
            raise SnapshotError(
                f"a wait at {wait.site} was called in {caller.f_code.co_qualname}(), a plain "
                "function of an async job; await it (`await sleep(...)`, `await "
                "request_approval(...)`) in the async def instead"
            )
        return WaitPoint(wait)
    if not job._is_task(greenlet.getcurrent()):
        raise SnapshotError(
            f"a wait at {wait.site} was called from a greenlet or thread the job did not "
            "start; call it from the agent's own code"
        )
    assert job._hub is not None  # set with _agent while the job runs
    return job._hub.switch(WaitRequest(wait, sys.exception()))


SWITCH_CODES.add(wait_point.__code__)

# snapstate's public wait functions (sleep(), request_approval(), ...) between the agent's
# frame and wait_point(): they return exactly what wait_point() returns, so they are not
# captured; after a restore the agent's call receives the wait's outcome directly, and a
# newer snapstate can resume a job that hibernated in an older one's wait function.
API_CODES: set[CodeType] = set()

_Fn = TypeVar("_Fn", bound=Callable[..., Any])


def wait_api(fn: _Fn) -> _Fn:
    """Mark a public wait function (or a helper between it and wait_point()): it must
    return wait_point()'s value unchanged."""
    API_CODES.add(fn.__code__)
    return fn


class WaitPoint(Point):
    """`await sleep(...)`, `await request_approval(...)`: a wait (runtime/py)
    polled in the task; not ready, the task waits on a timer of the runner's until it
    is due (a long wait with every task idle hibernates the job)."""

    def __init__(self, wait: Wait) -> None:
        self.wait = wait
        self.state = "new"  # new -> waiting -> (polled again) ... -> done
        self.outcome: NotYet | None = None

    def __repr__(self) -> str:
        return f"the {self.wait.kind} wait at {self.wait.site}"

    def send(self, value: Any) -> Any:
        if self.state == "waiting":
            assert self.wake is not None
            if not self.wake.done():
                return self._block(self.wake)
            self.wake.result()
            self.state = "new"
        if self.state != "new":
            raise RuntimeError("cannot reuse an already awaited wait")
        runner = point_runner(f"the wait at {self.wait.site}")
        if runner is None:
            raise RuntimeError("a wait's await point outside a job")
        outcome = poll(runner.job, self.wait)
        if isinstance(outcome, Ready):
            self.state = "done"
            runner.waits.pop(self, None)
            if outcome.error is not None:
                raise outcome.error
            raise StopIteration(outcome.value)
        self.state, self.outcome = "waiting", outcome
        return self._block(runner.wait_on(self, outcome))

    def _withdraw(self) -> None:
        runner = runner_or_none()
        if runner is not None:
            runner.waits.pop(self, None)
        self.state = "done"
