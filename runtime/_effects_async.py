"""Async effects: `await some_async_effect(...)` in an async job.

The decorated async def returns an `EffectPoint` (an await point: runtime/_points.py).
In a job, the point runs `ledger_call()` in a greenlet of its own: Ledger.call records,
sends and confirms exactly as for a plain effect, and where it sends it calls a shim
that hands the effect's coroutine to the awaiting task (await_in_task) and returns its
outcome. In plain Python (asyncio.run without snaprun) there is no ledger.
"""

from __future__ import annotations

import asyncio
import asyncio.coroutines
import functools
import inspect
import sys
import uuid as _uuid
from collections.abc import Callable
from dataclasses import replace
from typing import (
    TYPE_CHECKING,
    Any,
    ParamSpec,
    TypeVar,
)

import greenlet

from .._errors import (
    EffectOutsideJob,
    RestoreError,
    StoreDamaged,
    StoreFailure,
)
from ._approvals import check_scope
from ._effect_spec import Refused, Spec, invoke, make_spec, rate_limit, spec_options, wait_seconds
from ._points import Point, point_runner, runner_or_none, running_runner
from ._switch import await_in_task

if TYPE_CHECKING:
    from ._async import AsyncRunner
    from ._job import Job

__all__ = [
    "EffectPoint",
    "async_spec",
    "async_spec_of",
    "call_async",
    "ledger_call",
    "call_plain_async",
    "mark_coroutine_function",
]

P = ParamSpec("P")
R = TypeVar("R")


# ------------------------------------------------------------------------ async effects
# An `async def` effect is awaited: its wrapper returns an await point
# (EffectPoint, at the end of this module). In a job, the point runs ledger_call() below in a
# greenlet of its own: Ledger.call records, sends and confirms exactly as for a plain
# effect, and where it sends it calls the spec's function, here a shim that hands the
# effect's coroutine to the awaiting task (await_in_task) and returns its outcome.
def mark_coroutine_function(fn: Callable[P, R]) -> Callable[P, R]:
    mark = getattr(inspect, "markcoroutinefunction", None)  # 3.12+
    if mark is not None:
        return mark(fn)  # type: ignore[no-any-return]

    fn._is_coroutine = asyncio.coroutines._is_coroutine  # type: ignore[attr-defined]
    return fn


def _awaiting(fn: Callable[..., Any]) -> Callable[..., Any]:
    """fn (an async def) as a plain function the ledger calls: its coroutine runs in
    the awaiting task, and the call returns (or raises) its outcome."""

    @functools.wraps(fn)
    def shim(*args: Any, **kwargs: Any) -> Any:
        return await_in_task(fn(*args, **kwargs))

    return shim


def async_spec(spec: Spec[R]) -> Spec[R]:
    """The spec the ledger runs for an async effect (the same name and options)."""
    lookup = spec.lookup
    if lookup is not None and inspect.iscoroutinefunction(lookup):
        lookup = _awaiting(lookup)
    return replace(spec, fn=_awaiting(spec.fn), lookup=lookup)


def async_spec_of(
    effect_fn: Callable[..., Any], options: dict[str, Any] | None, site: str
) -> Spec[Any]:
    """After a restore: the spec of an async effect a snapshot held unsent."""
    if options is not None:
        return make_spec(effect_fn, **options)
    spec = getattr(effect_fn, "__snapstate_effect__", None)
    if not isinstance(spec, Spec):
        raise RestoreError(
            f"the job was frozen before sending {effect_fn!r} at {site}, but it is no longer "
            "an @effect in the agent's code; restore the original source to resume this job"
        )
    return spec


def call_async(
    spec: Spec[R],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    explicit_key: str | None,
    declared: Callable[..., Any] | None,
) -> Any:  # an awaitable of the effect's result

    frame = sys._getframe(2)
    site = f"{frame.f_code.co_filename}:{frame.f_lineno}"
    options = None if declared is not None else spec_options(spec)
    return EffectPoint(spec, args, kwargs, explicit_key, site, declared, options)


def ledger_call(
    job: Job,
    spec: Spec[R],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    key: str | None,
    site: str,
) -> tuple[str, Any]:
    """In the await point's greenlet: the ledger's call of an async effect. ("done",
    result), or ("refused", seconds) when the provider refused it for now (the point
    waits, then calls the same action again)."""
    if spec.requires is not None:  # before anything is recorded or sent
        check_scope(spec.name, spec.fn, spec.requires, spec.within, job, args, kwargs, key)
    before = job.ledger.actions()
    try:
        return ("done", job.ledger.call(async_spec(spec), args, kwargs, key, site))
    except (StoreFailure, StoreDamaged) as exc:
        job.store_failed(exc)  # the run stops here; the agent never sees it
        raise
    except Refused as refused:
        job.ledger.set_actions(before)  # the same action is called again: same identity
        return ("refused", refused.seconds)


async def call_plain_async(spec: Spec[R], args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
    """Plain Python (asyncio.run without a job): no ledger; a rate limit is waited out
    and the call sent again with the same key."""

    if spec.requires is not None:
        check_scope(spec.name, spec.fn, spec.requires, spec.within, None, args, kwargs, None)
    key, refusals = f"adhoc-{_uuid.uuid4().hex}", 0
    while True:
        try:
            pending: Any = invoke(spec, args, kwargs, key)  # the effect's coroutine
            result: R = await pending
            return result
        except Exception as exc:
            seconds = rate_limit(exc)
            if seconds is None:
                raise
        refusals += 1
        await asyncio.sleep(wait_seconds(seconds, refusals))


# ------------------------------------------------------------------------ the await point
class EffectPoint(Point):
    """`await effect_fn(...)` for an `async def` effect: the ledger's code runs in a
    greenlet of its own, the effect's coroutine in the awaiting task."""

    def __init__(
        self,
        spec: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        key: str | None,
        site: str,
        declared: Callable[..., Any] | None,
        options: dict[str, Any] | None,
    ) -> None:
        self.spec, self.args, self.kwargs, self.key = spec, args, kwargs, key
        self.site, self.declared, self.options = site, declared, options
        self.state = "new"  # new -> held -> sending <-> waiting (rate limit) -> done
        self.glet: greenlet.greenlet | None = None
        self.coro: Any = None
        self.refusals = 0

    def __repr__(self) -> str:
        return f"the async effect {self.spec.name} called at {self.site}"

    def send(self, value: Any) -> Any:
        if self.state == "sending":
            return self._forward("send", value)
        if self.state == "plain":
            return self._forward_plain("send", value)
        if self.state in ("held", "waiting"):
            assert self.wake is not None
            if not self.wake.done():
                return self._block(self.wake)
            self.wake.result()
            self.state = "new"
        if self.state != "new":
            raise RuntimeError("cannot reuse an already awaited effect call")
        runner = point_runner(f"the async effect {self.spec.name} at {self.site}", EffectOutsideJob)
        if runner is None:  # plain Python: no ledger
            self.state = "plain"
            self.coro = call_plain_async(self.spec, self.args, self.kwargs)
            return self._forward_plain("send", None)
        if runner.freezing():  # sent after the snapshot (or after a restore)
            self.state = "held"
            return self._block(runner.hold(self))
        return self._start(runner)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        exc = typ if isinstance(typ, BaseException) else (typ() if val is None else val)
        if self.state == "sending":
            return self._forward("throw", exc)
        if self.state == "plain":
            return self._forward_plain("throw", exc)
        self._withdraw()
        raise exc

    def close(self) -> None:
        if self.state in ("sending", "plain") and self.coro is not None:
            self.coro.close()
        self._withdraw()

    def _withdraw(self) -> None:
        runner = runner_or_none()
        if runner is not None:
            runner.unhold(self)
        self.state = "done"

    def _start(self, runner: AsyncRunner) -> Any:
        job = runner.job
        glet = greenlet.greenlet(ledger_call)
        runner.effect_glets.add(glet)
        self.glet = glet
        try:
            message = glet.switch(job, self.spec, self.args, self.kwargs, self.key, self.site)
        except BaseException:
            runner.effect_glets.discard(glet)
            self.glet, self.state = None, "done"
            raise
        return self._handle(message)

    def _forward_plain(self, method: str, value: Any) -> Any:
        try:
            return getattr(self.coro, method)(value)
        except BaseException:
            self.state, self.coro = "done", None
            raise

    def _handle(self, message: tuple[str, Any]) -> Any:
        """What the ledger's greenlet said: send this coroutine, done, or refused."""
        kind, value = message
        if kind == "await":
            self.state, self.coro = "sending", value
            return self._forward("send", None)
        runner = running_runner()
        assert self.glet is not None
        runner.effect_glets.discard(self.glet)
        self.glet = None
        if kind == "refused":  # a rate limit: wait in the task, then send it again
            self.refusals += 1
            seconds = wait_seconds(value, self.refusals)
            self.state = "waiting"
            return self._block(runner.timer(seconds))
        self.state = "done"
        raise StopIteration(value)

    def _forward(self, method: str, value: Any) -> Any:
        runner = running_runner()
        runner.effect_depth += 1  # tasks created meanwhile are the effect's own
        try:
            return getattr(self.coro, method)(value)
        except StopIteration as stop:
            outcome: tuple[str, Any] = ("value", stop.value)
        except BaseException as exc:  # the effect's error (a cancellation too)
            outcome = ("error", exc)
        finally:
            runner.effect_depth -= 1
        self.coro = None
        assert self.glet is not None
        try:
            message = self.glet.switch(outcome)
        except BaseException:
            running_runner().effect_glets.discard(self.glet)
            self.glet, self.state = None, "done"
            raise
        return self._handle(message)
