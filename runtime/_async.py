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
import contextvars
import functools
import gc
import time
import types
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import greenlet

from .._errors import EffectOutsideJob, SnapshotError
from ..resources._registry import close_all_for_snapshot
from . import _agent, _pins, _waits
from ._async_describe import chain_objects, describe_task, job_holder, owner_name
from ._async_loop import (
    INTERNAL_BASE,
    MAIN,
    PARKED,
    FutureAwait,
    FutureType,
    GatheringFuture,
    JobLoop,
    TaskInfo,
    is_sleep_timer,
    set_error_if_pending,
    set_if_pending,
    set_outcome,
    settle_seconds,
)
from ._async_pickle import Restoring, await_with_future_iters, finished_coroutine_of, restore_gather
from ._clock import clock
from ._effects_async import EffectPoint
from ._layout import set_task_cancelling
from ._points import SnapshotPoint
from ._switch import FreezeRequest, SnapshotInfo
from ._waits import WaitPoint

if TYPE_CHECKING:
    from ._job import Job

__all__ = [
    "AsyncRunner",
    "entry",
    "resume_job",
]


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
        self.info: dict[asyncio.Task[Any], TaskInfo] = {}
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
            info = TaskInfo(MAIN, None, self.count)
            self.count += 1
        elif self.creating_internal():
            self.internal += 1
            current = asyncio.current_task(self.loop)
            parent = self.info.get(current) if current is not None else None
            info = TaskInfo(
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
            info = TaskInfo(tid, parent.id, self.count)
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

    def ledger_task(self) -> TaskInfo | None:
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
        handle = self.loop.call_later(seconds, set_if_pending, wake)
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
            set_if_pending(wake)  # in task order, as a restore sends them

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
                set_error_if_pending(f.wake, SnapshotError(str(exc)))
            self._end_freeze()
            return
        for f in freezers:
            set_if_pending(
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
                set_error_if_pending(wake, SnapshotError(str(exc)))
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
            if type(waiter) is GatheringFuture or self._is_own_wake(waiter):
                continue
            if type(waiter) is not FutureType:
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
            if isinstance(holder, FutureAwait) or type(holder).__name__ == "FutureIter":
                continue
            for ref in gc.get_referents(holder):
                if id(ref) in held and ref is waiting[id(ref)][1]:
                    held[id(ref)].append(holder)
        for key, (task, _fut) in waiting.items():
            own = {id(obj) for obj in chain_objects(task.get_coro())}
            holders = [h for h in held[key] if id(h) not in own]  # not the awaiting code
            if not holders or not any(job_holder(h, agent) for h in holders):
                what = ", ".join(sorted({owner_name(h) for h in holders})) or "nothing"
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
            set_error_if_pending(f.wake, SnapshotError(message))
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
                PARKED.append((loop, list(self.order), self))
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
        self, restored: Restoring, state: dict[str, Any], created_at: float, seq: int
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
                info = TaskInfo(**st["info"])
                context = st.get("context") or contextvars.Context()
                if st["outcome"] is None:
                    task.__init__(st["coro"], loop=loop, name=st["name"], context=context)  # type: ignore[misc]
                    first_step[task] = loop.collecting[-1]
                    if st.get("cancelling"):
                        set_task_cancelling(task, int(st["cancelling"]))
                else:
                    placeholder = finished_coroutine_of(st.get("coro_code"))
                    task.__init__(placeholder, loop=loop, name=st["name"], context=context)  # type: ignore[misc]
                    loop.collecting[-1].cancel()  # a finished task takes no step
                    placeholder.close()
                    set_outcome(task, st["outcome"], st.get("unretrieved", False))
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
                FutureType.__init__(future, loop=loop)
                if st["outcome"] is not None:
                    set_outcome(future, st["outcome"], st.get("unretrieved", False))
            for gathering, st in restored.gathers:
                restore_gather(gathering, st, loop)
            for task in first_step:
                await_with_future_iters(task.get_coro())
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
    job: Job, restored: Restoring, state: dict[str, Any], created_at: float, seq: int
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
