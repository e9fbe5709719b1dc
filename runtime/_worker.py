"""`snaprun worker`: wakes the jobs that can run again, each in a child process.

A pass asks the catalog for the jobs a worker may take: waiting ones whose timer or
rate limit is due, whose approval was decided or has expired (runnable_jobs), running
ones whose runner is gone, and interrupted ones (stopped by a signal: stopped_jobs).
Each is run by a child process, `snaprun resume --grace G JOB`, so agent code and
process state never mix: not the worker's, not another job's. At most `concurrency`
children run at once. A child is forked from a fork server (multiprocessing's
"forkserver": one fresh interpreter, started by the worker, that has imported
snapstate and its CLI and nothing of any agent), so it skips the interpreter start and
the imports that a fresh `python -m snapstate.runtime._cli` pays (most of a short job's
cost); it then runs the CLI as that would, in a process group of its own.
`SNAPSTATE_WORKER_START=exec` (or a platform without the fork server) starts each child
as a fresh interpreter instead.

Neither the fork server nor a child puts the worker's current directory (or a script's
directory) on sys.path: `python -m` and `python -c` would put it first, so a
`zstandard.py` or a stray `snapstate/` folder where the worker was started would be
imported by every child, ahead of the real ones. An exec'd child runs `python -P -m`;
the fork server is started with PYTHONSAFEPATH=1 in its environment (multiprocessing
builds its command line from the worker's own flags, so the environment is the one way
in), which its children drop again before they run (the agent's own subprocesses keep
the usual semantics); a forked child runs with the path the fork server started with
(PYTHONPATH, the standard library, site-packages), not the worker's. The agent's code
is found from the module path its job recorded (the entry point's folder, put first by
the resume), as `snaprun resume` does.

Exclusivity comes from the job's lease, which the child takes with a new fencing epoch
(runtime/_lease.py): two workers, or a worker and a manual `snaprun resume`, never run
a job at once; the loser exits 5 (LeaseHeld) and the worker logs "someone else has it",
not a failure. Before starting a child the worker also claims the job in the catalog
(claim_job: advisory, dies with the worker's process), so two workers rarely even
start two children for one job.

A child's exit code is its job's outcome: 0 done, 1 failed (the agent raised: never
retried by the worker), 2 refused, 3 waiting again, 4 parked (never resumed by the
worker: it needs `snaprun reconcile`), 5 conflict, 130/143 stopped. A child killed by
a signal (a crash) leaves its job interrupted: the worker records that at once. A run
that ends leaving its job interrupted, however (killed, or stopped by a failing store
or a snapshot it could not restore), is a crash: the worker retries the job after a
back-off that grows with each crash in a row without progress (at once after the
first, then 1 s, 2 s, 4 s... at most 60 s); after `max_crashes` of them (default 5,
`snaprun worker --max-crashes N`) it stops retrying and marks the job failed with the
reason and its last error (`snaprun resume JOB` tries it again by hand). The count,
the time of the last crash and the limit are kept in the job's metrics
(worker_crashes...), so every worker sees them and `snaprun ls` shows them; each crash
and the give-up are events of the job's timeline (`snaprun log JOB`).

Progress is not merely "a new snapshot": a job that dies right after each snapshot it
writes (killed as soon as `snapshot()` returns, by a bug, an OOM killer or a limit)
writes one new snapshot per run, and counting that as progress restarted it at once,
forever. A new snapshot counts as progress only when the run that wrote it then went
on: to an outcome (done, failed, waiting, parked: the count is cleared) or to a later
snapshot (the run wrote two or more: the crash counts as a first one). A run that
wrote at most one snapshot and died is a crash in a row. A job that advances one
snapshot per run therefore ends failed after `max_crashes` runs, with its snapshots
kept: `snaprun resume JOB` continues it from the latest, by hand.

SIGTERM (or Ctrl-C) to the worker: it claims nothing more and forwards SIGTERM to its
children, each of which runs on to its next snapshot and stops right after it is
committed (`--grace`), or hibernates at once if it was sleeping through a short wait
(runtime/_signals.py); children still alive after the grace are SIGKILLed (resumable:
their job shows interrupted, the next worker resumes it). A second signal kills them
at once. The worker releases its claims and exits 143 (130 after Ctrl-C). A worker
that is SIGKILLed leaves its children running: each holds its own lease and finishes
its run; its claims die with its process.
"""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.context
import os
import runpy
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any

from .._errors import SnapstateError, StaleWriter
from ..serializers._home import Home
from ..serializers._location import is_postgres_url, redact
from ..serializers._store import Owner
from ._clock import clock

__all__ = ["Worker", "DEFAULT_GRACE", "DEFAULT_POLL", "DEFAULT_MAX_CRASHES", "crash_report"]

DEFAULT_GRACE = 30.0
DEFAULT_POLL = 2.0
DEFAULT_MAX_CRASHES = 5
BACKOFF_BASE, BACKOFF_MAX = 1.0, 60.0
CLAIM_TTL = 30.0  # a claim covers the start of a child, until it holds the job's lease
BEAT_EVERY, WORKER_TTL = 5.0, 30.0  # the heartbeat: how often, and how long it counts
KILL_MARGIN = 2.0  # after the grace: the child's own stop at its grace's end, then SIGKILL
TICK = 0.05  # how often children are checked

# Job metrics (the catalog's metrics table) the worker keeps for its back-off.
CRASHES, CRASH_SEQ, CRASH_AT = "worker_crashes", "worker_crash_seq", "worker_crash_at"
CRASH_LIMIT = "worker_max_crashes"  # the limit of the worker that counted the last crash
GAVE_UP = "the worker gave up"  # how a give-up's error starts

OUTCOMES = {
    0: "done",
    1: "failed (the agent raised; not retried)",
    2: "refused (see the child's message above)",
    3: "waiting again",
    4: "parked: an ambiguous effect needs `snaprun reconcile`; the worker leaves it",
    5: "someone else has it (another runner holds its lease)",
    130: "stopped (Ctrl-C); resumable",
    143: "stopped (SIGTERM); resumable",
}


def child_args(store: str, job_id: str, grace: float) -> tuple[list[str], dict[str, str]]:
    """The arguments of a child's `snaprun resume --store STORE --grace G JOB`, and the
    environment it adds: a PostgreSQL store's URL (which may hold a password) goes as
    SNAPSTATE_STORE, never on a command line that every user of the machine can list."""
    grace_args = ["--grace", f"{grace:g}"] if grace > 0 else []  # 0: stop at once
    if is_postgres_url(store):
        return ["resume", *grace_args, job_id], {"SNAPSTATE_STORE": store}
    return ["resume", "--store", store, *grace_args, job_id], {}


# The fork server's sys.path as it started (this module is imported there by the
# preload): its children run with it, not with the worker's (multiprocessing hands a
# forked child the parent's sys.path).
_START_PATH = tuple(p for p in sys.path if p and os.path.isabs(p))
_SAFE_PATH, _SAFE_PATH_ADDED = "PYTHONSAFEPATH", "SNAPSTATE_WORKER_SAFE_PATH"


def _run_child(argv: list[str], env: dict[str, str]) -> None:
    """A forked child: `snaprun ARGV` as `python -P -m snapstate.runtime._cli` runs it
    with `env` added, in a process group of its own (the worker forwards Ctrl-C and
    SIGTERM itself)."""
    os.setpgid(0, 0)
    os.environ.update(env)
    if os.environ.pop(_SAFE_PATH_ADDED, None):  # the fork server's, not the agent's
        os.environ.pop(_SAFE_PATH, None)
    sys.path[:] = _START_PATH
    sys.argv = ["snaprun", *argv]
    runpy.run_module("snapstate.runtime._cli", run_name="__main__", alter_sys=True)


class _Forked:
    """A child forked from the fork server, seen as a Popen: pid, poll()."""

    def __init__(self, process: multiprocessing.process.BaseProcess):
        self.process = process
        assert process.pid is not None  # started
        self.pid: int = process.pid

    def poll(self) -> int | None:
        self.process.join(0)
        return self.process.exitcode


_FORKSERVER: list[multiprocessing.context.ForkServerContext | None] = []


def _fork_server() -> multiprocessing.context.ForkServerContext | None:
    """The fork server's context (made once per worker process), or None: exec wanted
    or not available."""
    if not _FORKSERVER:
        context = None
        if os.environ.get("SNAPSTATE_WORKER_START", "fork") != "exec":
            try:
                found = multiprocessing.get_context("forkserver")
            except ValueError:  # a platform without it
                found = None
            if isinstance(found, multiprocessing.context.ForkServerContext):
                found.set_forkserver_preload(["snapstate.runtime._cli"])
                context = found
        _FORKSERVER.append(context)
    return _FORKSERVER[0]


def start_child(store: str, job_id: str, grace: float) -> subprocess.Popen[bytes] | _Forked:
    """Start `snaprun resume` of a job: forked from the fork server, or exec'd."""
    args, env = child_args(store, job_id, grace)
    context = _fork_server()
    if context is not None:
        process = context.Process(target=_run_child, args=(args, env), daemon=False)
        added = _SAFE_PATH not in os.environ
        if added:  # for the fork server, if this start (re)starts it: see the docstring
            os.environ.update({_SAFE_PATH: "1", _SAFE_PATH_ADDED: "1"})
        try:
            process.start()
        finally:
            if added:
                os.environ.pop(_SAFE_PATH, None)
                os.environ.pop(_SAFE_PATH_ADDED, None)
        return _Forked(process)
    return subprocess.Popen(
        [sys.executable, "-P", "-m", "snapstate.runtime._cli", *args],
        env=dict(os.environ, **env) if env else None,
        stdin=subprocess.DEVNULL,
        process_group=0,  # the worker forwards Ctrl-C and SIGTERM itself
    )


@dataclass
class _Child:
    job_id: str
    proc: subprocess.Popen[bytes] | _Forked
    started: float  # time.monotonic()
    seq: int  # the job's latest snapshot when the child started
    killed: bool = False  # by this worker, at the end of its grace


class Worker:
    def __init__(
        self,
        home: Home,
        *,
        concurrency: int = 1,
        poll: float = DEFAULT_POLL,
        grace: float = DEFAULT_GRACE,
        once: bool = False,
        max_crashes: int = DEFAULT_MAX_CRASHES,
        say: Callable[[str], None] = lambda message: None,
        json_log: Callable[[str], None] | None = None,
    ) -> None:
        self.home, self.catalog = home, home.catalog
        self.concurrency, self.poll, self.grace = concurrency, poll, grace
        self.once, self.max_crashes, self.say = once, max_crashes, say
        self.json_log = json_log  # --log-format json: one JSON object per line, here
        self.started = time.time()
        self._next_beat = 0.0  # time.monotonic() of the next heartbeat
        self.owner = Owner.me()
        self.children: dict[str, _Child] = {}
        self.signal: int | None = None  # the first SIGTERM/SIGINT received
        self.hurry = False  # a second one: kill the children now
        self._previous: dict[int, Any] = {}

    # ------------------------------------------------------------------ running
    def run(self) -> int:
        """Work until stopped (or, with once, until one pass is over); the exit code."""
        for signum in (signal.SIGTERM.value, signal.SIGINT.value):
            self._previous[signum] = signal.signal(signum, self._on_signal)
        where = str(self.home.directory)
        where = redact(where) if is_postgres_url(where) else where  # never a password
        try:
            self.log(
                "worker-start",
                f"worker {self.owner} on {where}: up to {self.concurrency} "
                f"job(s) at once, polling every {self.poll:g}s, grace {self.grace:g}s"
                + (" (one pass)" if self.once else ""),
                concurrency=self.concurrency,
                store=where,
            )
            return self._work()
        finally:
            for signum, handler in self._previous.items():
                signal.signal(signum, handler)
            try:
                self.catalog.release_claims(self.owner)
            except SnapstateError:
                pass  # claims die with this process anyway
            self._beat(0.0)  # withdrawn: `snaprun worker --status` no longer lists it

    def _beat(self, ttl: float = WORKER_TTL) -> None:
        """The worker's heartbeat row (`snaprun worker --status`, `snaprun ls`): who it
        is, since when, its concurrency and the jobs it runs, live for `ttl` seconds.
        Refreshed every BEAT_EVERY seconds; a worker killed on this host drops out of
        the list at once (its pid is gone), elsewhere when its row expires."""
        self._next_beat = time.monotonic() + BEAT_EVERY
        info = {
            "started": self.started,
            "concurrency": self.concurrency,
            "running": sorted(self.children),
            "poll": self.poll,
            "once": self.once,
        }  # never the store's location: a PostgreSQL URL may carry a password
        try:
            self.catalog.beat_worker(self.owner, info, ttl)
        except (SnapstateError, sqlite3.Error, OSError):
            pass  # a note only: a failing store is reported by the next scan

    def log(
        self,
        event: str,
        text: str | None,
        job_id: str | None = None,
        pid: int | None = None,
        **fields: object,
    ) -> None:
        """One event of the worker: its line of text (none for the events only the JSON
        log has: claim, release), or, with --log-format json, one JSON object (ts, event,
        job, pid, detail and the event's own fields)."""
        if self.json_log is None:
            if text is not None:
                self.say(text)
            return
        record: dict[str, object] = {"ts": round(time.time(), 3), "event": event, "job": job_id}
        record["pid"] = pid if pid is not None else os.getpid()  # a child's, or the worker's
        record["detail"] = text
        record["worker"] = str(self.owner)
        record.update(fields)
        self.json_log(json.dumps(record, default=str))

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.signal is None:
            self.signal = signum
        else:
            self.hurry = True

    def _work(self) -> int:
        queue: list[str] | None = None  # --once: the pass's jobs
        next_scan = 0.0
        while True:
            if self._reap():  # a slot freed: look for the next job now, not at the poll
                next_scan = 0.0
            if time.monotonic() >= self._next_beat:
                self._beat()
            if self.signal is not None:
                return self._shutdown()
            if self.once:
                if queue is None:
                    queue = self.candidates()
                    self.log("scan", f"{len(queue)} runnable job(s)", jobs=len(queue))
                while queue and len(self.children) < self.concurrency:
                    self._start(queue.pop(0))
                if not queue and not self.children:
                    self.log("pass-over", "pass over")
                    return 0
            elif time.monotonic() >= next_scan and len(self.children) < self.concurrency:
                next_scan = time.monotonic() + self.poll
                try:
                    for job_id in self.candidates():
                        if len(self.children) >= self.concurrency:
                            break
                        self._start(job_id)
                except (SnapstateError, sqlite3.Error, OSError) as exc:
                    # A busy or failing store: the running children go on; next poll.
                    self.log(
                        "reconnect",
                        f"cannot read the store ({type(exc).__name__}: {exc}); retrying",
                        retry_in=self.poll,
                    )
            if self.children or self.once:
                time.sleep(TICK)
            else:  # idle: until the next scan, or at once when the store announces a
                # change (PostgreSQL's NOTIFY; a plain sleep on SQLite). Short slices,
                # so a signal is acted on promptly.
                pause = min(TICK * 4, self.poll, max(0.0, next_scan - time.monotonic()))
                try:
                    if self.catalog.wait_for_change(pause):
                        next_scan = 0.0
                except (SnapstateError, OSError):
                    time.sleep(pause)

    # ------------------------------------------------------------------ choosing
    def candidates(self) -> list[str]:
        """The jobs this worker may start now: runnable, not its own already, not
        backing off after crashes, and not held by a live runner."""
        now = clock().time()
        real_now = time.time()  # leases are kept in real time, not the clock seam's
        seen: set[str] = set(self.children)
        out: list[str] = []
        for job_id in [*self.catalog.runnable_jobs(now), *self.catalog.stopped_jobs()]:
            if job_id in seen:
                continue
            seen.add(job_id)
            lease = self.catalog.get_lease(job_id)
            if lease is not None and lease.is_live(real_now):
                continue  # its runner is alive (runnable_jobs saw it with the seam's time)
            if self._backing_off(job_id, now):
                continue
            out.append(job_id)
        return out

    def _backing_off(self, job_id: str, now: float) -> bool:
        metrics = self.catalog.metrics(job_id)
        crashes = int(metrics.get(CRASHES, 0))
        if not crashes or metrics.get(CRASH_SEQ) != self._latest_seq(job_id):
            return False  # no crash since its latest snapshot
        return now < metrics.get(CRASH_AT, 0.0) + backoff(crashes)

    def _latest_seq(self, job_id: str) -> int:
        rows = self.catalog.snapshots(job_id)
        return rows[-1].seq if rows else 0

    # ------------------------------------------------------------------ children
    def _start(self, job_id: str) -> None:
        try:
            if not self.catalog.claim_job(job_id, self.owner, CLAIM_TTL):
                return  # another worker is starting it
            self.log("claim", None, job_id)
            job = self.catalog.get_job(job_id)
            wait = self.catalog.get_wait(job_id) if job.status == "waiting" else None
            # The rows its run would read are checked here too: a row the catalog refuses
            # (a forged approval or effect row) is the store's damage; no child is
            # started for it, so it is neither looped nor counted as a crash.
            if wait is not None and wait.approval_id is not None:
                self.catalog.get_approval(job_id, wait.approval_id)
            self.catalog.effects(job_id)
            seq = self._latest_seq(job_id)
            if job.status in ("done", "failed", "parked"):  # it ended since the scan
                self.catalog.release_claims(self.owner, job_id)
                self.log("release", None, job_id, status=job.status)
                return
        except (SnapstateError, sqlite3.Error, OSError) as exc:
            self.log("not-started", f"job {job_id}: not started: {exc}", job_id)
            return
        why = f"waited: {wait.reason}" if wait is not None else "interrupted (its runner is gone)"
        try:
            proc = start_child(self.home.location, job_id, self.grace)
        except (OSError, EOFError) as exc:  # EOFError: a fork server killed meanwhile
            self.log("not-started", f"job {job_id}: cannot start a child process: {exc}", job_id)
            return  # its claim is released when the worker stops, or expires
        self.children[job_id] = _Child(job_id, proc, time.monotonic(), seq)
        self.log(
            "start",
            f"job {job_id}: resuming in pid {proc.pid} ({why}, snapshot {seq})",
            job_id,
            proc.pid,
            seq=seq,
        )

    def _reap(self) -> int:
        """Record the children that ended; how many did."""
        ended = 0
        for job_id, child in list(self.children.items()):
            code = child.proc.poll()
            if code is None:
                continue
            ended += 1
            del self.children[job_id]
            took = time.monotonic() - child.started
            try:
                self._record(child, code, took)
            except (SnapstateError, sqlite3.Error, OSError) as exc:
                self.log("error", f"job {job_id}: could not record its outcome: {exc}", job_id)
            try:
                self.catalog.release_claims(self.owner, job_id)
                self.log("release", None, job_id, child.proc.pid)
            except (SnapstateError, sqlite3.Error):
                pass  # it dies with this process, or expires
        return ended

    def _record(self, child: _Child, code: int, took: float) -> None:
        job_id, pid = child.job_id, child.proc.pid
        if code >= 0:
            outcome = OUTCOMES.get(code, f"exit code {code}")
            if code == 1 and self.catalog.get_job(job_id).status != "failed":
                outcome = "exit 1 with the job left interrupted (see the child's message above)"
            self.log(
                "outcome",
                f"job {job_id}: {outcome} (pid {pid}, {took:.1f}s)",
                job_id,
                pid,
                code=code,
                seconds=round(took, 3),
            )
            detail = f"its runner (pid {pid}) ended with exit code {code}"
        else:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            detail = f"its runner (pid {pid}) was killed by {name}" + (
                " at the end of the worker's grace" if child.killed else ""
            )
            self._mark_interrupted(child, detail)
        if code == 5:
            return  # another runner's run: not this one's outcome
        if child.killed or self.signal is not None:  # this worker stopped it
            if code < 0:
                self.log(
                    "outcome", f"job {job_id}: {detail}; left interrupted (resumable)", job_id, pid
                )
            return
        job = self.catalog.get_job(job_id)
        if self.catalog.effective_status(job, time.time()) != "interrupted":
            if self.catalog.metrics(job_id).get(CRASHES):
                self.catalog.set_metric(job_id, CRASHES, 0)  # it ran to an outcome
            return
        # The run ended leaving the job interrupted (killed, or stopped by a failing
        # store or a snapshot it could not restore): retried, with a back-off.
        seq = self._latest_seq(job_id)
        metrics = self.catalog.metrics(job_id)
        went_on = seq - child.seq >= 2  # progress: see the module's docstring
        crashes = (0 if went_on else int(metrics.get(CRASHES, 0))) + 1
        self.catalog.set_metric(job_id, CRASHES, crashes)
        self.catalog.set_metric(job_id, CRASH_SEQ, seq)
        self.catalog.set_metric(job_id, CRASH_AT, clock().time())
        self.catalog.set_metric(job_id, CRASH_LIMIT, self.max_crashes)
        where = f"after snapshot {seq}" if seq else "before its first snapshot"
        if seq > child.seq:
            where += f" (it resumed from {child.seq or 'the start'} and wrote {seq - child.seq})"
        last = job.error if job.error and job.error != detail else None
        if last:
            detail = f"{detail}: {last}"
        if crashes >= self.max_crashes:
            error = (
                f"{GAVE_UP}: its runner died {crashes} times in a row without progress, "
                f"last {where} (last: {detail}); fix the cause, then `snaprun resume {job_id}`"
            )
            if self.catalog.give_up_job(job_id, error):
                self.log(
                    "give-up", f"job {job_id}: {error}; marked failed", job_id, pid, crashes=crashes
                )
            return
        wait = backoff(crashes)
        note = (
            f"{detail} {where}, leaving it interrupted (crash {crashes} in a row without "
            f"progress; the worker gives up at {self.max_crashes}); retrying "
            + (f"in {wait:g}s" if wait else "now")
        )
        self.catalog.log_event(job_id, "crash", note)
        self.log("back-off", f"job {job_id}: {note}", job_id, pid, crashes=crashes, retry_in=wait)

    def _mark_interrupted(self, child: _Child, detail: str) -> None:
        """The dead child's lease, if it still holds the job: status interrupted with
        the reason, lease released (`ls` shows it at once, not after the lease ttl)."""
        lease = self.catalog.get_lease(child.job_id)
        if lease is None or lease.owner.pid != child.proc.pid:
            return
        try:
            self.catalog.set_status(child.job_id, "interrupted", epoch=lease.epoch, error=detail)
            self.catalog.release_lease(child.job_id, lease.epoch)
        except StaleWriter:
            pass  # taken over meanwhile: the job is another runner's

    # ------------------------------------------------------------------ stopping
    def _shutdown(self) -> int:
        name = "Ctrl-C" if self.signal == signal.SIGINT else "SIGTERM"
        code = 130 if self.signal == signal.SIGINT else 143
        if self.children:
            self.log(
                "stopping",
                f"{name}: starting no more jobs; {len(self.children)} running job(s) stop at "
                f"their next snapshot (grace {self.grace:g}s)",
                jobs=len(self.children),
            )
        for child in self.children.values():
            _kill(child, signal.SIGTERM)
        deadline = time.monotonic() + self.grace + KILL_MARGIN
        while self.children:
            if self.hurry or time.monotonic() >= deadline:
                for child in self.children.values():
                    if not child.killed:
                        child.killed = True
                        self.log(
                            "kill",
                            f"job {child.job_id}: still running: SIGKILL (pid {child.proc.pid})",
                            child.job_id,
                            child.proc.pid,
                        )
                        _kill(child, signal.SIGKILL)
            time.sleep(TICK)
            self._reap()
        self.log("worker-stop", f"{name}: worker stopped", code=code)
        return code


def crash_report(
    catalog: Any, job_id: str, status: str, error: str | None
) -> dict[str, Any] | None:
    """What `snaprun ls` shows of a job the worker is backing off (status interrupted
    after crashes in a row) or gave up on (failed by the worker): the count, the limit,
    when it is retried (None once given up) and the last error; None for other jobs."""
    given_up = status == "failed" and (error or "").startswith(GAVE_UP)
    if status != "interrupted" and not given_up:
        return None
    metrics = catalog.metrics(job_id)
    crashes = int(metrics.get(CRASHES, 0))
    if not crashes:
        return None
    limit = int(metrics.get(CRASH_LIMIT, 0)) or None
    retry_at = None if given_up else float(metrics.get(CRASH_AT, 0.0)) + backoff(crashes)
    return {
        "count": crashes,
        "max": limit,
        "retry_at": retry_at,
        "gave_up": given_up,
        "last_error": error,
    }


def backoff(crashes: int) -> float:
    """Seconds before a job whose runner died `crashes` times in a row is retried."""
    if crashes <= 1:
        return 0.0  # a first crash (a kill, a deploy): at once
    return float(min(BACKOFF_MAX, BACKOFF_BASE * 2.0 ** (crashes - 2)))


def _kill(child: _Child, signum: int) -> None:
    try:
        os.kill(child.proc.pid, signum)
    except ProcessLookupError:
        pass  # it ended meanwhile: reaped next
