"""Several tasks in one job: spawn(), gather(), Task, and the hub's scheduler.

A task is a greenlet whose parent is the job's hub (the greenlet running Job._loop).
The hub is a small deterministic scheduler: a FIFO of runnable tasks; a task runs until
it reaches a runtime switch point, then the hub resumes the next one. Switch points:
snapshot(), a wait_point() wait (sleep(), request_approval(), ...), gather() /
Task.result() (a join), and an effect's call (its request runs on a thread pool while
the task is switched out). spawn() does not switch: the new task is appended to the
FIFO and first runs when its spawner reaches a switch point. Tasks made runnable
together (effects completed in one collection, waits ready in one poll) are resumed in
task order (main first, then by id as created). While calls are in flight the hub polls
the tasks' waits too (a timer due meanwhile wakes its task), except while a snapshot is
pending: then waiting tasks stay at their waits and are frozen there.

Identities (deterministic whatever order effects complete in):
  - the main task is "main"; the n-th task a task spawns is "<n>" when main spawned it,
    "<parent>.<n>" otherwise ("1", "2", "1.1", ...): its spawn path;
  - the main task keeps the ledger's ordinals and keys exactly as a job without tasks:
    ordinal = the job's counter (saved as state["effects"]), key = identity_key(ordinal,
    explicit), rows looked up by ordinal;
  - a spawned task counts its own effects and values (now()/random()/uuid4()) 1, 2, ...:
    the n-th has the identity "<task id>#<n>", its key is Ledger.task_key("<id>#<n>")
    (an explicit key=... is used as in main) and its row is looked up BY KEY. The
    catalog's ordinal column of such a row is only a storage slot, allocated at insert
    as max+1 within [TASK_ORDINAL_BASE, ...) (2**40: never reached by a main task), so
    it may differ between two runs; `snaprun reconcile JOB ORDINAL` takes it as shown
    by `snaprun effects`, which also shows the task's identity.
  - fault points (SNAPSTATE_FAULT) name a spawned task's effect by that identity:
    `effect-after-send:2#1` is task 2's first effect; a number names a main ordinal.

Snapshots: snapshot() in any task (or a hibernation) freezes the job only when every
task is paused at a switch point: the hub first runs the runnable tasks to their next
switch point and waits for the effect calls in flight to complete and be recorded
(each task records its own outcome, then runs on to its next switch point). Tasks keep
dispatching new effects while a snapshot waits: after MAX_EFFECTS_DURING_FREEZE of
them the snapshot is refused (SnapshotError at the snapshot() call; the job carries
on). Every task's stack is captured down to its bootstrap, with the scheduler's state
(ids, parents, spawn and effect counters, who joins whom, results and errors of
finished tasks, each task's pending wait) in the same single pickle as the rest of the
state (state["tasks"]); main's frames stay in state["frames"]. A job that never spawned
a task keeps exactly the old layout and code path.

Effects run concurrently only in a job that has spawned a task (a job without tasks
calls them inline, as before): the dispatch is recorded in the task's greenlet, the
call runs on a bounded thread pool (SNAPSTATE_EFFECT_THREADS, default 8), the outcome is
recorded back in the task's greenlet. An effect function therefore runs on a pool
thread: it must not call snapstate (effects, snapshot(), now()) itself. A Retry's backoff
still sleeps in the task's greenlet, holding the hub (the other calls in flight go on).

`snaprun fork` copies the main task's rows up to the fork point; the rows of spawned
tasks (ordinals from TASK_ORDINAL_BASE) are not copied: the fork's tasks, restored past
them, never look them up again, and their new actions get the fork's own keys.

When main returns, the job runs its other tasks to their end before it is done; an
error of a task nobody collected is reported on stderr. When main raises, the run
ends with its error at once (other tasks stay where they are; calls in flight finish,
their rows stay dispatched, as after a crash). gather() returns the results in argument
order; it waits for every task to end, then raises the error of the first failed task
in argument order: deterministic, where asyncio.gather (by default) raises the first
error to occur; as there, no task is cancelled.
"""

from __future__ import annotations

import concurrent.futures
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import greenlet

from .._abi import pinned
from .._errors import SnapshotError
from . import _context
from ._effect_spec import TASK_ORDINAL_BASE
from ._settings import env_int
from ._switch import SWITCH_CODES
from ._waits import wait_api

if TYPE_CHECKING:
    pass

__all__ = [
    "Task",
    "spawn",
    "gather",
    "TASK_ORDINAL_BASE",
    "EFFECT_THREADS_VARIABLE",
    "effect_threads",
]

T = TypeVar("T")

EFFECT_THREADS_VARIABLE = "SNAPSTATE_EFFECT_THREADS"
_DEFAULT_EFFECT_THREADS = 8
MAX_EFFECTS_DURING_FREEZE = 100

MAIN = "main"


def effect_threads() -> int:
    """How many effect calls may be in flight at once (SNAPSTATE_EFFECT_THREADS)."""
    return env_int(EFFECT_THREADS_VARIABLE, _DEFAULT_EFFECT_THREADS, 1, 256, "threads")


# ------------------------------------------------------------------------ handles
class Task:
    """A task spawn() started: `id` (its spawn path), done(), result().

    In a snapshot a Task is saved as its id alone (restored by a pinned function), so
    agent code may keep Task objects in locals and lists."""

    __slots__ = ("id", "_outcome")

    def __init__(self, task_id: str) -> None:
        self.id: str = task_id
        # plain Python only: ("value", v) or ("error", exc), computed by spawn()
        self._outcome: tuple[str, Any] | None = None

    def __repr__(self) -> str:
        return f"<snapstate.Task {self.id}{' done' if self.done() else ''}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Task) and other.id == self.id

    def __hash__(self) -> int:
        return hash(("snapstate.Task", self.id))

    def __reduce__(self) -> tuple[Callable[[str], Task], tuple[str]]:
        return (_task_handle, (self.id,))

    def done(self) -> bool:
        """True once the task returned or raised."""
        if self._outcome is not None:
            return True
        job = _context.active_job()
        sched = job._scheduler if job is not None else None
        if sched is None:
            return False
        state = sched.tasks.get(self.id)
        return state is not None and state.status in ("done", "failed")

    @wait_api
    def result(self) -> Any:  # the task's return value
        """Wait for the task; returns its value or raises its error."""
        if _context.active_job() is None:
            return _plain_outcome(self)
        return _join_point((self.id,), True)


@pinned("task_handle")
def _task_handle(task_id: str) -> Task:
    return Task(str(task_id))


def _plain_outcome(task: Task) -> Any:
    if task._outcome is None:
        raise RuntimeError(
            f"task {task.id} belongs to a job that is not running in this process; "
            "call result() from the job's own code"
        )
    kind, value = task._outcome
    if kind == "error":
        raise value
    return value


_PLAIN_PATH: list[list[int | str]] = [["", 0]]  # plain Python: (task id, spawned) stack


def spawn(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Task:
    """Start fn(*args, **kwargs) as a task of the job; returns its Task at once.

    In a job the task first runs when the caller reaches a switch point (an effect,
    snapshot(), a wait, gather()). In plain Python fn runs right here, to its end (its
    error is kept for result()/gather())."""
    if not callable(fn):
        raise TypeError(f"spawn() needs a function, not {type(fn).__name__}")
    job = _context.active_job()
    if job is None:
        parent = _PLAIN_PATH[-1]
        parent[1] = int(parent[1]) + 1
        task_id = f"{parent[0]}.{parent[1]}" if parent[0] else str(parent[1])
        task = Task(task_id)
        _PLAIN_PATH.append([task_id, 0])
        try:
            task._outcome = ("value", fn(*args, **kwargs))
        except Exception as exc:
            task._outcome = ("error", exc)
        finally:
            _PLAIN_PATH.pop()
        return task
    if job._async is not None:
        raise TypeError(
            "spawn() starts a greenlet task; an async job's tasks are asyncio tasks: use "
            "asyncio.create_task(), asyncio.gather() or a TaskGroup"
        )
    sched = job._scheduler
    assert sched is not None  # set by Job._loop while the job runs
    return sched.spawn(fn, args, kwargs)


@wait_api
def gather(*tasks: Task) -> list[Any]:
    """Wait for every task; returns their results in argument order. If any failed,
    raises the error of the first failed task in argument order once all have ended
    (asyncio.gather raises the first to occur; this order does not depend on timing).
    No task is cancelled; each result stays available through result()."""
    for task in tasks:
        if not isinstance(task, Task):
            raise TypeError(
                f"gather() takes Task objects (from spawn()), not {type(task).__name__}"
            )
    if _context.active_job() is None:
        return [_plain_outcome(task) for task in tasks]
    return _join_point(tuple(task.id for task in tasks), False)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class JoinRequest:
    ids: tuple[str, ...]
    single: bool
    handled: BaseException | None


@dataclass(frozen=True)
class EffectRequest:
    future: concurrent.futures.Future[Any]


@dataclass(frozen=True)
class TaskEnd:
    value: object
    error: BaseException | None


def _join_point(ids: tuple[str, ...], single: bool) -> Any:
    """A task's side of a join: switch to the hub until the tasks are done."""
    job = _context.active_job()
    assert job is not None and job._hub is not None  # the callers check
    if not job._is_task(greenlet.getcurrent()):
        raise SnapshotError(
            "gather()/result() was called from a greenlet or thread the job did not start; "
            "call it from the job's tasks"
        )
    return job._hub.switch(JoinRequest(ids, single, sys.exception()))


SWITCH_CODES.add(_join_point.__code__)


def task_bootstrap(
    fn: Callable[..., object], args: tuple[object, ...], kwargs: dict[str, object]
) -> TaskEnd:
    try:
        return TaskEnd(fn(*args, **kwargs), None)
    except Exception as exc:
        return TaskEnd(None, exc)
