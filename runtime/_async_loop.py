"""The event loop of an async job, and asyncio's objects as the job reads them.

`JobLoop` (an asyncio selector loop) names every task by its spawn path (`TaskInfo`:
"main", "1", "1.2", ...) so the ledger gives a task's effects the same identities in
any run, and lets the runner act between two iterations. The helpers below read a
future's outcome and a coroutine chain's links without disturbing them (no error
marked retrieved, no cancellation message taken).
"""

from __future__ import annotations

import asyncio
import gc
import types
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._errors import SnapshotError
from ._reducers import ASEND_TYPE
from ._settings import env_seconds

if TYPE_CHECKING:
    from ._async import AsyncRunner

    pass

__all__ = [
    "JobLoop",
    "TaskInfo",
    "FutureAwait",
    "MAIN",
    "DEFAULT_SETTLE",
    "INTERNAL_BASE",
    "PARKED",
    "settle_seconds",
    "is_sleep_timer",
    "timer_kind",
    "frame_and_awaited",
    "iter_future",
    "outcome_of",
    "set_outcome",
    "set_if_pending",
    "set_error_if_pending",
]

MAIN = "main"
DEFAULT_SETTLE = 30.0

# Runs that stopped with tasks still pending (a hibernation, a park): their loops and
# tasks are kept forever, never collected, so no agent code (a finally block run by a
# coroutine's close()) runs after the run stopped.
PARKED: list[object] = []

FutureType: type[asyncio.Future[Any]] = asyncio.Future
TaskType: type[asyncio.Task[Any]] = asyncio.Task
GatheringFuture: Any = asyncio.tasks._GatheringFuture  # type: ignore[attr-defined]
GATHER_CALLBACK = next(
    c
    for c in asyncio.tasks.gather.__code__.co_consts
    if isinstance(c, types.CodeType) and c.co_name == "_done_callback"
)


def settle_seconds() -> float:
    """SNAPSTATE_ASYNC_SETTLE: how long a snapshot waits for every task to reach an
    await point (checked with the other settings, runtime/_api.py)."""
    return env_seconds("SNAPSTATE_ASYNC_SETTLE", DEFAULT_SETTLE, 86400)


# ------------------------------------------------------------------------ the loop
@dataclass
class TaskInfo:
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
            kinds = sorted({timer_kind(h) for h in timers})
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


SLEEP_CALLBACK = asyncio.futures._set_result_unless_cancelled  # type: ignore[attr-defined]


def is_sleep_timer(handle: asyncio.TimerHandle) -> bool:
    """The timer of an asyncio.sleep(): frozen with the job (it ends at the same wall
    clock time after a restore, at once if that has passed)."""
    return handle._callback is SLEEP_CALLBACK  # type: ignore[attr-defined]


def timer_kind(handle: asyncio.TimerHandle) -> str:
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


def frame_and_awaited(obj: Any) -> tuple[types.FrameType | None, Any] | None:
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


def set_if_pending(future: asyncio.Future[Any], value: Any = None) -> None:
    if not future.done():
        future.set_result(value)


def set_error_if_pending(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


def set_outcome(
    future: asyncio.Future[Any], outcome: tuple[str, Any], unretrieved: bool = False
) -> None:
    kind, value = outcome
    if kind == "result":
        FutureType.set_result(future, value)
    elif kind == "error":
        FutureType.set_exception(future, value)
        if not unretrieved:  # its error was retrieved: not logged again at exit
            future._log_traceback = False
    else:
        FutureType.cancel(future, msg=value)


def cancel_message(future: asyncio.Future[Any]) -> Any:
    """The message of a cancelled future's CancelledError (cancel(msg=...)), read
    without taking it (_make_cancelled_error() would: the run goes on)."""
    for ref in gc.get_referents(future):
        if isinstance(ref, asyncio.CancelledError):
            return ref.args[0] if ref.args else None
    return getattr(future, "_cancel_message", None)


def outcome_of(future: asyncio.Future[Any]) -> tuple[str, Any] | None:
    if not future.done():
        return None
    if future.cancelled():
        return ("cancelled", cancel_message(future))
    # read without marking an error retrieved (exception() would: the run goes on)
    error = future._exception
    return ("error", error) if error is not None else ("result", future._result)  # type: ignore[attr-defined]


class FutureAwait:
    """What `await future` holds on the awaiting coroutine's value stack, as a Python
    object: asyncio's C FutureIter has the same behaviour (Future.__await__)."""

    def __init__(self, future: asyncio.Future[Any]) -> None:
        self.future = future

    def __iter__(self) -> FutureAwait:
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


def iter_future(it: object) -> asyncio.Future[Any] | None:
    for ref in gc.get_referents(it):
        if isinstance(ref, asyncio.Future):
            return ref
    return None
