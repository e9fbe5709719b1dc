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
start() or resume() from inside a job's own code is refused (RuntimeError). The host's
own `__main__` never belongs to the job (runtime/_agent.py): a host script in the
agent's folder keeps its globals.

What the API returns is plain data of public classes (exported by `snapstate`), built
here from the catalog's rows and never the rows themselves: JobResult, JobView,
WaitInfo, SnapshotView, EffectView, ApprovalView (frozen dataclasses) and JobStatus.
The exit-code tables of the CLI contract live here too, so `snaprun` and
JobResult.exit_code give one answer.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
import os
import random
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from .._errors import (
    JobParked,
    JobWaiting,
    LeaseHeld,
    SnapshotWriteError,
    SnapstateError,
    StaleWriter,
    StoreDamaged,
    StoreFailure,
)
from ..serializers._catalog import status_with_lease
from ..serializers._home import Home, default_home, open_store
from ..serializers._ids import validate_job_id
from ..serializers._location import is_postgres_url, redact
from ..serializers._store import ApprovalRow, JobListing, JobRow, SnapshotRow, WaitRow
from . import _approvals, _process, _rootlog
from ._agent import EntryPoint, EntryPointError
from ._async_loop import settle_seconds
from ._clock import clock
from ._effect_spec import max_retry_after
from ._effect_views import EffectView, effect_views
from ._http_record import check_reads
from ._job import Job
from ._lease import lease_ttl
from ._tasks import effect_threads
from ._waits import hibernate_after

__all__ = [
    "Store",
    "JobStatus",
    "JobResult",
    "JobView",
    "SnapshotView",
    "EffectView",
    "WaitInfo",
    "ApprovalView",
    "EXIT_CODES",
    "exit_code",
    "status_exit_code",
    "drive",
    "create_job",
    "open_job",
    "job_views",
    "job_page",
    "approval_rows",
    "approval_view",
    "effect_views",
    "snapshot_views",
]


# ------------------------------------------------------------------------ statuses
class JobStatus(enum.StrEnum):
    """A job's status. Members are strings (`status == "waiting"` holds), and JSON and
    f-strings print their value.

    running      a live runner holds the job
    waiting      hibernated at an approval, a timer or a rate limit (`wait` says which)
    interrupted  its runner died or was stopped, or the store failed: resumable
    parked       an ambiguous effect needs `snaprun reconcile`
    done         main() returned
    failed       the agent raised (`snaprun resume` tries again after a fix)"""

    RUNNING = "running"
    WAITING = "waiting"
    INTERRUPTED = "interrupted"
    PARKED = "parked"
    DONE = "done"
    FAILED = "failed"


def _job_status(text: str, job_id: str) -> JobStatus:
    """The status the catalog holds for a job; an unknown one is a damaged catalog."""
    try:
        return JobStatus(text)
    except ValueError:
        raise StoreDamaged(
            f"job {job_id} has the status {text!r} in the catalog, which no snapstate "
            "writes (the catalog was edited); restore it from a backup (or `snaprun repair`)"
        ) from None


# ------------------------------------------------------------------------ exit codes
# The CLI contract's exit codes: one table per question, used by the API and the CLI.
EXIT_DONE, EXIT_FAILED, EXIT_USAGE, EXIT_WAITING, EXIT_PARKED, EXIT_CONFLICT = 0, 1, 2, 3, 4, 5

# How a run ends -> its exit code. "running" is what a job another live runner holds
# answers a resume with (a conflict); a run of one's own never ends "running".
STATUS_EXIT_CODES: Mapping[JobStatus, int] = {
    JobStatus.DONE: EXIT_DONE,
    JobStatus.FAILED: EXIT_FAILED,  # the agent raised
    JobStatus.INTERRUPTED: EXIT_FAILED,  # the store or a snapshot write failed
    JobStatus.WAITING: EXIT_WAITING,
    JobStatus.PARKED: EXIT_PARKED,
    JobStatus.RUNNING: EXIT_CONFLICT,
}

# A snapstate error -> its exit code: the first class that matches wins (so subclasses
# come before their bases).
EXIT_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (StoreFailure, EXIT_FAILED),  # the store failed, not the input: job resumable
    (SnapshotWriteError, EXIT_FAILED),
    (JobParked, EXIT_PARKED),
    (JobWaiting, EXIT_WAITING),
    (LeaseHeld, EXIT_CONFLICT),
    (StaleWriter, EXIT_CONFLICT),
    (SnapstateError, EXIT_USAGE),  # invalid input, damaged or foreign store or file
)


def status_exit_code(status: JobStatus) -> int:
    """The exit code `snaprun` ends with when a run ends with `status`."""
    return STATUS_EXIT_CODES[status]


def exit_code(exc: BaseException) -> int:
    """The exit code of a snapstate error, from EXIT_CODES (1 for any other error)."""
    for kind, code in EXIT_CODES:
        if isinstance(exc, kind):
            return code
    return EXIT_FAILED


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


def _wait_info(row: WaitRow) -> WaitInfo:
    return WaitInfo(row.kind, row.reason, row.due, row.since, row.seq, row.approval_id)


@dataclass(frozen=True)
class JobResult:
    """What start() or resume() ended with.

    status:  DONE (result is main()'s value), WAITING (wait says why and until when),
             PARKED (an ambiguous effect: `snaprun reconcile`), FAILED (the agent
             raised `error`), INTERRUPTED (the store or a snapshot write failed:
             `error`; the job is resumable once it is fixed); never RUNNING
    seq:     the job's latest snapshot (0: none)"""

    job_id: str
    status: JobStatus
    result: object = None
    error: BaseException | None = None
    wait: WaitInfo | None = None
    seq: int = 0

    @property
    def exit_code(self) -> int:
        """The exit code `snaprun` ends with for this outcome (the CLI contract)."""
        return status_exit_code(self.status)


@dataclass(frozen=True)
class SnapshotView:
    """One snapshot of a job: its sequence number (from 1), label, when it was taken
    (epoch seconds), the bytes it added to the store (its manifest and the chunks the
    store did not hold yet; a snapshot file's whole size) and the lease epoch of the
    runner that wrote it."""

    seq: int
    label: str | None
    created: float
    size: int
    epoch: int


def _snapshot_view(row: SnapshotRow) -> SnapshotView:
    return SnapshotView(row.seq, row.label, row.created, row.size, row.epoch)


@dataclass(frozen=True)
class ApprovalView:
    """An approval a job requested, as `snaprun approvals` lists it.

    state is "expired" for a pending approval past its expiry; scope is the scope
    exactly as requested; approvers None means anyone may decide. altered: the
    catalog's record of the request does not verify against the store's key (it was
    edited): approve() and reject() refuse it."""

    job_id: str
    approval_id: str
    name: str
    state: Literal["pending", "granted", "rejected", "expired"]
    scope: dict[str, Any]
    requested: float
    expires: float | None
    approvers: tuple[str, ...] | None
    decided_by: str | None
    decided_at: float | None
    note: str | None
    site: str
    altered: bool = False


def approval_view(home: Home, row: ApprovalRow, now: float) -> ApprovalView:
    """The public view of an approval row (its scope decoded, its digest checked); a
    row the catalog refuses (a listing's `damaged` row) shows as altered, nothing of it
    trusted."""
    if row.damaged is not None:  # shown as it now reads, flagged; nothing trusted
        try:
            scope = json.loads(row.scope)
        except ValueError:
            scope = {}
        state = row.state if row.state in ("pending", "granted", "rejected") else "pending"
        return ApprovalView(
            job_id=row.job_id,
            approval_id=row.approval_id,
            name=row.name or "<damaged catalog row>",
            state=cast(Literal["pending", "granted", "rejected"], state),
            scope=scope if isinstance(scope, dict) else {},
            requested=row.requested,
            expires=row.expires,
            approvers=None if row.approvers is None else tuple(row.approvers),
            decided_by=row.decided_by,
            decided_at=row.decided_at,
            note=row.note,
            site=row.site,
            altered=True,
        )
    state = row.state
    if state == "pending" and _approvals.is_expired(row, now):
        state = "expired"
    if state not in ("pending", "granted", "rejected", "expired"):
        raise StoreDamaged(
            f"approval {row.approval_id} of job {row.job_id} has the state {state!r} in "
            "the catalog, which no snapstate writes (the catalog was edited)"
        )
    return ApprovalView(
        job_id=row.job_id,
        approval_id=row.approval_id,
        name=row.name,
        state=cast(Literal["pending", "granted", "rejected", "expired"], state),
        scope=json.loads(row.scope),
        requested=row.requested,
        expires=row.expires,
        approvers=None if row.approvers is None else tuple(row.approvers),
        decided_by=row.decided_by,
        decided_at=row.decided_at,
        note=row.note,
        site=row.site,
        altered=not _approvals.verified(home, row),
    )


def approval_rows(home: Home, *, every: bool = False) -> list[ApprovalRow]:
    """The approvals someone may still decide (pending, unexpired), oldest first; with
    `every`, all of them."""
    return home.catalog.approvals() if every else _approvals.pending(home)


@dataclass(frozen=True)
class JobView:
    """A read-only view of a job, as the catalog had it when the view was made.

    status is the effective one (`interrupted` for a running job whose runner died);
    wait says why a waiting job waits and when it is due; meta and pins are those of
    its latest snapshot's header (None / {} without one, or when that file does not
    verify)."""

    job_id: str
    status: JobStatus
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


# How a listing shows a row the catalog refuses (its signature does not verify): the
# listing goes on; the commands on that job refuse it (exit 2) and say why.
_DAMAGED_JOB = "<damaged entry point or argv: `snaprun resume` refuses it>"
_DAMAGED_WAIT = "<damaged wait row: `snaprun resume` refuses it>"


def _entry_text(entry: object) -> str:
    """How `ls` shows a job's entry point; a catalog row is hostile input, so one that
    is not an entry point is shown as damaged, never a traceback for the whole list."""
    if isinstance(entry, dict):
        path, module, function = entry.get("path"), entry.get("module"), entry.get("function")
        if isinstance(path, str) and path:
            return path
        if isinstance(module, str) and isinstance(function, str):
            return f"{module}:{function}"
    return "<damaged entry point: `snaprun resume` refuses it>"


def _header_extras(home: Home, row: SnapshotRow) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """(meta, pins) of a snapshot (the job's latest), from its verified header."""
    try:
        header = home.row_header(row)
    except (SnapstateError, OSError):
        return None, {}  # `snaprun inspect` and `resume` say what is wrong with it
    meta, pins = header.get("meta"), header.get("pins")
    return (
        meta if isinstance(meta, dict) else None,
        pins if isinstance(pins, dict) else {},
    )


def _view(
    home: Home,
    job: JobRow,
    now: float,
    *,
    effects: bool,
    listing: JobListing | None = None,
) -> JobView:
    """The job's view; from `listing`'s rows when given (`snaprun ls`), else read."""
    if listing is None:  # one job's rows, as a listing of it has them
        try:
            waits = {w.job_id: w for w in [home.catalog.get_wait(job.job_id)] if w is not None}
        except StoreDamaged:  # a refused wait row: shown as such
            waits = {job.job_id: WaitRow(job.job_id, "damaged", "", None, 0.0, 0, None, "x")}
        lease = home.catalog.get_lease(job.job_id)
        leases = {job.job_id: lease} if lease is not None else {}
        snapshots = {job.job_id: tuple(home.catalog.snapshots(job.job_id))}
        listing = JobListing(1, (job,), snapshots, leases, waits)
    snaps = list(listing.snapshots.get(job.job_id, ()))
    status = _job_status(status_with_lease(job, listing.leases.get(job.job_id), now), job.job_id)
    wait: WaitInfo | None = None
    wait_row = listing.waits.get(job.job_id)
    if status == JobStatus.WAITING and wait_row is not None:  # a refused row: shown as such
        damaged = wait_row.damaged is not None
        wait = WaitInfo("damaged", _DAMAGED_WAIT, None) if damaged else _wait_info(wait_row)
    meta, pins = _header_extras(home, snaps[-1]) if snaps else (None, {})
    return JobView(
        job_id=job.job_id,
        status=status,
        entry=_DAMAGED_JOB if job.damaged is not None else _entry_text(job.entry),
        argv=list(job.argv),
        created=job.created,
        updated=job.updated,
        resumes=job.resume_count,
        parent=job.parent,
        error=job.error,
        snapshots=tuple(_snapshot_view(s) for s in snaps),
        effects=tuple(effect_views(home, job.job_id)) if effects else (),
        wait=wait,
        meta=meta,
        pins=pins,
    )


def job_views(home: Home, now: float, *, effects: bool = False) -> list[JobView]:
    """Every job of the store (`snaprun ls --all`); read-only."""
    return job_page(home, now, None, effects=effects)[1]


def job_page(
    home: Home, now: float, limit: int | None, *, effects: bool = False
) -> tuple[int, list[JobView]]:
    """(how many jobs the store holds, the views of its newest `limit` jobs, oldest
    first; every job with None): `snaprun ls`. One catalog read for all of them
    (JobCatalog.job_listing); read-only."""
    listing = home.catalog.job_listing(limit)
    return listing.total, [
        _view(home, job, now, effects=effects, listing=listing) for job in listing.jobs
    ]


def job_view(home: Home, job_id: str, now: float) -> JobView:
    """One job with its effects; JobNotFound / InvalidJobId as `snaprun` reports them."""
    validate_job_id(job_id)
    return _view(home, home.catalog.get_job(job_id), now, effects=True)


def snapshot_views(home: Home, job_id: str) -> list[SnapshotView]:
    """A job's snapshots, oldest first; JobNotFound names the job."""
    home.catalog.get_job(job_id)
    return [_snapshot_view(s) for s in home.catalog.snapshots(job_id)]


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
        return _wait_info(row)
    return WaitInfo(exc.kind, str(exc), exc.due)


def drive(job: Job, action: Callable[[], object]) -> JobResult:
    """Run `action` (job.run or a resume) and classify how it ended, as the CLI's exit
    codes do. Raises: KeyboardInterrupt; a conflict (LeaseHeld, StaleWriter); a
    snapstate error raised before the agent ran (invalid input: the job could not start
    or be restored). Returns a JobResult for everything else."""
    failed, interrupted = JobStatus.FAILED, JobStatus.INTERRUPTED
    try:
        value = action()
    except KeyboardInterrupt:
        raise
    except SystemExit as exc:  # the agent's sys.exit(): its failure, never our code
        return JobResult(job.job_id, failed, error=exc, seq=job.seq)
    except StoreFailure as exc:
        return JobResult(job.job_id, interrupted, error=exc, seq=job.seq)
    except SnapshotWriteError as exc:
        return JobResult(job.job_id, interrupted, error=exc, seq=job.seq)
    except (StaleWriter, LeaseHeld):
        raise
    except JobParked as exc:
        return JobResult(job.job_id, JobStatus.PARKED, error=exc, seq=job.seq)
    except JobWaiting as exc:
        wait = _waited(job.home, job, exc)
        return JobResult(job.job_id, JobStatus.WAITING, error=exc, wait=wait, seq=job.seq)
    except SnapstateError as exc:
        if not job.agent_started or exc is job.hub_error:  # no agent code ran: the
            raise  # snapshot, the job or the store is invalid (exit 2)
        return JobResult(job.job_id, failed, error=exc, seq=job.seq)
    except Exception as exc:
        return JobResult(job.job_id, failed, error=exc, seq=job.seq)
    return JobResult(job.job_id, JobStatus.DONE, result=value, seq=job.seq)


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
    SNAPSTATE_EFFECT_THREADS, SNAPSTATE_ASYNC_SETTLE or SNAPSTATE_MAX_RETRY_AFTER before any job runs (a
    SnapstateError naming the variable); the CLI maps it to exit 2."""
    lease_ttl()
    hibernate_after()
    clock().time()
    effect_threads()
    settle_seconds()
    max_retry_after()


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

    `path` is the store: a directory or a postgresql:// URL (default: $SNAPSTATE_STORE,
    else $SNAPSTATE_HOME, else ./.snapstate, as the CLI). Every call opens the store, does its work and closes it again, so a Store may
    be shared between threads (runs are serialized: see start())."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path: str = default_home(os.fspath(path) if path is not None else None)

    def __repr__(self) -> str:
        return f"Store({redact(self.path) if is_postgres_url(self.path) else self.path!r})"

    @contextmanager
    def _home(self, *, create: bool = False, readonly: bool = False) -> Iterator[Home]:
        home = open_store(self.path, create=create, writable=not readonly)
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
        record_http: bool = False,
        http_reads: Sequence[str] = (),
    ) -> JobResult:
        """Start a new job and run it in this process until it is done, waits, parks or
        fails (see JobResult).

        target: a path to a .py file (its main() runs), "module:function", or a
        module-level function of an importable module. args become the agent's
        sys.argv[1:] (strings, as `snaprun run`); the entry function is called with no
        arguments. Without job_id one is derived from the module's name.
        record_http=True (as `snaprun run --record-http`): every HTTP request the job
        sends through httpx or requests is recorded in its ledger (snapstate.record_http);
        http_reads (implies it): host/path patterns of requests that change nothing. Kept
        with the job: resume(), the worker and fork keep it."""
        entry = _entry_of(target)
        if record_http or http_reads:
            reads = check_reads(http_reads, "Store.start(http_reads=...)")
            entry = dataclasses.replace(entry, record_http=reads)
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
    ) -> ApprovalView:
        """Grant a pending approval (`snaprun approve`); resume() (or the worker) then
        continues the job. Returns the decided approval."""
        validate_job_id(job_id)
        with self._home() as home:
            row = _approvals.decide(home, job_id, approval_id, granted=True, by=by, note=note)
            return approval_view(home, row, clock().time())

    def reject(
        self, job_id: str, approval_id: str, by: str | None = None, reason: str | None = None
    ) -> ApprovalView:
        """Reject a pending approval (`snaprun reject`): the agent's request_approval()
        raises ApprovalRejected when the job resumes. Returns the decided approval."""
        validate_job_id(job_id)
        with self._home() as home:
            row = _approvals.decide(home, job_id, approval_id, granted=False, by=by, note=reason)
            return approval_view(home, row, clock().time())

    def approvals(self, *, include_decided: bool = False) -> list[ApprovalView]:
        """The approvals waiting for a decision, oldest first (`snaprun approvals`); with
        include_decided, every approval of the store, decided and expired ones too
        (`snaprun approvals --all`)."""
        with self._home(readonly=True) as home:
            now = clock().time()
            return [approval_view(home, r, now) for r in approval_rows(home, every=include_decided)]

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

    def snapshots(self, job_id: str) -> list[SnapshotView]:
        """A job's snapshots, oldest first (`snaprun log` shows them with the rest of its
        timeline); JobNotFound or InvalidJobId as `snaprun` reports them."""
        validate_job_id(job_id)
        with self._home(readonly=True) as home:
            return snapshot_views(home, job_id)

    def effects(self, job_id: str) -> list[EffectView]:
        """A job's effect ledger, in order (`snaprun effects`)."""
        validate_job_id(job_id)
        with self._home(readonly=True) as home:
            return effect_views(home, job_id)
