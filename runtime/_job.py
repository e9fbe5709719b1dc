"""Jobs: an entry function running in a greenlet, frozen at each snapshot().

snapshot() switches from the agent's greenlet to the hub (the greenlet that started
the job). With the agent paused, the hub captures its stack and the agent's module
globals, pickles them in one pass, writes the snapshot file durably, and switches
back. A snapshot that cannot be taken is thrown into the agent as SnapshotError at
the snapshot() call; the job carries on and earlier snapshots stay valid.

Restoring imports the agent's modules, checks the interpreter, the libraries and
every frame's code against the snapshot's header before a byte is unpickled, then
builds the chain of morph frames and runs it in a fresh agent greenlet.

Why this module is long: `Job` is one state machine (create, lease, run loop, freeze,
hibernate, restore, finish) whose steps share the lease, the ledger and the switch
protocol's invariants; the parts that stand alone live beside it (the switch messages in
runtime/_switch.py, waits in runtime/_waits.py, capture and morph, the schedulers).
"""

from __future__ import annotations

import contextvars
import inspect
import json
import os
import secrets
import sys
import tempfile
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

import cloudpickle
import greenlet

from .._errors import (
    HeaderMismatch,
    IncompatibleSnapshot,
    JobFinished,
    JobNotFound,
    JobParked,
    JobWaiting,
    RestoreError,
    SnapshotError,
    SnapshotWriteError,
    SnapstateError,
    StaleWriter,
    StoreDamaged,
    StoreFailure,
)
from .._version import __version__
from ..resources import _secrets
from ..resources._adapters import scratch_copies, scratch_opens
from ..resources._registry import close_all_for_snapshot
from ..serializers import _pickler, _refs
from ..serializers._codeid import CodeRef, find_code, module_digest
from ..serializers._envsecrets import secret_in
from ..serializers._home import JOB_HEADER_FIELDS, Home
from ..serializers._ids import derive_job_id, validate_job_id
from ..serializers._store import WaitRow
from . import (
    _agent,
    _async,
    _async_describe,
    _async_pickle,
    _context,
    _defstate,
    _http_record,
    _pins,
    _process,
    _rootlog,
    _waits,
)
from ._capture import capture_stack, describe
from ._clock import SleepInterrupted, clock
from ._faults import fault_point
from ._frames import FrameRecord, local_names, local_names_for_header
from ._lease import Lease
from ._ledger import Ledger, explain_ambiguous
from ._morph import build_resume_chain
from ._points import SnapshotPoint
from ._repair import check_accepted
from ._scheduler import Scheduler
from ._switch import (
    PARKED_AGENTS,
    SWITCH_CODES,
    Done,
    FreezeRequest,
    SnapshotInfo,
    Stop,
    in_coroutine,
)
from ._tasks import task_bootstrap
from ._waits import API_CODES, WaitRequest, wait_api

if TYPE_CHECKING:
    import logging
    from types import FrameType

    from ..serializers._store import EffectRow

__all__ = ["snapshot", "Job", "Debugger", "runtime_versions"]


class Debugger(Protocol):
    """A debug session (runtime/_debug.py) as the job it runs sees it: both calls are
    made in the agent's greenlet, with the agent's frame that goes on next."""

    def restored(self, frame: FrameType) -> None:
        """The restored agent's innermost frame is about to continue after snapshot()."""

    def snapshot_taken(self, info: SnapshotInfo, frame: FrameType) -> None:
        """snapshot() (which writes nothing in a debug session) returns `info` to
        `frame`."""


def snapshot(label: str | None = None, meta: dict[str, Any] | None = None) -> SnapshotInfo:
    """Declare a snapshot point: freeze the whole job here, durably, and continue.

    `meta`: a dict of JSON values recorded in this snapshot's header (shown by `snaprun
    ls --json` and `inspect`; TypeError for anything else). The job's pins (pin()) are
    recorded too. Outside a job (the agent run by plain Python) it does nothing and
    returns a record with seq None. Raises SnapshotError when this point cannot be
    frozen."""
    checked = _pins.check_meta(meta)
    leaked = secret_in(label, json.dumps(checked) if checked else None)
    if leaked is not None:
        raise SnapshotError(
            f"snapshot(): its label or meta holds the value of the environment variable "
            f"{leaked}, and both are written in the snapshot's header and listed by snaprun "
            "ls and inspect (in clear in a plain store); keep the secret out of them"
        )
    if in_coroutine(1):  # `await snapshot()`: an await point (runtime/_points.py)
        return SnapshotPoint(label, checked)  # type: ignore[return-value]
    job = _context.active_job()
    if job is None:
        return SnapshotInfo(False, 0.0, None, label, checked, _pins.pins())
    if job._async is not None:
        caller = sys._getframe(1).f_code
        raise SnapshotError(
            f"snapshot() was called in {caller.co_qualname}() at {caller.co_filename}, a plain "
            "function of an async job: the coroutines that called it cannot be frozen in the "
            "middle of a plain call. Call `await snapshot()` in the async def instead"
        )
    if not job._is_task(greenlet.getcurrent()):
        raise SnapshotError(
            "snapshot() was called from a greenlet or thread the job did not "
            "start; call it from the agent's own code"
        )
    # The hub switches back the SnapshotInfo of this snapshot (or throws into it).
    assert job._hub is not None  # set with _agent while the job runs
    info: SnapshotInfo = job._hub.switch(FreezeRequest(label, sys.exception(), meta=checked))
    if job.debugger is not None:  # `snaprun debug --until`: maybe the point to stop at
        job.debugger.snapshot_taken(info, sys._getframe(1))
    return info


SWITCH_CODES.add(snapshot.__code__)


def _bootstrap(
    fn: Callable[..., object], args: tuple[object, ...], kwargs: dict[str, object]
) -> Done:
    return Done(fn(*args, **kwargs))


def runtime_versions() -> dict[str, str]:
    return {
        "python": f"{sys.implementation.name}-{sys.version_info[0]}.{sys.version_info[1]}",
        "python_full": sys.version.split()[0],
        "greenlet": greenlet.__version__,
        "cloudpickle": cloudpickle.__version__,
        "snapstate": __version__,  # the writer (CHANGELOG.md: versions and compatibility)
    }


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def check_versions(header: dict[str, Any], where: str) -> None:
    """IncompatibleSnapshot listing every runtime difference, if any."""
    now = runtime_versions()
    then = header.get("versions", {})
    changes = []
    if then.get("python") != now["python"]:
        changes.append(
            f"Python {then.get('python_full') or then.get('python')} -> {now['python_full']}"
        )
    for lib in ("greenlet", "cloudpickle"):
        if _minor(then.get(lib, "?")) != _minor(now[lib]):
            changes.append(f"{lib} {then.get(lib)} -> {now[lib]}")
    if changes:
        raise IncompatibleSnapshot(
            f"{where} was taken under another runtime: {'; '.join(changes)}. Resume it with "
            f"the interpreter and library versions it was taken with "
            f"(Python {then.get('python_full')})."
        )


def waiting_message(job_id: str, kind: str, outcome: _waits.NotYet, seq: int) -> str:
    """What a hibernating job's runner says: why it waits and exactly what continues
    it (an approval: the commands that decide it; a timer or a rate limit: when, and
    the worker or a resume)."""
    saved = f"It was saved at snapshot {seq} and no process is kept"
    if kind == "approval" and outcome.approval_id is not None:
        decide = f"snaprun approve {job_id} {outcome.approval_id}"
        return (
            f"job {job_id} waits: {outcome.reason}. {saved}: decide with `{decide}` (or "
            f"`snaprun reject {job_id} {outcome.approval_id}`), then `snaprun worker` "
            f"continues it (or `snaprun resume {job_id}`)"
        )
    if outcome.due is None:
        return (
            f"job {job_id} waits: {outcome.reason}. {saved}: `snaprun worker` continues it "
            f"once it can go on (or `snaprun resume {job_id}`)"
        )
    due = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(outcome.due))
    return (
        f"job {job_id} waits: {outcome.reason}; due {due}. {saved}: then a running "
        f"`snaprun worker` continues it (or `snaprun resume {job_id}` once it is due)"
    )


class Job:
    """One agent run in a store: its entry point, lease, and snapshot sequence.

    The catalog row exists before anything runs (`Job.create`); every run or resume
    holds the job's lease, and every snapshot is committed with compare-and-swap
    against the lease epoch, so only one runner ever moves a job forward."""

    # Set by _rootlog and _process on the job they serve (absent until then).
    _root_log_baseline: tuple[list[logging.Handler], int]
    _root_log_owned: bool
    _process_tracker: _process._Tracker
    _pins: dict[str, Any]  # runtime/_pins.py: pin()'s values, kept in the frozen state

    def __init__(self, home: Home, job_id: str, entry: _agent.EntryPoint, argv: list[str]) -> None:
        self.home = home
        self.job_id = job_id
        self.entry = entry
        self.argv = list(argv)
        self.seq = 0
        self.epoch: int | None = None
        self.lease: Lease | None = None
        self.last_snapshot: str | None = None
        self._resumed: dict[str, Any] | None = None
        self._hub_error: BaseException | None = None
        # The job's catalog status and error when this run took it over: what it keeps
        # when the run stops on a damaged store (a row refused), so it stays as it was.
        self._before: tuple[str, str | None] = ("interrupted", None)
        self._before_wait: WaitRow | None = None  # and, waiting, its wait row
        self._hub: greenlet.greenlet | None = None
        self._agent: greenlet.greenlet | None = None
        self.say: Callable[[str], None] = lambda message: None  # the CLI's stderr notes
        self.ledger = Ledger(self)
        self.replay_stop: str | None = None
        self.debugger: Debugger | None = None  # a replay that is a debug session
        self._restart_at: float | None = None
        # Called on the hub right after each snapshot is committed (SIGTERM --grace).
        self.after_commit: Callable[[int], None] | None = None
        self.finishing = False  # the run is over: recording its outcome
        self.napping = False  # sleeping in _settle: a SIGTERM --grace may end the sleep
        self.no_naps = False  # a SIGTERM --grace came: hibernate at waits, never sleep
        # A restore at a wait: the wait, then (once polled ready) how it ends.
        self._restored_wait: _waits.Wait | None = None
        # The agent greenlet's context variables at the snapshot restored from (a sync job)
        self._restored_context: contextvars.Context | None = None
        self._ready: _waits.Ready | None = None
        # A debug session restored at a wait that is not over: why it ends there, once
        # the debugger has been opened at the wait (Job._debugging).
        self._unready: str | None = None
        # The hub's scheduler (runtime/_tasks.py): set by _loop, or by restore() for a
        # snapshot of several tasks.
        self._scheduler: Scheduler | None = None
        # An async agent's runner (runtime/_async.py), while its event loop runs.
        self._async: _async.AsyncRunner | None = None
        # Recording HTTP at the transport (runtime/_http_record.py), or None.
        self._recording: _http_record.Recording | None = None

    def _is_task(self, glet: greenlet.greenlet) -> bool:
        """`glet` is one of this job's tasks (main or spawned)."""
        return (
            glet is self._agent
            or (self._scheduler is not None and glet in self._scheduler.by_glet)
            or (self._async is not None and glet in self._async.effect_glets)
        )

    @classmethod
    def create(
        cls, home: Home, entry: _agent.EntryPoint, argv: list[str], job_id: str | None = None
    ) -> Job:
        if job_id is None:  # from the script's name, sanitized: `my agent!.py` is fine
            job_id = derive_job_id(entry.module.split(".")[-1], secrets.token_hex(4))
        validate_job_id(job_id)
        _refuse_leftover_files(home, job_id)
        # The entry point is loaded before the job exists: a script without main() or
        # a missing module:function is refused (EntryPointError) leaving no job whose
        # module code would re-run on every resume. Loading it again to run is free.
        sys.argv = [entry.path or entry.module, *argv]
        host_logging = _rootlog.baseline()  # before the agent's import configures it
        entry.load()
        home.catalog.create_job(job_id, entry.as_dict(), list(argv))
        job = cls(home, job_id, entry, argv)
        job._root_log_baseline = host_logging
        return job

    @classmethod
    def open(cls, home: Home, job_id: str) -> Job:
        validate_job_id(job_id)
        row = home.catalog.get_job(job_id)
        try:
            entry = _agent.EntryPoint.from_dict(row.entry)
        except ValueError as exc:
            raise StoreDamaged(
                f"job {job_id}: the catalog's entry point of the job is damaged ({exc}); "
                f"nothing was run. Restore {home.directory}/catalog.db from a backup"
            ) from None
        return cls(home, job_id, entry, row.argv)

    # ------------------------------------------------------------------ running
    def run(self, *, force: bool = False) -> object:
        """Run the entry function from the start under the job's lease; returns its
        result and records the outcome in the catalog."""
        check_accepted(self.home.catalog, self.job_id)  # a job rebuilt by repair waits
        self._acquire(force=force, resuming=False)
        return self._run_leased(self.prepare)

    def resume(self, at: int | None = None, *, force: bool = False) -> object:
        """Continue the job after its latest snapshot (or snapshot `at`, dropping the
        later ones); with no snapshot yet, from the start of its entry function.
        A done job never runs again (JobFinished), whichever way it is resumed."""
        row = self.home.catalog.get_job(self.job_id)
        if row.status == "waiting":  # its wait row verifies, or the store is damaged
            self._before_wait = self.home.catalog.get_wait(self.job_id)
        self._before = (row.status, row.error)
        if row.status == "done":
            raise JobFinished(
                f"job {self.job_id} is done; nothing to resume (`snaprun fork "
                f"{self.job_id}@SEQ` starts a copy from one of its snapshots)"
            )
        check_accepted(self.home.catalog, self.job_id)  # a job rebuilt by repair waits
        self._acquire(force=force, resuming=False)  # counted once the restore succeeded
        self._restart_at = time.time()
        self.ledger.restored = True
        return self._run_leased(lambda: self._restore_for_resume(at))

    def replay(self, at: int, debugger: Debugger | None = None) -> object:
        """Run from snapshot `at` with every effect served from the ledger and none
        dispatched, writing nothing to the store; the files, databases and temp
        directories the snapshot holds are reopened as scratch copies in a temporary
        directory (removed afterwards), never the originals. Stops where the recorded
        history ends (self.replay_stop says why) or raises DivergenceError at the
        first divergence.

        With a `debugger` it is a debug session (`snaprun debug`, runtime/_debug.py):
        the same sandbox, the debugger called where the restored agent continues and
        after each snapshot(); an effect the ledger cannot answer raises EffectRefused
        into the agent instead of ending the run, and a divergence ends it."""
        self.ledger.replay = True
        self.debugger = debugger
        row = self.home.catalog.snapshot(self.job_id, at)
        path = self.home.where(row)
        header, payload = self.home.read_row(row)  # the very snapshot the row recorded
        if debugger is not None and header.get("async"):
            raise RestoreError(
                f"snapshot {at} of job {self.job_id} is an async job's (async def main()): "
                "snaprun debug opens a debugger in greenlet jobs only; `snaprun replay "
                f"{self.job_id}@{at}` runs it in the same sandbox, without one"
            )
        with (
            tempfile.TemporaryDirectory(prefix="snaprun-replay-") as scratch,
            scratch_copies(scratch),
            scratch_opens(),
        ):
            return self._loop(self.restore(header, payload, path), (), {})

    # called by the ledger, in the agent's greenlet
    def park(self, row: EffectRow, call_site: str) -> None:
        assert self._hub is not None  # called by the agent, so the job runs
        self._hub.switch(Stop(JobParked(explain_ambiguous(self.job_id, row)), "parked"))

    def refuse(self, error: SnapstateError) -> None:
        """Stop the run here with `error`, the agent paused: a recorded HTTP request that
        does not match the ledger (nothing was sent; raised into the agent, an SDK that
        retries on any error would send it as a new request)."""
        assert self._hub is not None  # called by the agent, so the job runs
        self._hub.switch(Stop(error, "refused"))

    def fenced(self, error: StaleWriter) -> None:
        """This runner may no longer send (its lease is lost or about to be): the run
        stops here, the agent stays paused (no agent code runs after it)."""
        assert self._hub is not None  # called by the agent, so the job runs
        self._hub.switch(Stop(error, "stale"))

    def end_replay(self, reason: str) -> None:
        assert self._hub is not None  # called by the agent, so the job runs
        self._hub.switch(Stop(None, reason))

    def store_failed(self, exc: StoreFailure | StoreDamaged) -> None:
        """The store failed under the agent (recording an effect), or a catalog row it
        read was refused (StoreDamaged: its signature does not verify): stop the run
        here, the agent paused, so none of its code (except/finally blocks) runs after
        it, and the agent never sees the error."""
        assert self._hub is not None  # called by the agent, so the job runs
        reason = "the store failed"
        if isinstance(exc, StoreDamaged):
            self._hub_error = exc  # the store's damage, not the agent's failure (exit 2)
            reason = "the store is damaged"
        self._hub.switch(Stop(exc, reason))

    def progressed(self) -> None:
        """The first new durable progress after a restart: record how long it took."""
        if self._restart_at is not None:
            self.home.catalog.set_metric(
                self.job_id, "restart_to_progress_s", time.time() - self._restart_at
            )
            self._restart_at = None

    def prepare(self) -> Callable[..., object]:
        """Load the entry point; returns the function to run."""
        _process.begin(self)  # the environment the job's changes are measured against
        _rootlog.begin(self)  # root logger handlers already there are the host's
        _http_record.begin(self)  # `snaprun run --record-http`
        sys.argv = [self.entry.path or self.entry.module, *self.argv]
        fn = self.entry.load()
        if inspect.iscoroutinefunction(fn):  # async def main(): on the job's event loop
            return _async.entry(self, fn)
        return fn

    def _acquire(self, *, force: bool, resuming: bool) -> None:
        self.lease = Lease(self.home.catalog, self.job_id, say=self.say)
        self.epoch = self.lease.acquire(force=force, resuming=resuming)

    def _restore_for_resume(self, at: int | None) -> Callable[..., object]:
        epoch = self.epoch
        assert epoch is not None  # the lease was acquired first
        rows = self.home.catalog.snapshots(self.job_id)
        if at is not None:
            row = self.home.catalog.snapshot(self.job_id, at)
        elif rows:
            row = rows[-1]
        else:
            fn = self.prepare()
            self.home.catalog.record_resume(
                self.job_id,
                epoch,
                "no snapshot yet: restarted from the start of the entry function",
            )
            self.say(
                f"job {self.job_id} has no snapshot yet: restarting its entry function "
                "(the effect ledger keeps completed side effects from repeating)"
            )
            return fn
        path = self.home.where(row)
        # Refuses another job's file, a dropped branch's file, any file but the row's.
        header, payload = self.home.read_row(row)
        outer = self.restore(header, payload, path)
        # Only now that the snapshot is known good: rewinding drops the later ones.
        later = [r for r in rows if r.seq > row.seq]
        for r in reversed(later):
            self.home.catalog.delete_snapshot(self.job_id, r.seq)
            self.home.delete_file(r.file)
        if later:
            self.home.catalog.log_event(
                self.job_id,
                "rewound",
                f"to snapshot {row.seq}; dropped {', '.join(str(r.seq) for r in later)}",
            )
        self.home.catalog.record_resume(self.job_id, epoch, f"from snapshot {row.seq}")
        self.say(f"job {self.job_id} resumed from snapshot {row.seq}")
        return outer

    def _run_leased(self, load: Callable[[], Callable[..., object]]) -> object:
        """Load (start or restore) and run under the lease just acquired; record the
        outcome. A stale runner records nothing: the job is someone else's."""
        outcome: str | None = "failed"
        error: str | None = None
        try:
            fn = load()
            result = self._loop(fn, (), {})
            outcome = "done"
            return result
        except KeyboardInterrupt:
            outcome, error = "interrupted", "stopped by Ctrl-C"
            raise
        except StaleWriter:
            outcome = None
            raise
        except JobParked as exc:
            outcome, error = "parked", str(exc)
            raise
        except JobWaiting:
            outcome = "waiting"  # recorded with its wait row by catalog.hibernate()
            raise
        except StoreFailure as exc:
            # The store failed, not the agent: the job stays interrupted (resumable).
            outcome, error = "interrupted", str(exc)
            raise
        except StoreDamaged as exc:
            if exc is self._hub_error or self._agent is None:
                # a catalog row (or file) refused before or under the agent: the store
                # is damaged, not the job; it keeps the status it had (resumable once
                # the row is restored), and nothing of the agent's is recorded
                outcome, error = "unchanged", None
            else:
                error = f"{type(exc).__name__}: {exc}"
            raise
        except SnapstateError as exc:
            if exc is self._hub_error or self._agent is None:
                # the snapshot write failed, or the job could not even start/restore
                outcome, error = "interrupted", str(exc)
            else:
                error = f"{type(exc).__name__}: {exc}"
            raise
        except BaseException as exc:
            error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            self._finish(outcome, error)

    def _finish(self, outcome: str | None, error: str | None) -> None:
        self.finishing = True
        # The run's last body, kept to compare the next snapshot with, is of no use to
        # another run (a new epoch): a host running jobs one after another frees it.
        self.home.chunks.forget(self.job_id)
        lease = self.lease
        if lease is None:
            return
        lease.stop()
        if outcome is None or lease.lost is not None:
            return
        if outcome == "unchanged":  # a refused row: the job goes back to how it was
            outcome, error = self._before
            if outcome == "waiting" and self._before_wait is not None:
                # taking the lease dropped its wait row: put it back as it was
                assert self.epoch is not None  # the lease is held
                try:
                    self.home.catalog.hibernate(self._before_wait, epoch=self.epoch)
                except (StaleWriter, StoreFailure):
                    return
        if outcome == "waiting":
            try:
                lease.release()
            except (StaleWriter, StoreFailure):
                pass  # the wait is recorded; the lease dies with this process
            return
        try:
            if outcome == "done":
                self.ledger.flush()
            self.home.catalog.set_status(self.job_id, outcome, epoch=self.epoch, error=error)
        except StaleWriter:
            return
        except StoreFailure:
            # The outcome cannot be recorded: the job's status stays "running" under a
            # lease whose runner is about to exit, which shows it as interrupted (and
            # `snaprun resume` takes it over without --force). A finished run must not
            # be reported as done, since its end is not durable: the failure propagates.
            if outcome == "done":
                raise
            return
        try:
            lease.release()
        except (StaleWriter, StoreFailure):
            pass  # the outcome is recorded; the lease dies with this process

    def _loop(
        self, fn: Callable[..., object], args: tuple[object, ...], kwargs: dict[str, object]
    ) -> object:
        outer = _context.active_job()
        self._hub = greenlet.getcurrent()
        self._agent = greenlet.greenlet(_bootstrap, parent=self._hub)
        if self._restored_context is not None:  # the values it had at the snapshot
            self._agent.gr_context, self._restored_context = self._restored_context, None
        scheduler = self._scheduler = self._scheduler or Scheduler(self)
        _context.set_active_job(self)
        try:
            if self._restored_wait is not None:  # polled before any of its code runs
                wait, self._restored_wait = self._restored_wait, None
                try:
                    outcome = self._settle(wait)
                except (JobWaiting, StaleWriter, StoreFailure):
                    raise
                except SnapstateError as exc:  # e.g. a damaged catalog row: no agent
                    self._hub_error = exc  # code ran, the job stays resumable (exit 2)
                    raise
                if isinstance(outcome, _waits.NotYet):
                    stop = f"the job waits at {wait.site} ({outcome.reason})"
                    if self.ledger.replay and self.debugger is not None:
                        self._unready = stop  # the debugger opens at the wait first
                    elif self.ledger.replay:
                        self.replay_stop = stop
                        return None
                    else:
                        self._hibernate(wait, outcome, self.seq)  # at its latest snapshot
                        raise AssertionError("not reached: _hibernate raises")
                else:
                    self._ready = outcome
            # The hub runs the main task (and the tasks it spawns) until the job ends:
            # snapshots and waits of a job without tasks are handled exactly as before.
            return scheduler.run(fn, args, kwargs)
        finally:
            _context.set_active_job(outer)
            scheduler.close()
            self._scheduler = None  # a later run (a replay) starts or restores its own

    def _take_snapshot(self, request: FreezeRequest) -> object:
        """Freeze, write and commit; returns what the agent sends the hub next."""
        agent = self._agent
        assert agent is not None  # the agent asked for this snapshot
        seq = self.seq + 1
        close_all_for_snapshot()  # resource() handles reopen on their next use
        try:
            header, payload = self._freeze(request, seq)
        except SnapshotError as exc:
            return agent.throw(exc)
        if self.ledger.replay:  # a replay writes nothing
            self.seq = seq
            return agent.switch(self._live_info(seq, request, header))
        self._commit(seq, request.label, header, payload)
        if self.after_commit is not None:
            self.after_commit(seq)  # may end the process (SIGTERM --grace)
        return agent.switch(self._live_info(seq, request, header))

    @staticmethod
    def _live_info(seq: int, request: FreezeRequest, header: dict[str, Any]) -> SnapshotInfo:
        return SnapshotInfo(False, 0.0, seq, request.label, request.meta, dict(header["pins"]))

    def _commit(self, seq: int, label: str | None, header: dict[str, Any], payload: bytes) -> None:
        """Write snapshot `seq` durably and commit it (compare-and-swap on the lease
        epoch). A failure is fatal for this run: the agent stays paused."""
        agent = self._agent
        assert agent is not None  # the agent asked for this snapshot
        try:
            if self.lease is not None and self.lease.lost is not None:
                raise self.lease.lost
            assert self.epoch is not None  # run() and resume() take the lease first
            written = self.home.write_snapshot(self.job_id, seq, self.epoch, label, header, payload)
            fault_point("before-commit", seq)
            self.ledger.flush()
            self.home.commit_snapshot(written)
            self.progressed()
        except (SnapshotWriteError, StaleWriter, StoreFailure) as exc:
            # Fatal for this run: the agent stays paused and is never resumed here.
            self._hub_error = exc
            if agent is not None:
                PARKED_AGENTS.append(agent)
            raise
        self.seq, self.last_snapshot = seq, self.home.where(written.row)
        fault_point("after-snapshot", seq)

    # ------------------------------------------------------------------ waiting
    def _settle(self, wait: _waits.Wait) -> _waits.Ready | _waits.NotYet:
        """Poll until the wait is ready, sleeping in the process through a due time
        within hibernate_after(); returns Ready, or the NotYet to hibernate on."""
        limit = _waits.hibernate_after()
        while True:
            outcome = _waits.poll(self, wait)
            if isinstance(outcome, _waits.Ready) or outcome.due is None:
                return outcome
            left = outcome.due - clock().time()
            if left > limit or self.ledger.replay and left > 0:
                return outcome
            # A SIGTERM with --grace ends this sleep (SleepInterrupted, raised by
            # runtime/_signals.py only while `napping`; one that came earlier set
            # `no_naps`): the job hibernates at the wait right away instead of sleeping
            # on through the grace.
            try:
                self.napping = True
                if self.no_naps:
                    raise SleepInterrupted
                clock().sleep(max(0.0, left))
                self.napping = False
            except SleepInterrupted:
                self.napping = False
                return outcome

    def _wait(self, request: WaitRequest) -> object:
        """The agent waits: deliver what the wait ends with once it is ready, or take a
        snapshot right here and hibernate (JobWaiting). Returns the agent's next
        message."""
        agent = self._agent
        assert agent is not None  # the agent asked for this wait
        try:
            outcome = self._settle(request.wait)
        except StoreDamaged as exc:  # a wait or approval row refused: the store's
            self._hub_error = exc  # damage, the agent stays paused (exit 2)
            PARKED_AGENTS.append(agent)
            raise
        if isinstance(outcome, _waits.Ready):
            if outcome.error is not None:
                return agent.throw(outcome.error)
            return agent.switch(outcome.value)
        if self.ledger.replay:  # a replay writes nothing: it ends where the run waited
            PARKED_AGENTS.append(agent)
            return Stop(None, f"the job waits at {request.wait.site} ({outcome.reason})")
        seq = self.seq + 1
        close_all_for_snapshot()
        label = f"waiting: {outcome.reason}"
        try:
            header, payload = self._freeze(FreezeRequest(label, request.handled, request.wait), seq)
        except SnapshotError as exc:
            return agent.throw(exc)  # raised at the wait: the job carries on
        self._commit(seq, label, header, payload)
        PARKED_AGENTS.append(agent)  # its state is in the file; this run ends here
        self._hibernate(request.wait, outcome, seq)

    def _hibernate(self, wait: _waits.Wait, outcome: _waits.NotYet, seq: int) -> NoReturn:
        """Record why the job waits (status waiting) and end this run: JobWaiting."""
        assert self.epoch is not None  # run() and resume() take the lease first
        self.ledger.flush()
        self.home.catalog.hibernate(
            WaitRow(
                job_id=self.job_id,
                kind=wait.kind,
                reason=outcome.reason,
                due=outcome.due,
                since=clock().time(),
                seq=seq,
                approval_id=outcome.approval_id,
            ),
            epoch=self.epoch,
        )
        raise JobWaiting(
            waiting_message(self.job_id, wait.kind, outcome, seq),
            due=outcome.due,
            kind=wait.kind,
        )

    @wait_api  # a continuation may wait again here (a rate limit): not captured
    def _deliver(self) -> object:
        """The restored wait's outcome, as the value of the agent's wait call."""
        ready, self._ready = self._ready, None
        assert ready is not None, "a restored wait is delivered once it is ready"
        if ready.error is not None:
            raise ready.error
        if isinstance(ready.value, _waits.Then):  # produced in the agent's task
            return ready.value.fn()
        return ready.value

    # ------------------------------------------------------------------ freezing
    def _capture_task(
        self, name: str, glet: greenlet.greenlet, handled: BaseException | None, label: str
    ) -> list[FrameRecord]:
        """The frames of a task of a job with several tasks, paused at a switch point."""

        top = glet.gr_frame
        if top is None or top.f_code not in SWITCH_CODES:
            where = f" (its frame: {describe(top)})" if top is not None else ""
            raise SnapshotError(
                f"{label} failed: task {name} is not paused at a switch point (snapshot(), an "
                f"effect, a wait, gather() or result()){where}: it runs code the job did not "
                "start (a raw greenlet switch?). Let the task reach a snapstate switch point."
            )
        while top.f_back is not None and top.f_back.f_code in API_CODES:
            top = top.f_back  # the task's call receives the wait's outcome
        stop = _bootstrap.__code__ if glet is self._agent else task_bootstrap.__code__
        try:
            return capture_stack(top, stop, handled)
        except SnapshotError as exc:
            raise SnapshotError(f"{label} failed: task {name}: {exc}") from None

    def _freeze(self, request: FreezeRequest, seq: int) -> tuple[dict[str, Any], bytes]:
        assert self._agent is not None  # the agent asked for this snapshot
        label = f"snapshot {seq}" + (f" ({request.label})" if request.label else "")
        tasks: list[dict[str, Any]] | None = None
        frames: list[FrameRecord]
        if request.async_state is not None:  # an async job: its tasks, pickled below
            frames = []
        elif self._scheduler is not None and self._scheduler.active:  # several tasks
            frames, tasks = self._scheduler.capture(
                lambda name, glet, handled: self._capture_task(name, glet, handled, label)
            )
        else:
            top = self._agent.gr_frame
            if top is None or top.f_code not in SWITCH_CODES:
                raise SnapshotError("the job is not paused in snapshot() or at a wait")
            while top.f_back is not None and top.f_back.f_code in API_CODES:
                top = top.f_back  # the agent's call receives the wait's outcome
            try:
                frames = capture_stack(top, _bootstrap.__code__, request.handled)
            except SnapshotError as exc:
                raise SnapshotError(f"{label} failed: {exc}") from None
        modules = _agent.agent_modules(self.entry)
        state = {
            "process": _process.capture(self),  # first: its env is applied first
            "frames": frames,
            "globals": _agent.capture_globals(modules),
            "defs": _defstate.capture(modules),  # functions' and classes' state
            "handled": request.handled,
            "label": request.label,
            "effects": self.ledger.ordinal,
            "logging": _rootlog.capture(self),  # basicConfig(...) in main()
            "wait": request.wait.as_dict() if request.wait is not None else None,
            "pins": dict(_pins.current(self)),
        }
        if self._recording is not None:  # record_http(): kept for the restored job
            state["record_http"] = _http_record.capture(self)
        context = self._agent.gr_context if request.async_state is None else None
        if context is not None and len(context):  # context variables the agent set
            state["context"] = context
        if tasks is not None:  # every task's state, pickled in the same pass
            state["tasks"] = tasks
        if request.async_state is not None:
            state["async"] = request.async_state
        try:
            _secrets.bind(self.home.keys)  # credentials in SDK clients are sealed
            _refs.bind(modules)  # other modules' objects are saved by reference
            payload = _pickler.dumps(state, roots=lambda: self._roots(state))
        except _pickler.UnpicklableError as exc:
            fix = f" {exc.fix}" if exc.fix else ""  # the fix for that kind of object
            raise SnapshotError(f"{label} failed: {exc}.{fix}") from None
        header = {
            "job_id": self.job_id,
            "seq": seq,
            "epoch": self.epoch,
            "label": request.label,
            "created_at": time.time(),
            "versions": runtime_versions(),
            "entry": self.entry.as_dict(),
            "argv": self.argv,
            "frames": _frame_headers(frames),
            "modules": _agent.module_digests(modules),
            "effects": self.ledger.ordinal,
            "meta": request.meta,  # sealed in encrypted stores, with the label
            "pins": state["pins"],
        }
        if tasks is not None:  # for _check_code and `snaprun inspect`
            header["tasks"] = [
                {
                    "id": t["id"],
                    "parent": t["parent"],
                    "status": t["status"],
                    "frames": header["frames"]
                    if t["id"] == "main"
                    else _frame_headers(t["frames"]),
                }
                for t in tasks
            ]
        if request.wait is not None:
            header["wait"] = {"kind": request.wait.kind, "site": request.wait.site}
        if request.async_state is not None:  # main's coroutines, and every task's
            header["async"] = True
            header["frames"], header["tasks"] = _async_describe.frame_headers(request.async_state)
        return header, payload

    @staticmethod
    def _roots(state: dict[str, Any]) -> list[tuple[str, object]]:
        """Where every part of the state comes from, for naming an unpicklable object."""
        roots: list[tuple[str, object]] = []
        stacks: list[tuple[str, list[FrameRecord]]] = [("main", state["frames"])]
        for t in state.get("tasks") or []:
            if t["id"] != "main":
                stacks.append((t["id"], t["frames"] or []))
            for what in ("result", "error", "handled", "context"):
                if t.get(what) is not None:
                    roots.append((f"task {t['id']}, its {what}", t[what]))
        for task, records in stacks:
            for rec in records:
                try:
                    names = local_names(find_code(rec.code))
                except Exception:
                    names = []
                for i, value in enumerate(rec.slots):
                    name = names[i] if i < len(names) else f"slot {i}"
                    roots.append((f"task {task}, frame {rec.where}, local {name!r}", value))
                for i, value in enumerate(rec.stack):
                    roots.append((f"task {task}, frame {rec.where}, value stack [{i}]", value))
                if rec.instance is not None:
                    roots.append(
                        (f"task {task}, frame {rec.where}, object being constructed", rec.instance)
                    )
        for module, values in state["globals"].items():
            for name, value in values.items():
                roots.append((f"module {module}, global {name!r}", value))
        if state.get("async") is not None:
            roots.extend(_async_describe.roots(state["async"]))
        roots.extend(_defstate.roots(state.get("defs", {})))
        roots.append(("the exception being handled", state["handled"]))
        roots.append(("the root logger's handlers", state.get("logging")))
        roots.append(("the agent's context variables", state.get("context")))
        return roots

    # ------------------------------------------------------------------ restoring
    def restore(
        self, header: dict[str, Any], payload: bytes | bytearray, where: str
    ) -> Callable[[], object]:
        """Check a verified snapshot against this interpreter and code, unpickle it;
        returns the function that continues the job right after its snapshot()."""
        missing = JOB_HEADER_FIELDS - set(header)
        if missing:
            raise HeaderMismatch(
                f"{where} has no snapshot header (missing {', '.join(sorted(missing))})"
            )
        check_versions(header, where)
        sys.argv = [self.entry.path or self.entry.module, *self.argv]
        _rootlog.begin(self)
        try:
            self.entry.import_module()
        except SnapstateError:
            raise
        except Exception as exc:
            raise IncompatibleSnapshot(
                f"{where} cannot be resumed: the agent's code no longer imports "
                f"({type(exc).__name__}: {exc}). Restore the original source to resume this "
                "job."
            ) from None
        self._check_code(header, where)
        try:
            _secrets.bind(self.home.keys)
            if header.get("async"):
                _async_pickle.begin_restore()
            state = _pickler.loads(payload)
            restored = _async_pickle.take_restored()  # an async job's tasks and futures
        except SnapstateError:
            _async_pickle.discard_restored()
            raise
        except (ImportError, AttributeError) as exc:
            _async_pickle.discard_restored()
            raise IncompatibleSnapshot(
                f"{where} refers to code that no longer exists ({type(exc).__name__}: {exc}). "
                "Restore the original source to resume this job."
            ) from None
        except Exception as exc:
            _async_pickle.discard_restored()
            seq = header.get("seq")
            earlier = (
                f"snaprun resume {self.job_id} --at {seq - 1} continues from the snapshot "
                "before it (later ones are dropped)"
                if isinstance(seq, int) and seq > 1
                else "the job has no earlier snapshot: start it again"
            )
            raise RestoreError(
                f"{where} could not be unpickled ({type(exc).__name__}: {str(exc)[:300]}); "
                f"nothing was changed. {earlier}."
            ) from None
        _agent.restore_globals(state["globals"])
        _defstate.restore(state.get("defs", {}), state["globals"])  # onto the fresh import
        _process.restore(self, state.get("process"))  # cwd, random; env applied by loads
        _rootlog.restore(self, state.get("logging"))
        _pins.restore(self, state.get("pins"))
        _http_record.begin(self)
        _http_record.restore(self, state.get("record_http"))
        self.ledger.ordinal = state.get("effects", 0)
        self.ledger.restored = True
        self._restored_context = state.get("context")
        frames: list[FrameRecord] = state["frames"]
        self.seq = header["seq"]
        self._resumed = header
        if state.get("async") is not None:  # an async job: a fresh loop, the same tasks
            if restored is None:
                raise RestoreError(f"{where} holds an async job without its tasks")
            wait = state.get("wait")
            if wait is not None:  # taken to hibernate: the hub polls the wait first
                self._restored_wait = _waits.Wait.from_dict(wait)
            return _async.resume_job(
                self, restored, state["async"], header["created_at"], header["seq"]
            )
        if restored is not None:
            restored.loop.close()
            raise RestoreError(f"{where} holds asyncio tasks but is not an async job's")
        tasks = state.get("tasks")
        if tasks is not None:  # several tasks: each resumes with its own pending value
            scheduler = self._scheduler = Scheduler(self)
            scheduler.restore(
                tasks, build_resume_chain, header["created_at"], header["seq"], frames
            )
            if not frames:  # main had returned: it is not run again
                if self.debugger is not None:
                    raise RestoreError(
                        f"{where}: main() of job {self.job_id} had returned (only its "
                        "spawned tasks were left): snaprun debug opens the debugger in "
                        "main's frame; debug an earlier snapshot"
                    )
                return _main_done
            return build_resume_chain(frames, self._debugging(scheduler.main_deliverer()))
        wait = state.get("wait")
        if wait is not None:  # taken to hibernate: the hub polls the wait first
            self._restored_wait = _waits.Wait.from_dict(wait)
            return build_resume_chain(frames, self._debugging(self._deliver))
        return build_resume_chain(frames, self._debugging(self._resume_info))

    def _debugging(self, deliver: Callable[[], object]) -> Callable[[], object]:
        """`deliver` (what the restored agent's call receives), in a debug session
        followed by the debugger at the agent's frame that receives it."""
        debugger = self.debugger
        if debugger is None:
            return deliver

        @wait_api  # like `deliver`: a continuation may wait here, it is not captured
        def deliver_then_debug() -> object:
            frame = sys._getframe(1)  # the agent's innermost frame
            unready, self._unready = self._unready, None
            if unready is not None:  # restored at a wait that is not over: look, then stop
                debugger.restored(frame)
                self.end_replay(unready)
                raise AssertionError("not reached: the session ended at the wait")
            try:
                return deliver()
            finally:
                debugger.restored(frame)

        return deliver_then_debug

    def _check_code(self, header: dict[str, Any], where: str) -> None:
        problems: list[str] = []
        frames = list(header["frames"])
        for task in header.get("tasks") or []:
            if isinstance(task, dict) and task.get("id") != "main":
                frames.extend(task.get("frames") or [])
        for f in frames:
            ref = CodeRef(f["module"], f["qualname"], f["firstlineno"], f["digest"], f["filename"])
            try:
                find_code(ref)
            except IncompatibleSnapshot as exc:
                problems.append(getattr(exc, "change", str(exc)))
        if not problems:
            return
        changed = [
            name
            for name, digest in header.get("modules", {}).items()
            if name in sys.modules and module_digest(sys.modules[name]) != digest
        ]
        files = f" Changed files: {', '.join(changed)}." if changed else ""
        raise IncompatibleSnapshot(
            f"{where} cannot be resumed: the agent's code changed since it was taken: "
            f"{'; '.join(dict.fromkeys(problems))}.{files} Restore the original source to "
            "resume this job, or start a new job."
        )

    def _resume_info(self) -> SnapshotInfo:
        header = self._resumed
        assert header is not None  # set by restore() before the chain runs
        return SnapshotInfo(
            True,
            max(0.0, time.time() - header["created_at"]),
            header["seq"],
            header["label"],
            header.get("meta"),
            dict(header.get("pins") or {}),
        )

    # ------------------------------------------------ read-only, for the API and the CLI
    @property
    def agent_started(self) -> bool:
        """The job got as far as giving the agent's code a greenlet to run in: before
        that, an error is about the job, the snapshot or the store (invalid input)."""
        return self._agent is not None

    @property
    def hub_error(self) -> BaseException | None:
        """The snapstate error the hub itself raised while the agent ran (a snapshot
        write that failed, a damaged wait row): not the agent's, though it reaches it."""
        return self._hub_error


def _main_done() -> None:
    """Stands for the main task of a restored job whose main had already returned."""


def _frame_headers(frames: list[FrameRecord]) -> list[dict[str, Any]]:
    return [
        {
            "module": f.code.module,
            "qualname": f.code.qualname,
            "firstlineno": f.code.firstlineno,
            "digest": f.code.digest,
            "filename": f.code.filename,
            "lineno": f.lineno,
            "locals": local_names_for_header(f.code),
        }
        for f in frames
    ]


def _refuse_leftover_files(home: Home, job_id: str) -> None:
    """A new job never takes over the folder of an earlier job of that id whose
    snapshots a runner wrote (epoch >= 1): the catalog that lost it is stale, and the
    new job would overwrite them."""
    if not home.keeps_files:
        return  # PostgreSQL: no snapshot files, only rows
    try:
        home.catalog.get_job(job_id)
        return  # a known job: creating it again is JobExists
    except JobNotFound:
        pass
    folder = home.job_directory(job_id)
    try:
        names = os.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return
    written = [n for n in names if n.endswith(".snap") and not n.endswith("-e0.snap")]
    if written:
        raise StoreDamaged(
            f"the store {home.directory} holds snapshot files of a job {job_id!r} its catalog "
            f"does not know ({', '.join(sorted(written)[:3])}{', ...' if len(written) > 3 else ''}"
            f" in {folder}): the catalog may be stale (a lost catalog.db-wal, a restored "
            "backup). Nothing was created; `snaprun repair` rebuilds lost jobs from their files, "
            "or choose another id."
        )
