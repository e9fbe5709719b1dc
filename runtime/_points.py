"""snapstate's await points in an async job: awaitables that are their own iterators.

`await snapshot()` returns a SnapshotPoint, `await sleep()` (any wait) a WaitPoint
(runtime/_waits.py), `await some_async_effect()` an EffectPoint (runtime/_effects_async.py).
None of them runs a frame of snapstate's own in the task's chain of coroutines, so a
snapshot holds only the agent's frames; what a point asks of the job it asks of the job's
async runner (runtime/_async.py), found through the running job (runtime/_context.py):
never by importing the runner.
"""

from __future__ import annotations

import asyncio
import warnings
from typing import TYPE_CHECKING, Any

from .._errors import SnapshotError
from . import _context, _pins
from ._switch import SnapshotInfo

if TYPE_CHECKING:
    from ._async import AsyncRunner

__all__ = ["Point", "SnapshotPoint", "runner_or_none", "point_runner", "running_runner"]


class Point:
    """An awaitable that is its own iterator: `await point` runs no snapstate frame."""

    wake: asyncio.Future[Any] | None = None
    state = "new"
    restored = False  # rebuilt by a restore: awaited when its task next runs

    def __del__(self) -> None:
        if self.state == "new" and not self.restored:  # as Python warns of a coroutine
            warnings.warn(
                f"{self!r} was never awaited: nothing was done (add `await`)",
                RuntimeWarning,
                stacklevel=1,
                source=self,
            )

    def __await__(self) -> Point:
        return self

    def __iter__(self) -> Point:
        return self

    def __next__(self) -> Any:
        return self.send(None)

    def send(self, value: Any) -> Any:
        raise NotImplementedError

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        exc = typ if isinstance(typ, BaseException) else (typ() if val is None else val)
        self._withdraw()
        raise exc

    def close(self) -> None:
        self._withdraw()

    def _withdraw(self) -> None:
        pass

    def _block(self, wake: asyncio.Future[Any]) -> asyncio.Future[Any]:
        self.wake = wake
        wake._asyncio_future_blocking = True  # what Future.__await__ does
        return wake


class SnapshotPoint(Point):
    """`await snapshot(label, meta=...)`."""

    def __init__(self, label: str | None, meta: dict[str, Any] | None) -> None:
        self.label, self.meta = label, meta
        self.state = "new"  # new -> waiting -> done; "restored" after a restore

    def __repr__(self) -> str:
        return f"snapshot({self.label!r})"

    def send(self, value: Any) -> Any:
        if self.state == "waiting":
            assert self.wake is not None
            if not self.wake.done():
                return self._block(self.wake)
            self.state = "done"
            raise StopIteration(self.wake.result())
        if self.state == "restored":
            self.state = "done"
            raise StopIteration(running_runner().resumed_info(self.label, self.meta))
        if self.state != "new":
            raise RuntimeError("cannot reuse an already awaited snapshot()")
        runner = point_runner(f"snapshot({self.label!r})")
        if runner is None:  # plain Python (asyncio.run without snaprun): nothing to do
            self.state = "done"
            raise StopIteration(SnapshotInfo(False, 0.0, None, self.label, self.meta, _pins.pins()))
        self.state = "waiting"
        return self._block(runner.request_freeze(self))

    def _withdraw(self) -> None:
        runner = runner_or_none()
        if self.state == "waiting" and runner is not None:
            runner.withdraw(self)
        self.state = "done"


def runner_or_none() -> AsyncRunner | None:
    job = _context.active_job()
    runner = getattr(job, "_async", None) if job is not None else None
    return runner


def point_runner(what: str, error: type[Exception] = SnapshotError) -> AsyncRunner | None:
    """The job's runner when an await point runs on the job's own loop; None in plain
    Python (no job); refused in any other event loop while a job runs (its await could
    be neither frozen nor recorded)."""
    job = _context.active_job()
    if job is None:
        return None
    runner = job._async
    try:
        loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if runner is None or loop is not runner.loop:
        raise error(
            f"{what} was awaited in an event loop job {job.job_id} does not own (asyncio.run() "
            "called inside the job, or another thread's loop): it can be neither frozen nor "
            "recorded, so nothing was done. Make main() an async def and await it in the "
            "job's own coroutines"
        )
    return runner


def running_runner() -> AsyncRunner:
    runner = runner_or_none()
    if runner is None:
        raise RuntimeError("snapstate's await points run only in a job's event loop")
    return runner
