"""The Python API: run, resume and look at jobs from Python (web services, tests,
notebooks), on the same rules as `snaprun`, which is a thin layer over it.

    store = snapstate.Store()                       # $SNAPSTATE_HOME or ./.snapstate
    outcome = store.start("agent.py", "--fast")     # args: the agent's sys.argv[1:]
    if outcome.status == "waiting":                 # hibernated (approval, timer)
        print(outcome.wait.reason, outcome.wait.due)
    store.approve(job_id, approval_id, by="alice")
    store.resume(job_id)

start() and resume() run the job IN THIS PROCESS, in the calling thread, and return a
JobResult whatever the job did: done, waiting (exit 3 in the CLI), parked (4), failed
(the agent raised: 1), interrupted (the store or a snapshot write failed: 1). Invalid
input raises what the CLI reports with exit 2 (JobNotFound, InvalidJobId, JobFinished,
IncompatibleSnapshot, a tampered file, an entry point that does not load...), and a
conflict raises LeaseHeld or StaleWriter (exit 5). Ctrl-C (KeyboardInterrupt) is the
host's: it propagates, the job stays resumable.

Running a job in-process touches process-global state. Around each start() and
resume() the API saves and puts back: sys.argv, sys.path, the working directory,
os.environ (every variable, as it was), the root logger's handlers and level (handlers
the agent added are closed once no logger uses them) and the global `random` state.
What stays: the agent's modules remain imported (sys.modules; their globals as the run
left them), os.environ's class is snapstate's tracking subclass from the first run on
(runtime/_process.py), and the effect of any other process-wide change the agent made
(signal handlers, threads, other modules' state). Runs are serialized per process (the
active job is process-global): a second thread's start() waits for the first; calling
start() or resume() from inside a job's own code is refused (RuntimeError).
"""

from __future__ import annotations

import logging
import os
import random
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._errors import (
    JobParked,
    JobWaiting,
    LeaseHeld,
    SnapshotWriteError,
    SnapstateError,
    StaleWriter,
    StoreFailure,
)
from ..serializers._home import Home, default_home
from ..serializers._ids import validate_job_id
from ..serializers._store import JobRow, WaitRow
from . import _process, _rootlog
from ._agent import EntryPoint, EntryPointError
from ._clock import clock
from ._job import Job
from ._lease import lease_ttl
from ._waits import hibernate_after

if TYPE_CHECKING:
    from ..serializers._store import ApprovalRow

__all__ = [
    "Store",
    "JobResult",
    "JobView",
    "SnapshotView",
    "EffectView",
    "WaitInfo",
    "drive",
    "create_job",
    "open_job",
    "job_views",
]

STATUSES = ("done", "waiting", "parked", "failed", "interrupted")


# ------------------------------------------------------------------------ records
@dataclass(frozen=True)
class WaitInfo:
    """Why a waiting job waits: its kind ("timer", "rate-limit", "approval"), the
    reason `snaprun ls` shows, when it is due (epoch seconds; None: only when an
    approval is decided), since when it waits, the snapshot it waits at and the
    approval whose decision ends it."""

    kind: str
    reason: str
    due: float | None
    since: float | None = None
    seq: int | None = None
    approval_id: str | None = None

    @classmethod
    def from_row(cls, row: WaitRow) -> WaitInfo:
        return cls(row.kind, row.reason, row.due, row.since, row.seq, row.approval_id)


@dataclass(frozen=True)
class JobResult:
    """What start() or resume() ended with.

    status:  "done" (result is main()'s value), "waiting" (wait says why and until
             when), "parked" (an ambiguous effect: `snaprun reconcile`), "failed" (the
             agent raised `error`), "interrupted" (the store or a snapshot write failed:
             `error`; the job is resumable once it is fixed)
    seq:     the job's latest snapshot (0: none)"""

    job_id: str
    status: str
    result: object = None
    error: BaseException | None = None
    wait: WaitInfo | None = None
    seq: int = 0

    @property
    def exit_code(self) -> int:
        """The exit code `snaprun` ends with for this outcome (the CLI contract)."""
        return {"done": 0, "waiting": 3, "parked": 4}.get(self.status, 1)


@dataclass(frozen=True)
class SnapshotView:
    seq: int
    label: str | None
    created: float
    size: int
    epoch: int


@dataclass(frozen=True)
class EffectView:
    ordinal: int
    name: str
    state: str
    kind: str
    key: str
    args: str  # redacted, truncated, for people
    call_site: str
    attempts: int
    note: str
    updated: float


@dataclass(frozen=True)
class JobView:
    """A read-only view of a job, as the catalog had it when the view was made.

    status is the effective one (`interrupted` for a running job whose runner died);
    wait says why a waiting job waits and when it is due; meta and pins are those of
    its latest snapshot's header (None / {} without one, or when that file does not
    verify)."""

    job_id: str
    status: str
    entry: str
    argv: list[str]
    created: float
    updated: float
    resumes: int
    parent: str | None
    error: str | None
    snapshots: tuple[SnapshotView, ...]
    effects: tuple[EffectView, ...] = ()
    wait: WaitInfo | None = None
    meta: dict[str, Any] | None = None
    pins: dict[str, Any] = field(default_factory=dict)

    @property
    def latest(self) -> SnapshotView | None:
        return self.snapshots[-1] if self.snapshots else None


def _entry_text(entry: dict[str, Any]) -> str:
    return str(entry.get("path") or f"{entry['module']}:{entry['function']}")


def _header_extras(home: Home, job_id: str) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """(meta, pins) of the job's latest snapshot, from its verified header."""
    row = home.catalog.latest(job_id)
    if row is None:
        return None, {}
    try:
        header, _ = home.verify_row(row)
    except (SnapstateError, OSError):
        return None, {}  # `snaprun inspect` and `resume` say what is wrong with it
    meta, pins = header.get("meta"), header.get("pins")
    return (
        meta if isinstance(meta, dict) else None,
        pins if isinstance(pins, dict) else {},
    )


def _view(home: Home, job: JobRow, now: float, *, effects: bool) -> JobView:
    snaps = home.catalog.snapshots(job.job_id)
    status = home.catalog.effective_status(job, now)
    wait_row = home.catalog.get_wait(job.job_id) if status == "waiting" else None
    meta, pins = _header_extras(home, job.job_id) if snaps else (None, {})
    return JobView(
        job_id=job.job_id,
        status=status,
        entry=_entry_text(job.entry),
        argv=list(job.argv),
        created=job.created,
        updated=job.updated,
        resumes=job.resume_count,
        parent=job.parent,
        error=job.error,
        snapshots=tuple(SnapshotView(s.seq, s.label, s.created, s.size, s.epoch) for s in snaps),
        effects=tuple(
            EffectView(
                e.ordinal,
                e.name,
                str(e.state),
                str(e.kind),
                e.key,
                e.args_repr,
                e.call_site,
                e.attempts,
                e.note,
                e.updated,
            )
            for e in (home.catalog.effects(job.job_id) if effects else [])
        ),
        wait=WaitInfo.from_row(wait_row) if wait_row is not None else None,
        meta=meta,
        pins=pins,
    )


def job_views(home: Home, now: float, *, effects: bool = False) -> list[JobView]:
    """Every job of the store (`snaprun ls`); read-only."""
    return [_view(home, job, now, effects=effects) for job in home.catalog.list_jobs()]


def job_view(home: Home, job_id: str, now: float) -> JobView:
    """One job with its effects; JobNotFound / InvalidJobId as `snaprun` reports them."""
    validate_job_id(job_id)
    return _view(home, home.catalog.get_job(job_id), now, effects=True)


# ------------------------------------------------------------------------ running
def create_job(home: Home, entry: EntryPoint, argv: list[str], job_id: str | None) -> Job:
    """A new job (catalog row) for `entry`; loads the entry point first (EntryPointError:
    nothing is created; an exception of the agent's module propagates as it is)."""
    return Job.create(home, entry, argv, job_id)


def open_job(home: Home, job_id: str) -> Job:
    return Job.open(home, job_id)


def _waited(home: Home, job: Job, exc: JobWaiting) -> WaitInfo:
    try:
        row = home.catalog.get_wait(job.job_id)
    except SnapstateError:
        row = None
    if row is not None:
        return WaitInfo.from_row(row)
    return WaitInfo(exc.kind, str(exc), exc.due)


def drive(job: Job, action: Callable[[], object]) -> JobResult:
    """Run `action` (job.run or a resume) and classify how it ended, as the CLI's exit
    codes do. Raises: KeyboardInterrupt; a conflict (LeaseHeld, StaleWriter); a
    snapstate error raised before the agent ran (invalid input: the job could not start
    or be restored). Returns a JobResult for everything else."""
    try:
        value = action()
    except KeyboardInterrupt:
        raise
    except SystemExit as exc:  # the agent's sys.exit(): its failure, never our code
        return JobResult(job.job_id, "failed", error=exc, seq=job.seq)
    except StoreFailure as exc:
        return JobResult(job.job_id, "interrupted", error=exc, seq=job.seq)
    except SnapshotWriteError as exc:
        return JobResult(job.job_id, "interrupted", error=exc, seq=job.seq)
    except (StaleWriter, LeaseHeld):
        raise
    except JobParked as exc:
        return JobResult(job.job_id, "parked", error=exc, seq=job.seq)
    except JobWaiting as exc:
        return JobResult(
            job.job_id, "waiting", error=exc, wait=_waited(job.home, job, exc), seq=job.seq
        )
    except SnapstateError as exc:
        if job._agent is None or exc is job._hub_error:  # no agent code ran: the
            raise  # snapshot, the job or the store is invalid (exit 2)
        return JobResult(job.job_id, "failed", error=exc, seq=job.seq)
    except Exception as exc:
        return JobResult(job.job_id, "failed", error=exc, seq=job.seq)
    return JobResult(job.job_id, "done", result=value, seq=job.seq)


# ------------------------------------------------------------------------ host state
_RUN_LOCK = threading.Lock()
_RUNNER: list[int] = []  # the thread id running a job through the API, while one does


@dataclass
class _HostState:
    argv: list[str]
    path: list[str]
    cwd: str | None
    environ: dict[str, str]
    handlers: list[logging.Handler]
    level: int
    random_state: tuple[Any, ...]

    @classmethod
    def save(cls) -> _HostState:
        root = logging.getLogger()
        try:
            cwd: str | None = os.getcwd()
        except FileNotFoundError:
            cwd = None
        return cls(
            list(sys.argv),
            list(sys.path),
            cwd,
            dict(os.environ),
            list(root.handlers),
            root.level,
            random.getstate(),
        )

    def put_back(self) -> None:
        sys.argv = self.argv
        sys.path[:] = self.path
        if self.cwd is not None:
            try:
                os.chdir(self.cwd)
            except OSError:
                pass  # the host's directory went away meanwhile: nothing to go back to
        _process._revert_env(self.environ)
        root = logging.getLogger()
        added = [h for h in root.handlers if not any(h is b for b in self.handlers)]
        root.handlers[:] = self.handlers
        root.setLevel(self.level)
        for handler in added:  # the agent's: its snapshot holds them, not this process
            if not _rootlog._used_elsewhere(handler):
                handler.close()
        random.setstate(self.random_state)


@contextmanager
def _in_process() -> Iterator[None]:
    """Serialize runs in this process and put the host's state back after each."""
    me = threading.get_ident()
    if _RUNNER and _RUNNER[0] == me:
        raise RuntimeError(
            "Store.start()/resume() was called from inside a running job's code; a job "
            "cannot run another job in its own thread: start it from the host (or with "
            "`snaprun run` in a subprocess)"
        )
    with _RUN_LOCK:
        _RUNNER[:] = [me]
        saved = _HostState.save()
        try:
            yield
        finally:
            try:
                saved.put_back()
            finally:
                _RUNNER.clear()


def _entry_of(target: object) -> EntryPoint:
    """The entry point of start()'s target: a .py path, "module:function", or a
    module-level function of an importable module."""
    if isinstance(target, os.PathLike):
        target = os.fspath(target)
    if isinstance(target, str):
        return EntryPoint.parse(target)
    if not isinstance(target, types.FunctionType):
        raise TypeError(
            f"Store.start() takes a .py path, 'module:function' or a module-level function, "
            f"not {type(target).__module__}.{type(target).__qualname__}"
        )
    module_name, name = target.__module__, target.__name__
    where = f"{module_name}.{target.__qualname__}"
    if module_name == "__main__":
        raise EntryPointError(
            f"{where} lives in __main__, which a resume in another process cannot import: "
            "move it to a module, or pass the script's path to Store.start()"
        )
    module = sys.modules.get(module_name)
    if target.__qualname__ != name or module is None or getattr(module, name, None) is not target:
        raise EntryPointError(
            f"{where} is not a module-level function its module exposes under that name "
            "(a nested function, a method or a lambda cannot be found again by a resume): "
            "pass a function defined at the top of an importable module"
        )
    file = getattr(module, "__file__", None)
    search_path = None
    if file:  # the directory the module is importable from (its package's parent)
        depth = module_name.count(".") + (
            1 if os.path.basename(file).startswith("__init__.") else 0
        )
        search_path = os.path.dirname(os.path.abspath(file))
        for _ in range(depth):
            search_path = os.path.dirname(search_path)
    return EntryPoint(module_name, name, None, search_path)


def check_settings() -> None:
    """Refuse a bad SNAPSTATE_LEASE_TTL, SNAPSTATE_HIBERNATE_AFTER, SNAPSTATE_CLOCK_OFFSET,
    SNAPSTATE_EFFECT_THREADS or SNAPSTATE_ASYNC_SETTLE before any job runs (a
    SnapstateError naming the variable); the CLI maps it to exit 2."""
    from ._async_loop import settle_seconds
    from ._tasks import effect_threads

    lease_ttl()
    hibernate_after()
    clock().time()
    effect_threads()
    settle_seconds()


def _argv(args: tuple[object, ...]) -> list[str]:
    for i, arg in enumerate(args):
        if not isinstance(arg, str):
            raise TypeError(
                f"Store.start() argument {i + 1} is a {type(arg).__qualname__}: the arguments "
                "become the agent's sys.argv[1:] (as with `snaprun run SCRIPT ARGS`), so they "
                "are strings. The entry function is called without arguments: a job restarted "
                "before its first snapshot calls it again, and only strings are kept with the "
                "job. Pass str(...) or JSON, or let the agent read its inputs itself"
            )
    return list(args)  # type: ignore[arg-type]  # checked: all str


# ------------------------------------------------------------------------ the store
class Store:
    """A snapstate store opened from Python: the same store and rules as `snaprun`.

    `path` is the store directory (default: $SNAPSTATE_HOME or ./.snapstate, as the
    CLI). Every call opens the store, does its work and closes it again, so a Store may
    be shared between threads (runs are serialized: see start())."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path: str = default_home(os.fspath(path) if path is not None else None)

    def __repr__(self) -> str:
        return f"Store({self.path!r})"

    @contextmanager
    def _home(self, *, create: bool = False, readonly: bool = False) -> Iterator[Home]:
        home = Home(self.path, create=create, writable=not readonly)
        try:
            yield home
        finally:
            home.close()

    # -------------------------------------------------------------- running
    def start(
        self,
        target: str | os.PathLike[str] | Callable[[], object],
        *args: str,
        job_id: str | None = None,
    ) -> JobResult:
        """Start a new job and run it in this process until it is done, waits, parks or
        fails (see JobResult).

        target: a path to a .py file (its main() runs), "module:function", or a
        module-level function of an importable module. args become the agent's
        sys.argv[1:] (strings, as `snaprun run`); the entry function is called with no
        arguments. Without job_id one is derived from the module's name."""
        entry = _entry_of(target)
        argv = _argv(args)
        if job_id is not None:
            validate_job_id(job_id, what="the job id job_id=")
        check_settings()  # refused before the job exists
        with _in_process(), self._home(create=True) as home:
            job = create_job(home, entry, argv, job_id)
            return drive(job, job.run)

    def resume(self, job_id: str, *, at: int | None = None, force: bool = False) -> JobResult:
        """Continue a job after its latest snapshot (or snapshot `at`, dropping the later
        ones), in this process, as `snaprun resume`. A waiting job whose wait is not over
        hibernates again (status "waiting")."""
        validate_job_id(job_id)
        check_settings()
        with _in_process(), self._home() as home:
            job = open_job(home, job_id)
            return drive(job, lambda: job.resume(at, force=force))

    # -------------------------------------------------------------- approvals
    def approve(
        self, job_id: str, approval_id: str, by: str | None = None, note: str | None = None
    ) -> ApprovalRow:
        """Grant a pending approval (`snaprun approve`); resume() (or the worker) then
        continues the job."""
        from . import _approvals  # type: ignore[attr-defined,unused-ignore]

        validate_job_id(job_id)
        with self._home() as home:
            row: ApprovalRow = _approvals.decide(
                home, job_id, approval_id, granted=True, by=by, note=note
            )
            return row

    def reject(
        self, job_id: str, approval_id: str, by: str | None = None, reason: str | None = None
    ) -> ApprovalRow:
        """Reject a pending approval (`snaprun reject`): the agent's request_approval()
        raises ApprovalRejected when the job resumes."""
        from . import _approvals  # type: ignore[attr-defined,unused-ignore]

        validate_job_id(job_id)
        with self._home() as home:
            row: ApprovalRow = _approvals.decide(
                home, job_id, approval_id, granted=False, by=by, note=reason
            )
            return row

    def approvals(self) -> list[ApprovalRow]:
        """The pending approvals of the store (`snaprun approvals`)."""
        from . import _approvals  # type: ignore[attr-defined,unused-ignore]

        with self._home(readonly=True) as home:
            rows: list[ApprovalRow] = _approvals.pending(home)
            return rows

    # -------------------------------------------------------------- reading
    def jobs(self) -> list[JobView]:
        """Every job of the store, as `snaprun ls` lists them (read-only)."""
        with self._home(readonly=True) as home:
            return job_views(home, time.time())

    def job(self, job_id: str) -> JobView:
        """One job with its snapshots, effects, wait and pins (read-only); JobNotFound or
        InvalidJobId as `snaprun` reports them."""
        validate_job_id(job_id)
        with self._home(readonly=True) as home:
            return job_view(home, job_id, time.time())
