"""Async agents: `async def main()` on an event loop the runtime owns.

The job's agent greenlet runs a JobLoop (an asyncio selector loop) with the main task
on it. Every task the job's code creates goes through JobLoop.create_task and gets an
identity by its spawn path ("main", "1", "1.2", ...: deterministic whatever order
effects complete in), which the effect ledger uses exactly as for greenlet tasks
(runtime/_tasks.py): main keeps the job's ordinals, a spawned task's n-th action is
"<task>#<n>".

Await points (awaitables that are their own iterators, so no snapstate frame sits in a
task's chain of coroutines and a snapshot holds only the agent's frames):

  - SnapshotPoint, `await snapshot(label)`: asks for a freeze and blocks its task;
  - EffectPoint, `await some_async_effect(...)`: the effect ledger's own code
    (Ledger.call: record, send, confirm; recovery after a crash) runs unchanged in a
    greenlet of its own; where it sends, the effect's coroutine is handed back to
    the point, which runs it in the calling task; its outcome goes back to the ledger.

A freeze waits until the loop is idle (nothing ready, no timer, no socket or pipe
watched but the loop's own, no call in an executor): then every task is blocked on a
future only the job's own code can complete (a snapshot point, another task, a gather,
a TaskGroup), and the whole job is pickled in one pass: the pending tasks (their
coroutine chains, reached through each coroutine's value stack, captured as suspended
generators are), their identities and done-callbacks, and nothing of the loop. While
a freeze is pending, a task reaching an effect waits there (the effect is sent right
after the snapshot, or after a restore). A loop not idle within SNAPSTATE_ASYNC_SETTLE
seconds (default 30) refuses the snapshot, naming each task that is not at an await
point, its chain of coroutines (file:line) and what it awaits.

A restore builds a fresh JobLoop, re-creates each task around its rebuilt chain (in
creation order: each task's first step re-sends into its chain, which blocks again at
the same await or, at a snapstate point, continues with SnapshotInfo(resumed=True)),
gathers over the same children, futures with their done-callbacks.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import functools
import gc
import os
import pickle
import sys
import threading
import time
import types
import weakref
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import greenlet

from .._abi import pinned
from .._errors import EffectOutsideJob, SnapshotError, SnapstateError
from ..resources._registry import close_all_for_snapshot
from ..serializers import _dispatch, _refs
from ..serializers._codeid import code_ref, find_code
from . import _agent, _pins, _waits
from ._clock import clock
from ._effects_async import EffectPoint, async_spec_of
from ._frames import local_names_for_header
from ._layout import replace_stack_top, set_task_cancelling
from ._morph import unmorph
from ._points import SnapshotPoint, runner_or_none
from ._reducers import ASEND_TYPE
from ._switch import FreezeRequest, SnapshotInfo
from ._waits import WaitPoint

if TYPE_CHECKING:
    from ._job import Job

__all__ = [
    "JobLoop",
    "AsyncRunner",
    "entry",
    "settle_seconds",
    "begin_restore",
    "take_restored",
    "discard_restored",
    "resume_job",
    "frame_headers",
    "roots",
]

MAIN = "main"
DEFAULT_SETTLE = 30.0

_Future: type[asyncio.Future[Any]] = asyncio.Future
_Task: type[asyncio.Task[Any]] = asyncio.Task
_GatheringFuture: Any = asyncio.tasks._GatheringFuture  # type: ignore[attr-defined]
_GATHER_CALLBACK = next(
    c
    for c in asyncio.tasks.gather.__code__.co_consts
    if isinstance(c, types.CodeType) and c.co_name == "_done_callback"
)

# Runs that stopped with tasks still pending (a hibernation, a park): their loops and
# tasks are kept forever, never collected, so no agent code (a finally block run by a
# coroutine's close()) runs after the run stopped.
_PARKED: list[object] = []


def settle_seconds() -> float:
    """SNAPSTATE_ASYNC_SETTLE: how long a snapshot waits for every task to reach an
    await point (checked with the other settings, runtime/_api.py)."""
    raw = os.environ.get("SNAPSTATE_ASYNC_SETTLE")
    if raw is None or raw == "":
        return DEFAULT_SETTLE
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not (0 <= value <= 86400):
        raise SnapstateError(
            f"SNAPSTATE_ASYNC_SETTLE={raw!r} is not a number of seconds from 0 to 86400; "
            f"unset it (default {DEFAULT_SETTLE:g}) or give one"
        )
    return value


# ------------------------------------------------------------------------ the loop
@dataclass
class _TaskInfo:
    id: str
    parent: str | None
    index: int
    spawned: int = 0  # tasks it created
    effects: int = 0  # a spawned task's actions (the ledger's "<id>#<n>")
    internal: bool = False  # created by an effect's own code (a client's task)


# Tasks an effect's own code creates (httpx and anyio start some) are not the agent's:
# a restore serves that effect from the ledger without running its code, so they must
# not take the spawn counts or default names the agent's own tasks are identified by.
INTERNAL_BASE = 1 << 40


class JobLoop(asyncio.SelectorEventLoop):
    """The loop a job's async agent runs on: it names the tasks created on it and lets
    the runner freeze the job between two iterations."""

    def __init__(self) -> None:
        super().__init__()
        self.runner: AsyncRunner | None = None
        self.collecting: list[asyncio.Handle] | None = None  # restoring: steps held back
        self.executing: set[asyncio.Future[Any]] = set()

    def create_task(self, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        runner = self.runner
        if runner is not None and kwargs.get("name") is None:
            # asyncio's default names come from a process-wide counter: a restored job
            # would name its new tasks differently. Counted per job instead (saved).
            if runner.creating_internal():
                kwargs["name"] = f"effect-task-{runner.internal + 1}"
            else:
                kwargs["name"] = f"Task-{runner.count + 1}"
        task = super().create_task(coro, **kwargs)
        if runner is not None:
            runner.adopt(task)
        return task

    def set_task_factory(self, factory: Any) -> None:
        if factory is not None:
            raise SnapshotError(
                "an async job's event loop names its tasks itself (their identities in the "
                "effect ledger): a task factory (e.g. asyncio.eager_task_factory) cannot be "
                "set on it"
            )
        super().set_task_factory(factory)

    def call_soon(  # type: ignore[override]
        self, callback: Any, *args: Any, context: Any = None
    ) -> asyncio.Handle:
        if self.collecting is not None:
            handle = asyncio.Handle(callback, args, self, context)
            self.collecting.append(handle)
            return handle
        return super().call_soon(callback, *args, context=context)

    def run_in_executor(  # type: ignore[override]
        self, executor: Any, func: Any, *args: Any
    ) -> asyncio.Future[Any]:
        future = super().run_in_executor(executor, func, *args)
        self.executing.add(future)
        future.add_done_callback(self.executing.discard)
        return future

    def _run_once(self) -> None:
        if self.runner is not None:
            self.runner.between_iterations()
        super()._run_once()  # type: ignore[misc]

    def idle(self, own: set[asyncio.TimerHandle]) -> str | None:
        """None when nothing but the job's own code could make progress; else what
        keeps the loop busy."""
        if self._ready:  # type: ignore[attr-defined]
            return "callbacks are ready to run"
        timers = [
            h
            for h in self._scheduled  # type: ignore[attr-defined]
            if not h.cancelled() and h not in own and not is_sleep_timer(h)
        ]
        if timers:
            kinds = sorted({_timer_kind(h) for h in timers})
            return f"{len(timers)} timer(s) are scheduled: {', '.join(kinds)}"
        if self.executing:
            return (
                f"{len(self.executing)} call(s) run in an executor (asyncio.to_thread(), "
                "run_in_executor(), a DNS lookup)"
            )
        watched = self._selector.get_map()  # type: ignore[attr-defined]
        own_fd = self._ssock.fileno()  # type: ignore[attr-defined]
        others = [key for key in (watched or {}).values() if key.fd != own_fd]
        if others:
            return f"{len(others)} socket(s) or pipe(s) are being read or written"
        return None


_SLEEP_CALLBACK = asyncio.futures._set_result_unless_cancelled  # type: ignore[attr-defined]


def is_sleep_timer(handle: asyncio.TimerHandle) -> bool:
    """The timer of an asyncio.sleep(): frozen with the job (it ends at the same wall
    clock time after a restore, at once if that has passed)."""
    return handle._callback is _SLEEP_CALLBACK  # type: ignore[attr-defined]


def _timer_kind(handle: asyncio.TimerHandle) -> str:
    """What a timer of the loop is for, in the agent's words."""
    callback = handle._callback  # type: ignore[attr-defined]
    owner = getattr(callback, "__self__", None)
    name = getattr(callback, "__qualname__", "") or getattr(callback, "__name__", "")
    timeout = getattr(asyncio, "Timeout", None)
    if timeout is not None and isinstance(owner, timeout):
        return (
            "an asyncio.timeout() or wait_for() deadline (a deadline on the loop's clock "
            "cannot be carried across a restore: take the snapshot outside that block)"
        )
    if "_set_result_unless_cancelled" in name:
        return "an asyncio.sleep()"
    if "_release_waiter" in name:
        return "an asyncio.wait_for() or wait() deadline"
    return f"a call_later()/call_at() of {name or repr(callback)}"


@dataclass
class _Freezer:
    task: asyncio.Task[Any]
    point: SnapshotPoint
    wake: asyncio.Future[Any]


class AsyncRunner:
    """Runs a job's async agent on its JobLoop; freezes it between iterations."""

    def __init__(self, job: Job, loop: JobLoop | None = None) -> None:
        self.job = job
        self.loop = loop if loop is not None else JobLoop()
        self.loop.runner = self
        self.info: dict[asyncio.Task[Any], _TaskInfo] = {}
        self.order: list[asyncio.Task[Any]] = []
        self.count = 0
        self.main: asyncio.Task[Any] | None = None
        self.freezers: list[_Freezer] = []
        self.held: dict[EffectPoint, tuple[int, asyncio.Future[Any]]] = {}
        self.deadline: float | None = None  # loop time the pending snapshot waits until
        self.own: set[asyncio.TimerHandle] = set()
        self.own_wakes: set[asyncio.Future[Any]] = set()  # what the runner's timers end
        self.bound: asyncio.TimerHandle | None = None
        self.effect_glets: set[greenlet.greenlet] = set()
        self.effect_depth = 0  # an effect's coroutine is running (nested: its depth)
        self.internal = 0  # tasks effects' own code created
        self.waits: dict[WaitPoint, asyncio.Future[Any]] = {}
        self.settle = settle_seconds()
        self._resumed: tuple[float, int] | None = None  # (created_at, seq) after a restore

    # -------------------------------------------------------------- tasks
    def adopt(self, task: asyncio.Task[Any]) -> None:
        if task in self.info:
            return
        if self.main is None:
            info = _TaskInfo(MAIN, None, self.count)
            self.count += 1
        elif self.creating_internal():
            self.internal += 1
            current = asyncio.current_task(self.loop)
            parent = self.info.get(current) if current is not None else None
            info = _TaskInfo(
                f"effect-task-{self.internal}",
                parent.id if parent is not None else None,
                INTERNAL_BASE + self.internal,
                internal=True,
            )
        else:
            current = asyncio.current_task(self.loop)
            parent = self.info.get(current) if current is not None else None
            if parent is None:
                parent = self.info[self.main]
            parent.spawned += 1
            tid = str(parent.spawned) if parent.id == MAIN else f"{parent.id}.{parent.spawned}"
            info = _TaskInfo(tid, parent.id, self.count)
            self.count += 1
        self.info[task] = info
        self.order.append(task)

    def creating_internal(self) -> bool:
        """A task created now belongs to an effect's own code: while an effect's
        coroutine runs, or in a task such code created."""
        if self.effect_depth:
            return True
        current = asyncio.current_task(self.loop)
        parent = self.info.get(current) if current is not None else None
        return parent is not None and parent.internal

    def ledger_task(self) -> _TaskInfo | None:
        """The spawned task calling the ledger (None in main: the job's ordinals)."""
        current = asyncio.current_task(self.loop)
        if current is None:
            return None  # a callback of the loop's: main's identities, in callback order
        info = self.info.get(current)
        if info is not None and info.internal:
            raise EffectOutsideJob(
                f"an effect or recorded value was called by task {current.get_name()}, which "
                "an effect's own code started: effects must not call snapstate (a restore "
                "serves the effect from the ledger without running its code); call it from "
                "the agent's own tasks"
            )
        if info is None:
            raise EffectOutsideJob(
                f"an effect or recorded value was called by task {current.get_name()}, which "
                "was not created through the job's event loop (asyncio.Task() called "
                "directly?): it has no identity in the ledger, so nothing was recorded or "
                "sent. Create it with asyncio.create_task()"
            )
        return None if info.id == MAIN else info

    def timer(self, seconds: float) -> asyncio.Future[Any]:
        """A future done after `seconds`, on a timer that never delays a snapshot."""
        wake = self.loop.create_future()
        handle = self.loop.call_later(seconds, _set_if_pending, wake)
        self.own.add(handle)
        self.own_wakes.add(wake)

        def done(_future: asyncio.Future[Any]) -> None:
            self.own.discard(handle)
            self.own_wakes.discard(wake)

        wake.add_done_callback(done)
        return wake

    def wait_on(self, point: WaitPoint, outcome: _waits.NotYet) -> asyncio.Future[Any]:
        """The future a waiting point blocks on: done when it is due (polled again)."""
        if outcome.due is None:
            wake = self.loop.create_future()  # polled again after a restore
        else:
            wake = self.timer(max(0.0, outcome.due - clock().time()))
        self.waits[point] = wake
        return wake

    # -------------------------------------------------------------- freezing
    def freezing(self) -> bool:
        return bool(self.freezers)

    def request_freeze(self, point: SnapshotPoint) -> asyncio.Future[Any]:
        task = asyncio.current_task(self.loop)
        if task is None or task not in self.info:
            raise SnapshotError(
                "await snapshot() ran outside the job's tasks (in a callback, or a task of "
                "another event loop); await it in the agent's coroutines"
            )
        wake = self.loop.create_future()
        if not self.freezers:
            self.deadline = self.loop.time() + self.settle
            self.bound = self.loop.call_at(self.deadline, _noop)  # wakes the loop then
            self.own.add(self.bound)
        self.freezers.append(_Freezer(task, point, wake))
        return wake

    def withdraw(self, point: SnapshotPoint) -> None:
        self.freezers = [f for f in self.freezers if f.point is not point]
        if not self.freezers:
            self._end_freeze()

    def hold(self, point: EffectPoint) -> asyncio.Future[Any]:
        wake = self.loop.create_future()
        task = asyncio.current_task(self.loop)
        info = self.info.get(task) if task is not None else None
        self.held[point] = (info.index if info is not None else 0, wake)
        return wake

    def unhold(self, point: EffectPoint) -> None:
        self.held.pop(point, None)

    def _end_freeze(self) -> None:
        self.deadline = None
        if self.bound is not None:
            self.bound.cancel()
            self.own.discard(self.bound)
            self.bound = None
        held, self.held = self.held, {}
        for _, wake in sorted(held.values(), key=lambda held: held[0]):
            _set_if_pending(wake)  # in task order, as a restore sends them

    def between_iterations(self) -> None:
        if not self.freezers:
            if self.waits and not self.effect_glets and self.loop.idle(self.own) is None:
                self._maybe_hibernate()  # (never with an effect in flight)
            return
        if self.effect_glets:  # effects in flight: waited for without a bound, as a job
            self._extend_bound()  # of greenlet tasks waits for its calls in flight
            return
        busy = self.loop.idle(self.own)
        if busy is None:
            self._freeze()
            return
        assert self.deadline is not None
        # due as asyncio decides a timer is due: the bound's timer has run by then
        if self.loop.time() + self.loop._clock_resolution >= self.deadline:  # type: ignore[attr-defined]
            self._refuse(busy, waited=True)
        elif self._own_deadline():  # it cannot end while its own task waits to be frozen
            self._refuse(busy, waited=False)

    def _extend_bound(self) -> None:
        """The settle bound counts from the end of the last effect in flight."""
        now = self.loop.time()
        if self.deadline is not None and self.deadline - now >= self.settle / 2:
            return
        self.deadline = now + self.settle
        if self.bound is not None:
            self.bound.cancel()
            self.own.discard(self.bound)
        self.bound = self.loop.call_at(self.deadline, _noop)
        self.own.add(self.bound)

    def _own_deadline(self) -> bool:
        """A task waiting for the snapshot runs inside an asyncio.timeout() block."""
        timeout = getattr(asyncio, "Timeout", None)
        if timeout is None:
            return False
        frozen = {f.task for f in self.freezers}
        for handle in self.loop._scheduled:  # type: ignore[attr-defined]
            owner = getattr(handle._callback, "__self__", None)
            if not handle.cancelled() and isinstance(owner, timeout):
                if getattr(owner, "_task", None) in frozen:
                    return True
        return False

    def _freeze(self) -> None:
        foreign = self._foreign_waits()  # (while the freezers' own wakes are known)
        freezers = sorted(self.freezers, key=lambda f: self.info[f.task].index)
        self.freezers = []
        first = freezers[0].point
        state = self._state()
        request = FreezeRequest(first.label, None, meta=first.meta, async_state=state)
        hub = self.job._hub
        assert hub is not None  # the job runs
        try:
            if foreign:
                raise SnapshotError(
                    f"snapshot {self.job.seq + 1} ({first.label or 'no label'}) was refused: "
                    f"{'; '.join(foreign)}. Nothing in the job could complete that after a "
                    "restore: await it to its end before the snapshot, or make the call an "
                    "@effect"
                )
            info = hub.switch(request)
        except SnapshotError as exc:
            for f in freezers:
                _set_error_if_pending(f.wake, SnapshotError(str(exc)))
            self._end_freeze()
            return
        for f in freezers:
            _set_if_pending(
                f.wake,
                SnapshotInfo(False, 0.0, info.seq, f.point.label, f.point.meta, _pins.pins()),
            )
        self._end_freeze()

    def _maybe_hibernate(self) -> None:
        """Every task waits (on a snapstate wait, or on the job's own tasks): a wait
        due within SNAPSTATE_HIBERNATE_AFTER is slept through by the loop; otherwise
        the job is frozen here and the run ends (JobWaiting, exit 3)."""
        points = [p for p, wake in self.waits.items() if not wake.done()]
        if not points:
            return
        dues = [p.outcome.due for p in points if p.outcome is not None]
        timed = [d for d in dues if d is not None]
        first = min(timed) if timed else None
        if first is not None and first - clock().time() <= _waits.hibernate_after():
            return
        point = next(p for p in points if p.outcome is not None and p.outcome.due == first)
        outcome = point.outcome
        assert outcome is not None
        job = self.job
        if job.ledger.replay:
            job.end_replay(f"the job waits at {point.wait.site} ({outcome.reason})")
        seq = job.seq + 1
        close_all_for_snapshot()
        label = f"waiting: {outcome.reason}"
        state = self._state()
        try:
            header, payload = job._freeze(
                FreezeRequest(label, None, point.wait, async_state=state), seq
            )
        except SnapshotError as exc:
            for p in points:  # raised at the waits: the job carries on
                wake = self.waits.pop(p)
                _set_error_if_pending(wake, SnapshotError(str(exc)))
            return
        job._commit(seq, label, header, payload)
        job._hibernate(point.wait, outcome, seq)  # raises JobWaiting: the run ends here

    def _foreign_waits(self) -> list[str]:
        """The tasks that wait on a future nothing of the job holds: a library's future
        (completed by its own machinery, from another thread or a C extension), which a
        restore would bring back pending forever. A future the job can complete is held
        by asyncio's primitives (Queue, Event, Lock, TaskGroup, ...) or by the agent's
        own code and objects."""
        waiting: dict[int, tuple[asyncio.Task[Any], asyncio.Future[Any]]] = {}
        problems: list[str] = []
        for task in self.order:
            waiter = getattr(task, "_fut_waiter", None)
            if task.done() or waiter is None or isinstance(waiter, asyncio.Task):
                continue
            if type(waiter) is _GatheringFuture or self._is_own_wake(waiter):
                continue
            if type(waiter) is not _Future:
                problems.append(
                    f"task {self.info[task].id} ({task.get_name()}) awaits a "
                    f"{type(waiter).__module__}.{type(waiter).__qualname__}, a future of "
                    "another library"
                )
                continue
            waiting[id(waiter)] = (task, waiter)
        if not waiting:
            return problems
        agent = {m.__name__ for m in _agent.agent_modules(self.job.entry)}
        futures = [fut for _, fut in waiting.values()]
        held: dict[int, list[object]] = {key: [] for key in waiting}
        skip = {id(futures), id(waiting), id(held), *(id(pair) for pair in waiting.values())}
        for holder in gc.get_referrers(*futures):
            if id(holder) in skip or isinstance(holder, (asyncio.Task, types.FrameType)):
                continue
            if isinstance(holder, _FutureAwait) or type(holder).__name__ == "FutureIter":
                continue
            for ref in gc.get_referents(holder):
                if id(ref) in held and ref is waiting[id(ref)][1]:
                    held[id(ref)].append(holder)
        for key, (task, _fut) in waiting.items():
            own = {id(obj) for obj in _chain_objects(task.get_coro())}
            holders = [h for h in held[key] if id(h) not in own]  # not the awaiting code
            if not holders or not any(_job_holder(h, agent) for h in holders):
                what = ", ".join(sorted({_owner_name(h) for h in holders})) or "nothing"
                problems.append(
                    f"task {self.info[task].id} ({task.get_name()}) awaits a future held by "
                    f"{what} ({describe_task(task)})"
                )
        return problems

    def _is_own_wake(self, future: asyncio.Future[Any]) -> bool:
        return (
            future in self.own_wakes
            or any(f.wake is future for f in self.freezers)
            or any(wake is future for _, wake in self.held.values())
            or any(wake is future for wake in self.waits.values())
        )

    def _state(self) -> dict[str, Any]:
        """What a snapshot holds of the job's tasks (pickled with the rest)."""
        pending = [t for t in self.order if not t.done()]
        loop = self.loop
        settings = {  # what the agent may set on its running loop
            "exception_handler": loop.get_exception_handler(),
            "debug": loop.get_debug(),
            "slow_callback_duration": loop.slow_callback_duration,
        }
        sleeping = [
            h
            for h in loop._scheduled  # type: ignore[attr-defined]
            if not h.cancelled() and is_sleep_timer(h)
        ]
        return {
            "tasks": pending,
            "timers": sleeping,  # asyncio.sleep()s in progress, however referenced
            "main": self.main,
            "count": self.count,
            "internal": self.internal,
            "loop": settings,
        }

    def _refuse(self, busy: str, *, waited: bool) -> None:
        lines = []
        for task in self.order:
            if task.done():
                continue
            waiter = getattr(task, "_fut_waiter", None)
            if any(f.wake is waiter for f in self.freezers) or any(
                wake is waiter for _, wake in self.held.values()
            ):
                continue
            lines.append(f"task {self.info[task].id} ({task.get_name()}): {describe_task(task)}")
        detail = f"; not at an await point of snapstate: {'; '.join(lines)}" if lines else ""
        when = (
            f"after {self.settle:g}s the job was still not quiet"
            if waited
            else "the job cannot become quiet while the snapshot waits"
        )
        message = (
            f"snapshot {self.job.seq + 1} ({self.freezers[0].point.label or 'no label'}) was "
            f"refused: {when}: {busy}{detail}. A snapshot freezes an async job when every "
            "task awaits snapshot(), an effect, a wait or another task of the job, with no "
            "timer, socket or thread call pending: let those end before the snapshot (or "
            "make the I/O an @effect)" + (", or raise SNAPSTATE_ASYNC_SETTLE" if waited else "")
        )
        for f in self.freezers:
            _set_error_if_pending(f.wake, SnapshotError(message))
        self.freezers = []
        self._end_freeze()

    def resumed_info(self, label: str | None, meta: dict[str, Any] | None) -> SnapshotInfo:
        assert self._resumed is not None, "a restored snapshot point runs after a restore"
        created_at, seq = self._resumed
        return SnapshotInfo(
            True, max(0.0, time.time() - created_at), seq, label, meta, _pins.pins()
        )

    # -------------------------------------------------------------- running
    def start(self, fn: Callable[..., Coroutine[Any, Any, Any]]) -> Any:
        coro = fn()
        self.main = self.loop.create_task(coro, context=contextvars.Context())
        return self._run()

    def _run(self) -> Any:
        loop, main = self.loop, self.main
        assert main is not None
        previous = asyncio.events._get_running_loop()
        if previous is not None:
            raise SnapshotError(
                "an async agent cannot run inside a running event loop; use "
                "`await asyncio.to_thread(store.start, ...)` or snaprun"
            )
        ended = False
        try:
            asyncio.set_event_loop(loop)
            result = loop.run_until_complete(main)
            ended = True
            return result
        except BaseException:
            ended = main.done()
            raise
        finally:
            if ended:
                self._shutdown()
            else:  # stopped mid-way (a hibernation): nothing of the agent runs again
                _PARKED.append((loop, list(self.order), self))
                loop.runner = None
            asyncio.set_event_loop(None)

    def _shutdown(self) -> None:
        """As asyncio.run ends: cancel the tasks still pending, finish async generators
        and the default executor, close the loop."""
        loop = self.loop
        try:
            pending = [t for t in self.order if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            for task in pending:
                if not task.cancelled() and task.exception() is not None:
                    loop.call_exception_handler(
                        {
                            "message": "unhandled exception during the job's shutdown",
                            "exception": task.exception(),
                            "task": task,
                        }
                    )
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.runner = None
            loop.close()

    # -------------------------------------------------------------- restoring
    def restore(
        self, restored: _Restoring, state: dict[str, Any], created_at: float, seq: int
    ) -> None:
        """Re-create the saved tasks, futures and gathers on this runner's fresh loop.

        The first loop iteration then re-makes every waiting task's wakeup and every
        done-callback on each future in the order the future held them (a task's first
        step re-sends into its chain, which blocks again at the same await), before any
        agent code runs; then the tasks paused at snapstate's await points continue, in
        creation order, as after a snapshot taken live."""
        loop = self.loop
        self._resumed = (created_at, seq)
        loop.collecting = []
        first_step: dict[asyncio.Task[Any], asyncio.Handle] = {}
        tasks = sorted(restored.tasks, key=lambda ts: ts[1]["info"]["index"])
        try:
            for task, st in tasks:
                info = _TaskInfo(**st["info"])
                context = st.get("context") or contextvars.Context()
                if st["outcome"] is None:
                    task.__init__(st["coro"], loop=loop, name=st["name"], context=context)  # type: ignore[misc]
                    first_step[task] = loop.collecting[-1]
                    if st.get("cancelling"):
                        set_task_cancelling(task, int(st["cancelling"]))
                else:
                    placeholder = _finished_coroutine_of(st.get("coro_code"))
                    task.__init__(placeholder, loop=loop, name=st["name"], context=context)  # type: ignore[misc]
                    loop.collecting[-1].cancel()  # a finished task takes no step
                    placeholder.close()
                    _set_outcome(task, st["outcome"], st.get("unretrieved", False))
                self.info[task] = info
                if not info.internal:
                    self.count = max(self.count, info.index + 1)
            self.order = sorted(self.info, key=lambda t: self.info[t].index)
            self.main = state["main"]
            self.count = max(self.count, int(state.get("count", 0)))
            self.internal = int(state.get("internal", 0))
            settings = state.get("loop") or {}
            loop.set_exception_handler(settings.get("exception_handler"))
            loop.set_debug(bool(settings.get("debug", False)))
            loop.slow_callback_duration = float(settings.get("slow_callback_duration", 0.1))
            for future, st in restored.futures:
                _Future.__init__(future, loop=loop)
                if st["outcome"] is not None:
                    _set_outcome(future, st["outcome"], st.get("unretrieved", False))
            for gathering, st in restored.gathers:
                _restore_gather(gathering, st, loop)
            for task in first_step:
                _await_with_future_iters(task.get_coro())
            steps = set(first_step.values())
            order: list[asyncio.Handle] = [
                h for h in loop.collecting if h not in steps and not h.cancelled()
            ]  # the rebuilt gathers' bookkeeping of their finished children
            for obj, st in [*tasks, *restored.futures, *restored.gathers]:
                for kind, value in st.get("callbacks") or ():
                    if kind == "wake":
                        handle = first_step.pop(value, None)
                        if handle is not None:
                            order.append(handle)
                    elif kind == "call-in":  # with the context it was added in
                        callback, context = value
                        add = functools.partial(obj.add_done_callback, callback, context=context)
                        order.append(asyncio.Handle(add, (), loop, None))
                    else:
                        order.append(asyncio.Handle(obj.add_done_callback, (value,), loop, None))
            order.extend(first_step.values())  # at snapstate's await points: task order
        finally:
            loop.collecting = None
        loop._ready.extend(order)  # type: ignore[attr-defined]

    def resume(self) -> Any:
        return self._run()


def _noop() -> None:
    return None


def _type_name(obj: object) -> str:
    t = type(obj)
    return f"{t.__module__}.{t.__qualname__}"


def _owner_name(holder: object, depth: int = 0) -> str:
    """What holds a future, named by the first object that is not a plain container."""
    if isinstance(holder, (list, dict, set, tuple, collections.deque)) and depth < 3:
        for owner in gc.get_referrers(holder):
            if not isinstance(owner, types.FrameType) and owner is not holder:
                name = _owner_name(owner, depth + 1)
                if not name.startswith("builtins."):
                    return name
    return _type_name(holder)


def _job_holder(holder: object, agent: set[str], depth: int = 0) -> bool:
    """`holder` keeps a future for the job's own code: asyncio's primitives, the
    agent's objects, code or variables, or a container one of those holds."""
    if isinstance(holder, (types.CoroutineType, types.GeneratorType, types.AsyncGeneratorType)):
        frame = _frame_and_awaited(holder)
        name = frame[0].f_globals.get("__name__") if frame and frame[0] is not None else None
        return isinstance(name, str) and (name in agent or name.startswith("asyncio"))
    if isinstance(holder, (types.CellType, types.FunctionType, types.MethodType)):
        return True
    if isinstance(holder, types.ModuleType):  # a global of the agent's
        return holder.__name__ in agent
    module = type(holder).__module__ or ""
    if module == "asyncio" or module.startswith("asyncio.") or module in agent:
        return True
    if isinstance(holder, (list, dict, set, tuple, collections.deque)) and depth < 3:
        return any(
            _job_holder(h, agent, depth + 1)
            for h in gc.get_referrers(holder)
            if not isinstance(h, types.FrameType)
        )
    return False


def _frame_and_awaited(obj: Any) -> tuple[types.FrameType | None, Any] | None:
    """The frame of one link of a task's chain and what it awaits: a coroutine, a
    generator (yield from), or an `async for` step into an async generator's body."""
    if isinstance(obj, types.CoroutineType):
        return obj.cr_frame, obj.cr_await
    if isinstance(obj, types.GeneratorType):
        return obj.gi_frame, obj.gi_yieldfrom
    if type(obj) is ASEND_TYPE:
        for ref in gc.get_referents(obj):
            if isinstance(ref, types.AsyncGeneratorType):
                return ref.ag_frame, ref.ag_await
    return None


def _await_with_future_iters(coro: Any) -> None:
    """In a restored chain, what awaits a future holds asyncio's own future iterator
    again (as before the snapshot), not the _FutureAwait the load put there: errors
    and cancellations pass through it with no snapstate frame in their tracebacks."""
    seen: set[int] = set()
    while coro is not None and id(coro) not in seen:
        seen.add(id(coro))
        link = _frame_and_awaited(coro)
        if link is None:
            return
        frame, awaited = link
        if isinstance(awaited, _FutureAwait) and frame is not None:
            replace_stack_top(frame, awaited, awaited.future.__await__())
            return
        coro = awaited


def _set_if_pending(future: asyncio.Future[Any], value: Any = None) -> None:
    if not future.done():
        future.set_result(value)


def _set_error_if_pending(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


def _module_of_code(coro: Any) -> str | None:
    """The importable module a finished coroutine's function lives in, if any."""
    code = coro.cr_code
    for module in list(sys.modules.values()):
        try:
            if getattr(module, "__file__", None) == code.co_filename:
                return module.__name__
        except Exception:  # a lazy module object
            continue
    return None


def _finished_coroutine_of(saved: tuple[Any, str] | None) -> Coroutine[Any, Any, Any]:
    """A finished coroutine of the saved task's own function (its repr names it), or
    of a placeholder when that code is gone."""
    if saved is not None:
        try:
            code = find_code(saved[0])
            module = sys.modules[saved[0].module]
            fn = types.FunctionType(code, module.__dict__, code.co_name, (None,) * code.co_argcount)
            kwonly = code.co_varnames[code.co_argcount : code.co_argcount + code.co_kwonlyargcount]
            fn.__kwdefaults__ = {k: None for k in kwonly} or None
            fn.__qualname__ = saved[1]
            if code.co_freevars:
                raise ValueError("a closure")
            coro = fn()
            if isinstance(coro, types.CoroutineType):
                return coro
            raise ValueError("not a coroutine")
        except Exception:
            pass
    return _placeholder()


async def _placeholder_body() -> None:
    return None


def _placeholder() -> Coroutine[Any, Any, None]:
    return _placeholder_body()


def _set_outcome(
    future: asyncio.Future[Any], outcome: tuple[str, Any], unretrieved: bool = False
) -> None:
    kind, value = outcome
    if kind == "result":
        _Future.set_result(future, value)
    elif kind == "error":
        _Future.set_exception(future, value)
        if not unretrieved:  # its error was retrieved: not logged again at exit
            future._log_traceback = False
    else:
        _Future.cancel(future, msg=value)


def _cancel_message(future: asyncio.Future[Any]) -> Any:
    """The message of a cancelled future's CancelledError (cancel(msg=...)), read
    without taking it (_make_cancelled_error() would: the run goes on)."""
    for ref in gc.get_referents(future):
        if isinstance(ref, asyncio.CancelledError):
            return ref.args[0] if ref.args else None
    return getattr(future, "_cancel_message", None)


def _outcome(future: asyncio.Future[Any]) -> tuple[str, Any] | None:
    if not future.done():
        return None
    if future.cancelled():
        return ("cancelled", _cancel_message(future))
    # read without marking an error retrieved (exception() would: the run goes on)
    error = future._exception
    return ("error", error) if error is not None else ("result", future._result)  # type: ignore[attr-defined]


# ------------------------------------------------------------------------ describing
def describe_task(task: asyncio.Task[Any]) -> str:
    """A task's chain of coroutines (file:line, outermost first) and what it awaits."""
    parts: list[str] = []
    coro: Any = task.get_coro()
    awaited: Any = None
    while coro is not None:
        link = _frame_and_awaited(coro)
        if link is None:
            break
        frame, nxt = link
        if frame is None:
            break
        code = unmorph(frame.f_code, max(frame.f_lasti // 2, 0))[0]
        parts.append(f"{code.co_qualname}() at {code.co_filename}:{frame.f_lineno}")
        if _frame_and_awaited(nxt) is not None:
            coro = nxt
            continue
        awaited = nxt
        break
    waiter = getattr(task, "_fut_waiter", None)
    what = _describe_awaited(awaited, waiter)
    return f"{' -> '.join(parts) or 'no frame'}, awaiting {what}"


def _describe_awaited(awaited: Any, waiter: Any) -> str:
    if isinstance(awaited, _FutureAwait):
        awaited = awaited.future
    elif awaited is not None and type(awaited).__name__ == "FutureIter":
        awaited = _iter_future(awaited)
    target = waiter if waiter is not None else awaited
    if target is None:
        return "nothing (it is ready to run)"
    if isinstance(target, asyncio.Future):
        callbacks = [cb for cb, _ in getattr(target, "_callbacks", None) or []]
        names = [getattr(cb, "__qualname__", type(cb).__name__) for cb in callbacks]
        source = getattr(target, "_source_traceback", None)
        hint = ""
        if any("_chain_future" in n or "_call_set_state" in n for n in names):
            hint = " (a call running in a thread: asyncio.to_thread or run_in_executor)"
        return f"{target!r}{hint}" + (f" created at {source[-1]}" if source else "")
    return repr(target)


def frame_headers(state: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The header's frames of main's chain of coroutines and every pending task's
    (innermost first, as for greenlet tasks): checked against the agent's code before a
    restore, shown by `snaprun inspect`."""
    runner = runner_or_none()
    main: list[dict[str, Any]] = []
    tasks: list[dict[str, Any]] = []
    for task in state["tasks"]:
        frames: list[dict[str, Any]] = []
        for frame in _chain_frames(task.get_coro()):
            code = unmorph(frame.f_code, max(frame.f_lasti // 2, 0))[0]
            name = frame.f_globals.get("__name__")
            if not isinstance(name, str):
                continue
            ref = code_ref(code, name)
            frames.append(
                {
                    "module": ref.module,
                    "qualname": ref.qualname,
                    "firstlineno": ref.firstlineno,
                    "digest": ref.digest,
                    "filename": ref.filename,
                    "lineno": frame.f_lineno,
                    "locals": local_names_for_header(ref),
                }
            )
        frames.reverse()  # innermost first
        info = runner.info.get(task) if runner is not None else None
        tid = info.id if info is not None else task.get_name()
        if tid == MAIN:
            main = frames
        tasks.append(
            {
                "id": tid,
                "parent": info.parent if info is not None else None,
                "status": "awaiting",
                "frames": frames,
            }
        )
    return main, tasks


def _chain_objects(coro: Any) -> list[Any]:
    """The coroutines (and async-for steps) of a task's chain, outermost first."""
    out: list[Any] = []
    seen: set[int] = set()
    while coro is not None and id(coro) not in seen:
        seen.add(id(coro))
        link = _frame_and_awaited(coro)
        if link is None:
            break
        out.append(coro)
        coro = link[1]
    return out


def _chain_frames(coro: Any) -> list[types.FrameType]:
    frames: list[types.FrameType] = []
    seen: set[int] = set()
    while coro is not None and id(coro) not in seen:
        seen.add(id(coro))
        link = _frame_and_awaited(coro)
        if link is None or link[0] is None:
            break
        frames.append(link[0])
        coro = link[1]
    return frames


def roots(state: dict[str, Any]) -> list[tuple[str, object]]:
    """Where each value of the tasks' frames comes from, for naming an unpicklable one."""
    runner = runner_or_none()

    def info(task: asyncio.Task[Any]) -> str:
        known = runner.info.get(task) if runner is not None else None
        return known.id if known is not None else task.get_name()

    out: list[tuple[str, object]] = []
    for task in state["tasks"]:
        for frame in _chain_frames(task.get_coro()):
            code = unmorph(frame.f_code, max(frame.f_lasti // 2, 0))[0]
            where = f"{code.co_qualname}() at {code.co_filename}:{frame.f_lineno}"
            for name, value in frame.f_locals.items():
                out.append((f"task {info(task)}, frame {where}, local {name!r}", value))
    return out


# ------------------------------------------------------------------------ entry
def entry(job: Job, fn: Callable[..., Any]) -> Callable[..., Any]:
    """The function the job's agent greenlet runs for an `async def main()`."""
    return functools.partial(_start, job, fn)


def _start(job: Job, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any, **kwargs: Any) -> Any:
    runner = AsyncRunner(job)
    job._async = runner
    try:
        return runner.start(functools.partial(fn, *args, **kwargs))
    finally:
        job._async = None


def resume_job(
    job: Job, restored: _Restoring, state: dict[str, Any], created_at: float, seq: int
) -> Callable[[], Any]:
    def run() -> Any:
        runner = AsyncRunner(job, restored.loop)
        job._async = runner
        try:
            runner.restore(restored, state, created_at, seq)
            return runner.resume()
        finally:
            job._async = None

    return run


# ------------------------------------------------------------------------ pickling
class _FutureAwait:
    """What `await future` holds on the awaiting coroutine's value stack, as a Python
    object: asyncio's C FutureIter has the same behaviour (Future.__await__)."""

    def __init__(self, future: asyncio.Future[Any]) -> None:
        self.future = future

    def __iter__(self) -> _FutureAwait:
        return self

    def __next__(self) -> Any:
        return self.send(None)

    def send(self, value: Any) -> Any:
        future = self.future
        if not future.done():
            future._asyncio_future_blocking = True
            return future
        raise StopIteration(future.result())

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        raise typ if isinstance(typ, BaseException) else (typ() if val is None else val)

    def close(self) -> None:
        return None


def _iter_future(it: object) -> asyncio.Future[Any] | None:
    for ref in gc.get_referents(it):
        if isinstance(ref, asyncio.Future):
            return ref
    return None


@dataclass
class _Restoring:
    loop: JobLoop
    tasks: list[tuple[asyncio.Task[Any], dict[str, Any]]]
    futures: list[tuple[asyncio.Future[Any], dict[str, Any]]]
    gathers: list[tuple[asyncio.Future[Any], dict[str, Any]]]
    hooks: Any = None  # the async generator hooks to put back after the load


_RESTORING: _Restoring | None = None


def _restoring() -> _Restoring:
    global _RESTORING
    if _RESTORING is None:
        _RESTORING = _Restoring(JobLoop(), [], [], [])
    return _RESTORING


def begin_restore() -> None:
    """Before loading an async job's snapshot: its loop exists first, and the async
    generators rebuilt by the load are registered with it as asyncio.run registers
    them (finished at the end of the run, finalized on the loop)."""
    restoring = _restoring()
    restoring.hooks = sys.get_asyncgen_hooks()
    loop = restoring.loop
    sys.set_asyncgen_hooks(
        firstiter=loop._asyncgen_firstiter_hook,  # type: ignore[attr-defined]
        finalizer=loop._asyncgen_finalizer_hook,  # type: ignore[attr-defined]
    )


def take_restored() -> _Restoring | None:
    """What the last loads() rebuilt of an async job (None: it held none)."""
    global _RESTORING
    restored, _RESTORING = _RESTORING, None
    if restored is not None and restored.hooks is not None:
        sys.set_asyncgen_hooks(*restored.hooks)
        restored.hooks = None
    return restored


def discard_restored() -> None:
    restored = take_restored()
    if restored is not None:
        _PARKED.append(restored)  # half-built tasks: never collected
        restored.loop.close()


def _capturing() -> AsyncRunner:
    runner = runner_or_none()
    if runner is None:
        raise pickle.PicklingError(
            "an asyncio task or future outside an async job's run cannot be frozen"
        )
    return runner


def _is_wakeup(callback: object) -> bool:
    return getattr(callback, "__name__", None) == "task_wakeup" and isinstance(
        getattr(callback, "__self__", None), asyncio.Task
    )


def _context_of(obj: object) -> contextvars.Context | None:
    getter = getattr(obj, "get_context", None)
    if getter is not None:
        return getter()  # type: ignore[no-any-return]
    for ref in gc.get_referents(obj):
        if isinstance(ref, contextvars.Context):
            return ref
    return None


def _callbacks(obj: asyncio.Future[Any], what: str) -> list[tuple[str, Any]]:
    """A pending future's callbacks, in order: ("wake", task) for a task awaiting it
    (its first step after a restore re-makes that wakeup, in this order), ("call", fn)
    for a done-callback, ("call-in", (fn, context)) for one added with context variables
    set; a gather's own bookkeeping is re-made by its rebuild."""
    kept: list[tuple[str, Any]] = []
    for callback, context in getattr(obj, "_callbacks", None) or []:
        if getattr(callback, "__code__", None) is _GATHER_CALLBACK:
            continue
        if _is_wakeup(callback):
            kept.append(("wake", callback.__self__))
            continue
        worker = getattr(callback, "__self__", None)
        if isinstance(worker, threading.Thread) and type(worker).__module__.startswith("anyio."):
            # anyio's idle worker thread stopping with the task (its to_thread pool, kept
            # per event loop): the thread is this process's, and the restored loop starts
            # its own pool when it needs one. Any other thread is refused by name.
            continue
        if context is not None and len(context):  # runs with context variables set
            kept.append(("call-in", (callback, context)))
        else:
            kept.append(("call", callback))
    return kept


def _reduce_task(task: asyncio.Task[Any]) -> tuple[Any, ...]:
    runner = _capturing()
    info = runner.info.get(task)
    if info is None:
        raise pickle.PicklingError(
            f"task {task.get_name()} was not created by the job's event loop (asyncio.Task() "
            "called directly, or another loop's task); create it with asyncio.create_task()"
        )
    what = f"task {info.id} ({task.get_name()})"
    state: dict[str, Any] = {
        "info": vars(info).copy(),  # plain data: id, parent, index, spawned, effects
        "name": task.get_name(),
        "unretrieved": bool(getattr(task, "_log_traceback", False)),
        "outcome": _outcome(task),
    }
    if task.done():  # its coroutine's code, for the finished coroutine it shows (repr)
        coro = task.get_coro()
        if isinstance(coro, types.CoroutineType):
            module = _module_of_code(coro)
            if module is not None:
                state["coro_code"] = (code_ref(coro.cr_code, module), coro.__qualname__)
    if not task.done():
        if getattr(task, "_must_cancel", False):
            raise pickle.PicklingError(
                f"{what} is being cancelled; a snapshot cannot hold a cancellation in flight"
            )
        tracker = _foreign_tracker(task)
        if tracker is not None:
            raise pickle.PicklingError(
                f"{what} is tracked by {tracker}, which keeps a weak reference to the task "
                "(a library's task group, cancel scope or session, e.g. an anyio task group "
                "or an MCP client session held open): a restored task is a new object that "
                "library has never seen. Leave the library's `async with` block (close the "
                "session) before the snapshot, and open it again after it"
            )
        state["cancelling"] = task.cancelling()  # e.g. left at 1 by a TaskGroup (3.11)
        context = _context_of(task)
        if context is not None and len(context):  # context variables the task set
            state["context"] = context
        state["coro"] = task.get_coro()
        state["callbacks"] = _callbacks(task, what)
    return (_task_shell, (), state, None, None, _task_state)


def _foreign_tracker(task: asyncio.Task[Any]) -> str | None:
    """What, other than asyncio's own set of tasks, holds a weak reference to the task
    (a library's WeakKeyDictionary keyed by tasks), named as well as it can be; None."""
    registry = getattr(asyncio.tasks, "_scheduled_tasks", None)
    if registry is None:
        registry = getattr(asyncio.tasks, "_all_tasks", None)
    own = getattr(registry, "data", None)
    refs = weakref.getweakrefs(task)
    if len(refs) <= 1:
        return None  # the common case: asyncio's own registration only
    for ref in refs:
        holders = [h for h in gc.get_referrers(ref) if h is not own and h is not refs]
        for holder in holders:
            if isinstance(holder, types.FrameType):
                continue
            owner = next(
                (o for o in gc.get_referrers(holder) if getattr(o, "data", None) is holder),
                holder,
            )
            where = _refs.indexed(owner)
            if where is not None:
                name = f"{where[0]}.{where[1]}"
                harmless = _UNTRACKED_IF.get(name)
                if harmless is not None and harmless(owner, task):
                    continue
                return name
            return f"a {type(owner).__module__}.{type(owner).__qualname__}"
    return None


def _anyio_outside_scopes(states: Any, task: asyncio.Task[Any]) -> bool:
    """anyio keeps a TaskState for every task it has seen (a thread call, a cancel
    scope); one with no cancel scope open is made again, the same, the first time anyio
    meets the restored task. Inside a scope or task group it is not."""
    state = states.get(task)
    return state is not None and getattr(state, "cancel_scope", True) is None


# "module.attribute" of a library's registry of tasks -> whether its entry for a task
# is one the library makes again by itself for a new task (then not a tracker)
_UNTRACKED_IF: dict[str, Callable[[Any, asyncio.Task[Any]], bool]] = {
    "anyio._backends._asyncio._task_states": _anyio_outside_scopes,
}


def _reduce_future(future: asyncio.Future[Any]) -> tuple[Any, ...]:
    runner = _capturing()
    if future.get_loop() is not runner.loop:
        raise pickle.PicklingError("a future of another event loop cannot be frozen")
    state = {
        "unretrieved": bool(getattr(future, "_log_traceback", False)),
        "outcome": _outcome(future),
        "callbacks": _callbacks(future, repr(future)),
    }
    return (_future_shell, (), state, None, None, _future_state)


def _reduce_gathering(future: asyncio.Future[Any]) -> tuple[Any, ...]:
    runner = _capturing()
    if future.get_loop() is not runner.loop:
        raise pickle.PicklingError("a gather of another event loop cannot be frozen")
    children = list(getattr(future, "_children", None) or [])
    return_exceptions = False
    for child in children:
        for callback, _ in getattr(child, "_callbacks", None) or []:
            if getattr(callback, "__code__", None) is _GATHER_CALLBACK:
                cells = dict(
                    zip(_GATHER_CALLBACK.co_freevars, callback.__closure__ or (), strict=False)
                )
                if "return_exceptions" in cells:
                    return_exceptions = bool(cells["return_exceptions"].cell_contents)
    state = {
        "outcome": _outcome(future),
        "callbacks": _callbacks(future, "a gather") if not future.done() else [],
        "children": children,
        "return_exceptions": return_exceptions,
        "cancel_requested": bool(getattr(future, "_cancel_requested", False)),
    }
    return (_gathering_shell, (), state, None, None, _gathering_state)


def _reduce_future_iter(it: object) -> tuple[Any, ...]:
    future = it.future if isinstance(it, _FutureAwait) else _iter_future(it)
    if future is None:
        raise pickle.PicklingError("an await on a finished future iterator cannot be frozen")
    return (_future_await, (future,))


def _reduce_timer(handle: asyncio.TimerHandle) -> tuple[Any, ...]:
    runner = _capturing()
    if not is_sleep_timer(handle) or handle._loop is not runner.loop:  # type: ignore[attr-defined]
        raise pickle.PicklingError(
            f"a timer of the event loop ({_timer_kind(handle)}) cannot be frozen; let it "
            "fire or cancel it before the snapshot"
        )
    due = clock().time() + (handle.when() - runner.loop.time())  # on the wall clock
    return (_sleep_timer, (due, handle._args, handle.cancelled()))


def _reduce_loop(loop: JobLoop) -> tuple[Any, ...]:
    runner = _capturing()
    if loop is not runner.loop:
        raise pickle.PicklingError("another job's event loop cannot be frozen")
    return (_job_loop, ())


def _reduce_snapshot_point(point: SnapshotPoint) -> tuple[Any, ...]:
    if point.state not in ("waiting", "restored"):
        raise pickle.PicklingError(f"a snapshot() await point in state {point.state}")
    return (_snapshot_point, (point.label, point.meta))


def _reduce_wait_point(point: WaitPoint) -> tuple[Any, ...]:
    if point.state not in ("new", "waiting"):
        raise pickle.PicklingError(f"a wait await point in state {point.state}")
    return (_wait_point, (point.wait.as_dict(),))


def _reduce_effect_point(point: EffectPoint) -> tuple[Any, ...]:
    if point.state not in ("new", "held", "waiting"):
        raise pickle.PicklingError(
            f"an async effect ({point.spec.name} at {point.site}) is being sent; a snapshot "
            "waits for calls in flight, so this is a snapstate bug"
        )
    return (
        _effect_point,
        (
            point.declared or point.spec.fn,
            point.options,
            point.args,
            point.kwargs,
            point.key,
            point.site,
        ),
    )


@pinned("async_task")
def _task_shell() -> asyncio.Task[Any]:
    return _Task.__new__(_Task)


@pinned("async_task_state")
def _task_state(task: asyncio.Task[Any], state: dict[str, Any]) -> None:
    _restoring().tasks.append((task, state))


@pinned("async_future")
def _future_shell() -> asyncio.Future[Any]:
    return _Future.__new__(_Future)


@pinned("async_future_state")
def _future_state(future: asyncio.Future[Any], state: dict[str, Any]) -> None:
    _restoring().futures.append((future, state))


@pinned("async_gather")
def _gathering_shell() -> asyncio.Future[Any]:
    return _GatheringFuture.__new__(_GatheringFuture)  # type: ignore[no-any-return]


@pinned("async_gather_state")
def _gathering_state(future: asyncio.Future[Any], state: dict[str, Any]) -> None:
    _restoring().gathers.append((future, state))


@pinned("async_future_await")
def _future_await(future: asyncio.Future[Any]) -> _FutureAwait:
    return _FutureAwait(future)


@pinned("async_sleep_timer")
def _sleep_timer(due: float, args: tuple[Any, ...], cancelled: bool) -> asyncio.TimerHandle:
    """An asyncio.sleep()'s timer on the restored loop, due at the same wall clock time."""
    loop = _restoring().loop
    handle = loop.call_at(loop.time() + max(0.0, due - clock().time()), _SLEEP_CALLBACK, *args)
    if cancelled:
        handle.cancel()
    return handle


@pinned("async_job_loop")
def _job_loop() -> JobLoop:
    return _restoring().loop


@pinned("async_snapshot_point")
def _snapshot_point(label: str | None, meta: dict[str, Any] | None) -> SnapshotPoint:
    point = SnapshotPoint(label, meta)
    point.state, point.restored = "restored", True
    return point


@pinned("async_wait_point")
def _wait_point(wait: dict[str, Any]) -> WaitPoint:
    point = WaitPoint(_waits.Wait.from_dict(wait))
    point.restored = True
    return point


@pinned("async_effect_point")
def _effect_point(
    effect_fn: Callable[..., Any],
    options: dict[str, Any] | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    key: str | None,
    site: str,
) -> EffectPoint:
    spec = async_spec_of(effect_fn, options, site)
    declared = effect_fn if options is None else None
    point = EffectPoint(spec, args, kwargs, key, site, declared, options)
    point.restored = True
    return point


def _restore_gather(gathering: asyncio.Future[Any], st: dict[str, Any], loop: JobLoop) -> None:
    _Future.__init__(gathering, loop=loop)
    gathering._children = st["children"]  # type: ignore[attr-defined]
    gathering._cancel_requested = st["cancel_requested"]  # type: ignore[attr-defined]
    if st["outcome"] is not None:
        _set_outcome(gathering, st["outcome"])
        return
    # The same gather over the same children, its outcome copied to the restored one
    # (the object the awaiting coroutine holds).
    inner = asyncio.gather(*st["children"], return_exceptions=st["return_exceptions"])

    def copy(done: asyncio.Future[Any]) -> None:
        if not done.cancelled():
            done.exception()  # retrieved here: its outcome is the restored gather's
        if gathering.done():
            return
        outcome = _outcome(done)
        assert outcome is not None
        _set_outcome(gathering, outcome)

    inner.add_done_callback(copy)


def _register() -> None:
    loop = asyncio.new_event_loop()
    try:
        future = loop.create_future()
        it = future.__await__()
        _dispatch.register_reducer(type(it), _reduce_future_iter)
        it.close()
    finally:
        loop.close()
    _dispatch.register_reducer(_FutureAwait, _reduce_future_iter)
    _dispatch.register_reducer(_Task, _reduce_task)
    _dispatch.register_reducer(_Future, _reduce_future)
    _dispatch.register_reducer(_GatheringFuture, _reduce_gathering)
    _dispatch.register_reducer(JobLoop, _reduce_loop)
    _dispatch.register_reducer(asyncio.TimerHandle, _reduce_timer)
    _dispatch.register_reducer(SnapshotPoint, _reduce_snapshot_point)
    _dispatch.register_reducer(EffectPoint, _reduce_effect_point)
    _dispatch.register_reducer(WaitPoint, _reduce_wait_point)


_register()
