"""Pickling an async job's tasks: one pickle holds the pending tasks.

Each task's coroutine chain is reduced like a suspended generator (runtime/_reducers.py),
what each coroutine awaits sits on its value stack; tasks, futures and gathers are saved
as shells plus state (pickle's state setter), collected while loading (`begin_restore`,
`take_restored`) and initialized after the load on a fresh JobLoop. snapstate's await
points and `asyncio.sleep` timers are saved as data; a task held by another library's
tracker is refused, naming it.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import pickle
import sys
import threading
import types
import weakref
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._abi import pinned
from ..serializers import _dispatch, _refs
from ..serializers._codeid import code_ref, find_code
from . import _waits
from ._async_loop import (
    GATHER_CALLBACK,
    PARKED,
    SLEEP_CALLBACK,
    FutureAwait,
    FutureType,
    GatheringFuture,
    JobLoop,
    TaskType,
    frame_and_awaited,
    is_sleep_timer,
    iter_future,
    outcome_of,
    set_outcome,
    timer_kind,
)
from ._clock import clock
from ._effects_async import EffectPoint, async_spec_of
from ._layout import replace_stack_top
from ._points import SnapshotPoint, runner_or_none
from ._waits import WaitPoint

if TYPE_CHECKING:
    from ._async import AsyncRunner

    pass

__all__ = [
    "begin_restore",
    "take_restored",
    "discard_restored",
    "Restoring",
    "await_with_future_iters",
    "finished_coroutine_of",
    "restore_gather",
]


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


def finished_coroutine_of(saved: tuple[Any, str] | None) -> Coroutine[Any, Any, Any]:
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


def await_with_future_iters(coro: Any) -> None:
    """In a restored chain, what awaits a future holds asyncio's own future iterator
    again (as before the snapshot), not the FutureAwait the load put there: errors
    and cancellations pass through it with no snapstate frame in their tracebacks."""
    seen: set[int] = set()
    while coro is not None and id(coro) not in seen:
        seen.add(id(coro))
        link = frame_and_awaited(coro)
        if link is None:
            return
        frame, awaited = link
        if isinstance(awaited, FutureAwait) and frame is not None:
            replace_stack_top(frame, awaited, awaited.future.__await__())
            return
        coro = awaited


# ------------------------------------------------------------------------ pickling
@dataclass
class Restoring:
    loop: JobLoop
    tasks: list[tuple[asyncio.Task[Any], dict[str, Any]]]
    futures: list[tuple[asyncio.Future[Any], dict[str, Any]]]
    gathers: list[tuple[asyncio.Future[Any], dict[str, Any]]]
    hooks: Any = None  # the async generator hooks to put back after the load


_RESTORING: Restoring | None = None


def _restoring() -> Restoring:
    global _RESTORING
    if _RESTORING is None:
        _RESTORING = Restoring(JobLoop(), [], [], [])
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


def take_restored() -> Restoring | None:
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
        PARKED.append(restored)  # half-built tasks: never collected
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
        if getattr(callback, "__code__", None) is GATHER_CALLBACK:
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
        "outcome": outcome_of(task),
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
        "outcome": outcome_of(future),
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
            if getattr(callback, "__code__", None) is GATHER_CALLBACK:
                cells = dict(
                    zip(GATHER_CALLBACK.co_freevars, callback.__closure__ or (), strict=False)
                )
                if "return_exceptions" in cells:
                    return_exceptions = bool(cells["return_exceptions"].cell_contents)
    state = {
        "outcome": outcome_of(future),
        "callbacks": _callbacks(future, "a gather") if not future.done() else [],
        "children": children,
        "return_exceptions": return_exceptions,
        "cancel_requested": bool(getattr(future, "_cancel_requested", False)),
    }
    return (_gathering_shell, (), state, None, None, _gathering_state)


def _reduce_future_iter(it: object) -> tuple[Any, ...]:
    future = it.future if isinstance(it, FutureAwait) else iter_future(it)
    if future is None:
        raise pickle.PicklingError("an await on a finished future iterator cannot be frozen")
    return (_future_await, (future,))


def _reduce_timer(handle: asyncio.TimerHandle) -> tuple[Any, ...]:
    runner = _capturing()
    if not is_sleep_timer(handle) or handle._loop is not runner.loop:  # type: ignore[attr-defined]
        raise pickle.PicklingError(
            f"a timer of the event loop ({timer_kind(handle)}) cannot be frozen; let it "
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
    return TaskType.__new__(TaskType)


@pinned("async_task_state")
def _task_state(task: asyncio.Task[Any], state: dict[str, Any]) -> None:
    _restoring().tasks.append((task, state))


@pinned("async_future")
def _future_shell() -> asyncio.Future[Any]:
    return FutureType.__new__(FutureType)


@pinned("async_future_state")
def _future_state(future: asyncio.Future[Any], state: dict[str, Any]) -> None:
    _restoring().futures.append((future, state))


@pinned("async_gather")
def _gathering_shell() -> asyncio.Future[Any]:
    return GatheringFuture.__new__(GatheringFuture)  # type: ignore[no-any-return]


@pinned("async_gather_state")
def _gathering_state(future: asyncio.Future[Any], state: dict[str, Any]) -> None:
    _restoring().gathers.append((future, state))


@pinned("async_future_await")
def _future_await(future: asyncio.Future[Any]) -> FutureAwait:
    return FutureAwait(future)


@pinned("async_sleep_timer")
def _sleep_timer(due: float, args: tuple[Any, ...], cancelled: bool) -> asyncio.TimerHandle:
    """An asyncio.sleep()'s timer on the restored loop, due at the same wall clock time."""
    loop = _restoring().loop
    handle = loop.call_at(loop.time() + max(0.0, due - clock().time()), SLEEP_CALLBACK, *args)
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


def restore_gather(gathering: asyncio.Future[Any], st: dict[str, Any], loop: JobLoop) -> None:
    FutureType.__init__(gathering, loop=loop)
    gathering._children = st["children"]  # type: ignore[attr-defined]
    gathering._cancel_requested = st["cancel_requested"]  # type: ignore[attr-defined]
    if st["outcome"] is not None:
        set_outcome(gathering, st["outcome"])
        return
    # The same gather over the same children, its outcome copied to the restored one
    # (the object the awaiting coroutine holds).
    inner = asyncio.gather(*st["children"], return_exceptions=st["return_exceptions"])

    def copy(done: asyncio.Future[Any]) -> None:
        if not done.cancelled():
            done.exception()  # retrieved here: its outcome is the restored gather's
        if gathering.done():
            return
        outcome = outcome_of(done)
        assert outcome is not None
        set_outcome(gathering, outcome)

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
    _dispatch.register_reducer(FutureAwait, _reduce_future_iter)
    _dispatch.register_reducer(TaskType, _reduce_task)
    _dispatch.register_reducer(FutureType, _reduce_future)
    _dispatch.register_reducer(GatheringFuture, _reduce_gathering)
    _dispatch.register_reducer(JobLoop, _reduce_loop)
    _dispatch.register_reducer(asyncio.TimerHandle, _reduce_timer)
    _dispatch.register_reducer(SnapshotPoint, _reduce_snapshot_point)
    _dispatch.register_reducer(EffectPoint, _reduce_effect_point)
    _dispatch.register_reducer(WaitPoint, _reduce_wait_point)


_register()
