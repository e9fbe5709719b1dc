"""The hub's scheduler of a job's greenlet tasks (the tasks themselves, their handles
and identities: runtime/_tasks.py).

The hub (the greenlet running Job._loop) is a small deterministic scheduler: a FIFO of
runnable tasks; a task runs until it reaches a runtime switch point, then the hub
resumes the next one. Tasks made runnable together are resumed in task order (main
first, then by id as created). Effects of a job with tasks run on a bounded thread pool
while their task is switched out; a snapshot waits until every task is paused at a
switch point and the calls in flight are recorded, then captures every task's stack and
the scheduler's state in the job's one pickle (state["tasks"]). See runtime/_tasks.py
for the whole contract.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import greenlet

from .._errors import SnapshotError
from ..resources._registry import close_all_for_snapshot
from . import _pins, _waits
from ._clock import clock
from ._effect_spec import on_pool
from ._switch import PARKED_AGENTS, Done, FreezeRequest, SnapshotInfo, Stop
from ._tasks import (
    MAIN,
    MAX_EFFECTS_DURING_FREEZE,
    EffectRequest,
    JoinRequest,
    Task,
    TaskEnd,
    effect_threads,
    task_bootstrap,
)
from ._waits import WaitRequest, wait_api

if TYPE_CHECKING:
    from ._frames import FrameRecord
    from ._job import Job

__all__ = ["Scheduler"]

T = TypeVar("T")


# ------------------------------------------------------------------------ the hub
@dataclass
class _TaskState:
    id: str
    parent: str | None
    glet: greenlet.greenlet | None
    index: int  # creation order (main 0)
    spawned: int = 0
    effects: int = 0
    status: str = "runnable"  # runnable running effect wait join snapshot done failed
    start: tuple[Callable[..., object], tuple[object, ...], dict[str, object]] | None = None
    deliver: tuple[str, Any] | None = None  # ("value", v) or ("throw", exc)
    wait: _waits.Wait | None = None
    handled: BaseException | None = None
    join: tuple[tuple[str, ...], bool] | None = None
    label: str | None = None
    meta: dict[str, Any] | None = None  # snapshot(meta=...), checked by runtime/_pins.py
    result: object = None
    error: BaseException | None = None
    collected: bool = False
    frames: list[FrameRecord] = field(default_factory=list)  # restored, until started
    context: contextvars.Context | None = None  # its context variables, when restored


def _context_of(state: _TaskState) -> contextvars.Context | None:
    """The task's context when it holds values (a task not run since its restore: the
    context it was given)."""
    if state.status in ("done", "failed") or state.glet is None:
        return None
    context = state.glet.gr_context
    return context if context is not None and len(context) else None


class _Stopped(Exception):
    """The run stopped (a Stop message): carries the message out of the loop."""

    def __init__(self, stop: Stop) -> None:
        super().__init__(stop.reason)
        self.stop = stop


class Scheduler:
    """The hub's scheduler for one run of a job (see the module docstring)."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.tasks: dict[str, _TaskState] = {}
        self.by_glet: dict[greenlet.greenlet, _TaskState] = {}
        self.runnable: deque[_TaskState] = deque()
        self.inflight: dict[concurrent.futures.Future[Any], _TaskState] = {}
        self.freezers: list[_TaskState] = []
        self.active = False  # a task was spawned (or restored): the general path
        self.pool: concurrent.futures.ThreadPoolExecutor | None = None
        self.dirty = True  # a task ran since the snapshot restored
        self._during_freeze = 0
        self._restored: list[dict[str, Any]] | None = None
        self._resumed: tuple[float, int] | None = None

    # ---------------------------------------------------------------- tasks
    def current(self) -> _TaskState | None:
        return self.by_glet.get(greenlet.getcurrent())

    def spawned_task(self) -> _TaskState | None:
        """The spawned task running here (None in main or outside the job's tasks)."""
        state = self.current()
        return state if state is not None and state.id != MAIN else None

    def _add(self, state: _TaskState) -> None:
        self.tasks[state.id] = state
        if state.glet is not None:
            self.by_glet[state.glet] = state

    def spawn(
        self, fn: Callable[..., object], args: tuple[object, ...], kwargs: dict[str, object]
    ) -> Task:
        parent = self.current()
        if parent is None:
            raise SnapshotError(
                "spawn() was called from a greenlet or thread the job did not start; call it "
                "from the job's tasks"
            )
        if self.pool is None:
            self.pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=effect_threads(), thread_name_prefix="snapstate-effect"
            )
        parent.spawned += 1
        task_id = str(parent.spawned) if parent.id == MAIN else f"{parent.id}.{parent.spawned}"
        hub = self.job._hub
        state = _TaskState(
            task_id,
            parent.id,
            greenlet.greenlet(task_bootstrap, parent=hub),
            len(self.tasks),
            start=(fn, args, kwargs),
        )
        self._add(state)
        self.active = True
        self.runnable.append(state)
        return Task(task_id)

    def run_effect(self, ends: float, call: Callable[[], T]) -> T:
        """In a task's greenlet: run the effect's call on the pool, switched out."""
        assert self.pool is not None and self.job._hub is not None  # active scheduler
        if self.freezers:
            self._during_freeze += 1
        future = self.pool.submit(on_pool, ends, call)
        done: concurrent.futures.Future[T] = self.job._hub.switch(EffectRequest(future))
        return done.result()

    # ---------------------------------------------------------------- restore
    def restore(
        self,
        tasks: list[dict[str, Any]],
        build: Callable[[list[FrameRecord], Callable[[], object]], Callable[[], object]],
        created_at: float,
        seq: int,
        main_frames: list[FrameRecord],
    ) -> None:
        """Rebuild the scheduler a snapshot saved: each task's resume chain (built by
        `build`, delivering that task's pending value), statuses, results, waits."""
        self._restored = tasks
        self._resumed = (created_at, seq)
        self.active = True
        self.dirty = False
        hub_parent = None  # greenlets are made in run(), whose greenlet is the hub
        for i, data in enumerate(tasks):
            state = _TaskState(str(data["id"]), data.get("parent"), hub_parent, i)
            state.spawned, state.effects = int(data["spawned"]), int(data["effects"])
            state.status = str(data["status"])
            state.label, state.handled = data.get("label"), data.get("handled")
            state.meta = data.get("meta")
            state.result, state.error = data.get("result"), data.get("error")
            state.collected = bool(data.get("collected"))
            state.context = data.get("context")
            if data.get("wait") is not None:
                state.wait = _waits.Wait.from_dict(data["wait"])
            if data.get("join") is not None:
                state.join = (tuple(data["join"]), bool(data.get("single")))
            state.frames = list(data["frames"] or []) if state.id != MAIN else list(main_frames)
            if state.id != MAIN and state.status not in ("done", "failed"):
                # No frame of the agent's: the task's function is a wait itself, e.g.
                # spawn(snapstate.sleep, 5): the delivered value is its result.
                deliver = self._deliverer(state)
                chain = build(data["frames"], deliver) if data["frames"] else deliver
                state.start = (chain, (), {})
            self.tasks[state.id] = state

    def _deliverer(self, state: _TaskState) -> Callable[[], object]:
        def deliver() -> object:
            kind, value = state.deliver or ("value", None)
            state.deliver = None
            if kind == "throw":
                assert isinstance(value, BaseException)
                raise value
            if isinstance(value, _waits.Then):  # produced in the task (a rate limit)
                return value.fn()
            return value

        return wait_api(deliver)  # a continuation may wait again here: not captured

    def main_deliverer(self) -> Callable[[], object]:
        return self._deliverer(self.tasks[MAIN])

    # ---------------------------------------------------------------- running
    def run(
        self, fn: Callable[..., object], args: tuple[object, ...], kwargs: dict[str, Any]
    ) -> Any:
        job = self.job
        hub = job._hub
        assert job._agent is not None and hub is not None  # set by Job._loop
        if self._restored is None:
            main = _TaskState(MAIN, None, job._agent, 0, start=(fn, args, kwargs))
            self._add(main)
            self.runnable.append(main)
        else:
            self._resume_restored(fn, args, kwargs)
        try:
            return self._drive()
        except _Stopped as stopped:
            stop = stopped.stop
        except BaseException:
            self._park()
            raise
        # Stopped here (parked, fenced, the store failed, a replay's end): every task
        # stays paused, none of their code runs after it.
        self._park()
        if stop.error is not None:
            raise stop.error
        job.replay_stop = stop.reason
        return None

    def _resume_restored(
        self, fn: Callable[..., object], args: tuple[object, ...], kwargs: dict[str, Any]
    ) -> None:
        job = self.job
        assert self._resumed is not None
        created_at, seq = self._resumed
        frozen_for = max(0.0, time.time() - created_at)
        if self.pool is None:
            self.pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=effect_threads(), thread_name_prefix="snapstate-effect"
            )
        states = sorted(self.tasks.values(), key=lambda s: s.index)
        self.tasks = {}
        queue = []
        for state in states:
            if state.id == MAIN:
                state.glet = job._agent
                if state.status not in ("done", "failed"):
                    state.start = (fn, args, kwargs)
            elif state.status not in ("done", "failed"):
                state.glet = greenlet.greenlet(task_bootstrap, parent=job._hub)
                if state.context is not None:  # the values it had at the snapshot
                    state.glet.gr_context = state.context
            self._add(state)
            if state.status == "snapshot":
                state.deliver = (
                    "value",
                    SnapshotInfo(True, frozen_for, seq, state.label, state.meta, _pins.pins()),
                )
                queue.append(state)
        for state in states:  # a join already satisfied (not expected at a snapshot)
            if state.status == "join":
                self._check_join(state)
        for state in queue:  # in task order, as after a snapshot taken live
            state.status = "runnable"
            self.runnable.append(state)

    def _drive(self) -> Any:
        while True:
            if self.runnable:
                state = self.runnable.popleft()
                message = self._switch(state)
                self._handle(state, message)
                continue
            if self.freezers:
                if self.inflight and self._during_freeze <= MAX_EFFECTS_DURING_FREEZE:
                    self._collect()
                    continue
                self._freeze_all()
                continue
            if self.inflight:  # a task whose wait ends meanwhile goes on meanwhile
                self._collect(self._poll_ready())
                continue
            if any(s.status == "wait" for s in self.tasks.values()):
                self._poll_waits()
                continue
            stuck = self._cycle()
            if stuck:  # only joins left: they wait for each other
                for state in stuck:
                    names = ", ".join(state.join[0]) if state.join else "?"
                    error = RuntimeError(
                        f"task {state.id} waits for task(s) {names}, which wait for it in "
                        "turn (a cycle of gather()/result()): it can never go on"
                    )
                    self._resume(state, "throw", error)
                continue
            return self._finished()

    def _cycle(self) -> list[_TaskState]:
        """The joining tasks that wait (through others) for themselves."""
        edges = {
            s.id: [i for i in s.join[0] if self.tasks[i].status not in ("done", "failed")]
            for s in self.tasks.values()
            if s.status == "join" and s.join is not None
        }

        def reaches(start: str) -> bool:
            seen, todo = set(), list(edges.get(start, []))
            while todo:
                node = todo.pop()
                if node == start:
                    return True
                if node not in seen:
                    seen.add(node)
                    todo.extend(edges.get(node, []))
            return False

        return [self.tasks[i] for i in edges if reaches(i)]

    def _finished(self) -> Any:
        for state in self.tasks.values():
            if state.id != MAIN and state.status == "failed" and not state.collected:
                err = state.error
                self.job.say(
                    f"task {state.id} of job {self.job.job_id} raised "
                    f"{type(err).__name__}: {err} (nobody collected it with gather() or "
                    "result())"
                )
        main = self.tasks[MAIN]
        if main.status == "failed":
            assert main.error is not None
            raise main.error
        return main.result

    def _switch(self, state: _TaskState) -> object:
        assert state.glet is not None
        self.dirty = True
        state.frames = []  # it runs: its records no longer describe it
        state.status = "running"
        try:
            if state.start is not None:
                start, state.start = state.start, None
                return state.glet.switch(*start)
            kind, value = state.deliver or ("value", None)
            state.deliver = None
            if kind == "throw":
                assert isinstance(value, BaseException)
                return state.glet.throw(value)
            return state.glet.switch(value)
        except BaseException as exc:
            if state.id == MAIN and not isinstance(exc, greenlet.GreenletExit):
                state.status, state.error = "failed", exc
            raise

    def _handle(self, state: _TaskState, message: object) -> None:
        job = self.job
        while True:
            if not self.active and state.id == MAIN:  # no task ever: exactly as before
                if isinstance(message, FreezeRequest):
                    message = job._take_snapshot(message)
                    continue
                if isinstance(message, WaitRequest):
                    message = job._wait(message)
                    continue
            break
        if isinstance(message, Done):
            state.status, state.result = "done", message.value
            self._ended(state)
        elif isinstance(message, TaskEnd):
            if message.error is not None:
                state.status, state.error = "failed", message.error
            else:
                state.status, state.result = "done", message.value
            self._ended(state)
        elif isinstance(message, FreezeRequest):
            state.status, state.label, state.handled = "snapshot", message.label, message.handled
            state.meta = message.meta
            if not self.freezers:
                self._during_freeze = 0
            self.freezers.append(state)
        elif isinstance(message, WaitRequest):
            state.status, state.wait, state.handled = "wait", message.wait, message.handled
        elif isinstance(message, JoinRequest):
            state.status, state.handled = "join", message.handled
            state.join = (message.ids, message.single)
            problem = self._join_problem(state, message.ids)
            if problem is not None:
                self._resume(state, "throw", problem)
            else:
                self._check_join(state)
        elif isinstance(message, EffectRequest):
            state.status = "effect"
            self.inflight[message.future] = state
        elif isinstance(message, Stop):
            raise _Stopped(message)
        else:
            raise AssertionError(f"task {state.id} sent the hub {message!r}")

    def _join_problem(self, state: _TaskState, ids: tuple[str, ...]) -> BaseException | None:
        for task_id in ids:
            if task_id not in self.tasks:
                return ValueError(f"task {task_id} is not a task of job {self.job.job_id}")
            if task_id == state.id:
                return RuntimeError(f"task {state.id} cannot wait for itself")
        return None

    def _resume(self, state: _TaskState, kind: str, value: object) -> None:
        state.deliver = (kind, value)
        state.status = "runnable"
        state.join = state.wait = None
        state.handled = None
        self.runnable.append(state)

    def _check_join(self, state: _TaskState) -> None:
        assert state.join is not None
        ids, single = state.join
        targets = [self.tasks[i] for i in ids]
        if any(t.status not in ("done", "failed") for t in targets):
            return
        for target in targets:
            target.collected = True
        failed = next((t for t in targets if t.status == "failed"), None)
        if failed is not None:
            self._resume(state, "throw", failed.error)
        elif single:
            self._resume(state, "value", targets[0].result)
        else:
            self._resume(state, "value", [t.result for t in targets])

    def _ended(self, state: _TaskState) -> None:
        for other in sorted(self.tasks.values(), key=lambda s: s.index):
            if other.status == "join" and other.join and state.id in other.join[0]:
                self._check_join(other)

    def _collect(self, timeout: float | None = None) -> None:
        done, _ = concurrent.futures.wait(
            list(self.inflight), timeout=timeout, return_when=concurrent.futures.FIRST_COMPLETED
        )
        for future in sorted(done, key=lambda f: self.inflight[f].index):
            state = self.inflight.pop(future)
            self._resume(state, "value", future)

    # ---------------------------------------------------------------- waits
    def _poll_ready(self) -> float | None:
        """While calls are in flight: resume the waiting tasks whose wait is ready; how
        long to wait for a call before polling again (None: no timed wait, up to 1 s)."""
        left: float | None = None
        for state in sorted(self.tasks.values(), key=lambda s: s.index):
            if state.status != "wait" or state.wait is None:
                continue
            outcome = _waits.poll(self.job, state.wait)
            if isinstance(outcome, _waits.Ready):
                if outcome.error is not None:
                    self._resume(state, "throw", outcome.error)
                else:
                    self._resume(state, "value", outcome.value)
            elif outcome.due is not None:
                due = max(0.0, outcome.due - clock().time())
                left = due if left is None else min(left, due)
        if self.runnable:
            return 0.0
        return None if left is None else min(left, 1.0)

    def _poll_waits(self) -> None:
        job = self.job
        limit = _waits.hibernate_after()
        pending: list[tuple[_TaskState, _waits.NotYet]] = []
        for state in sorted(self.tasks.values(), key=lambda s: s.index):
            if state.status != "wait" or state.wait is None:
                continue
            outcome = _waits.poll(job, state.wait)
            if isinstance(outcome, _waits.Ready):
                if outcome.error is not None:
                    self._resume(state, "throw", outcome.error)
                else:
                    self._resume(state, "value", outcome.value)
            else:
                pending.append((state, outcome))
        if self.runnable or not pending:
            return
        dues = [o.due for _, o in pending if o.due is not None]
        if dues:
            left = min(dues) - clock().time()
            if left <= limit and not (job.ledger.replay and left > 0):
                clock().sleep(max(0.0, left))
                return
        timed = [p for p in pending if p[1].due is not None]
        state, outcome = min(timed, key=lambda p: p[1].due or 0.0) if timed else pending[0]
        assert state.wait is not None
        if job.ledger.replay:
            raise _Stopped(Stop(None, f"the job waits at {state.wait.site} ({outcome.reason})"))
        seq = job.seq
        if self.dirty:
            label = f"waiting: {outcome.reason}"
            try:
                seq = self._snapshot(label, state.handled)
            except SnapshotError as exc:
                self._resume(state, "throw", exc)  # raised at the wait: the job goes on
                return
        self._park()
        job._hibernate(state.wait, outcome, seq)

    # ---------------------------------------------------------------- snapshots
    def _snapshot(
        self,
        label: str | None,
        handled: BaseException | None,
        meta: dict[str, Any] | None = None,
    ) -> int:
        """Freeze every task (all paused at switch points) and commit; the seq."""
        job = self.job
        seq = job.seq + 1
        close_all_for_snapshot()
        header, payload = job._freeze(FreezeRequest(label, handled, meta=meta), seq)
        if job.ledger.replay:
            job.seq = seq
            return seq
        job._commit(seq, label, header, payload)
        self.dirty = False
        if job.after_commit is not None:
            job.after_commit(seq)
        return seq

    def _freeze_all(self) -> None:
        # One snapshot for every task that asked: labelled by the first task in task
        # order (not by who asked first, which depends on when calls completed), the
        # tasks resumed in task order, as a restore resumes them.
        freezers = sorted(self.freezers, key=lambda s: s.index)
        self.freezers = []
        first = freezers[0]
        try:
            if self.inflight:
                raise SnapshotError(
                    f"tasks {', '.join(sorted(s.id for s in self.inflight.values()))} kept "
                    f"starting effects ({self._during_freeze} while this snapshot waited for "
                    "the calls in flight to end): call snapshot() where the job's tasks pause"
                )
            seq = self._snapshot(first.label, first.handled, first.meta)
        except SnapshotError as exc:
            for state in freezers:
                self._resume(state, "throw", SnapshotError(str(exc)))
            return
        for state in freezers:
            self._resume(
                state,
                "value",
                SnapshotInfo(False, 0.0, seq, state.label, state.meta, _pins.pins()),
            )

    def capture(
        self,
        capture_task: Callable[[str, greenlet.greenlet, BaseException | None], list[FrameRecord]],
    ) -> tuple[list[FrameRecord], list[dict[str, Any]]]:
        """main's frames and every task's saved state (frames of the others)."""
        main_frames: list[FrameRecord] = []
        saved: list[dict[str, Any]] = []
        for state in sorted(self.tasks.values(), key=lambda s: s.index):
            frames: list[FrameRecord] = []
            if state.status not in ("done", "failed"):
                if state.status not in ("snapshot", "wait", "join"):
                    raise SnapshotError(
                        f"task {state.id} is {state.status}, not paused at a switch point"
                    )
                assert state.glet is not None
                if state.start is not None:  # restored, not run since: as it was saved
                    frames = state.frames
                else:
                    frames = capture_task(state.id, state.glet, state.handled)
            if state.id == MAIN:
                main_frames = frames
            saved.append(
                {
                    "id": state.id,
                    "parent": state.parent,
                    "status": state.status,
                    "spawned": state.spawned,
                    "effects": state.effects,
                    "frames": frames if state.id != MAIN else None,
                    "handled": state.handled,
                    "label": state.label,
                    "meta": state.meta,
                    "wait": state.wait.as_dict() if state.wait is not None else None,
                    "join": list(state.join[0]) if state.join else None,
                    "single": state.join[1] if state.join else False,
                    "result": state.result,
                    "error": state.error,
                    "collected": state.collected,
                    # the context variables the task set (main's: the job's own)
                    "context": _context_of(state) if state.id != MAIN else None,
                }
            )
        return main_frames, saved

    def _park(self) -> None:
        """The run ends here: paused tasks stay paused forever (never unwound), and the
        calls in flight finish on their threads (their rows stay as recorded)."""
        for state in self.tasks.values():
            if state.glet is not None and not state.glet.dead:
                if not any(g is state.glet for g in PARKED_AGENTS):
                    PARKED_AGENTS.append(state.glet)
        self.runnable.clear()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            self.pool = None
