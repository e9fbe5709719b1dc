"""snaprun's commands that run agent code: run, resume, replay, and the worker that
resumes jobs whose wait is over. Each runs the job through the Python API
(runtime/_api.py) and ends with the exit code of its outcome."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable
from typing import NoReturn

import click

from ..._errors import DivergenceError, SnapshotWriteError, SnapstateError, StoreFailure
from .. import _admin, _api, _worker
from .._agent import EntryPoint, EntryPointError
from .._api import EXIT_DONE, EXIT_FAILED, JobStatus
from .._http_record import check_reads
from .._job import Job
from .._signals import SigtermHandler
from ._common import (
    agent_failed,
    agent_traceback,
    check_ids,
    check_new_id,
    exit_codes,
    finite_grace,
    grace_option,
    json_option,
    open_home,
    parse_ref,
    say,
    store_option,
)
from ._reading import show_workers
from ._table import wide_option

_RUN_CODES = exit_codes(0, 1, 2, 3, 4, 5, 130, 143, ok="done")

__all__ = ["run", "resume", "replay", "worker"]


def _run_job(job: Job, action: Callable[[], object], grace: float | None = None) -> NoReturn:
    """Run or resume a job through the Python API (runtime/_api.py drive()) and exit
    with its outcome's code."""
    job.say = say
    sigterm = SigtermHandler(job, grace)
    sigterm.install()
    try:
        outcome = _api.drive(job, action)
    except KeyboardInterrupt:
        sys.stdout.flush()
        say(f"job {job.job_id} interrupted; continue it with: snaprun resume {job.job_id}")
        sys.exit(130)
    finally:
        sigterm.disarm()
    sys.stdout.flush()
    error = outcome.error
    if outcome.status == JobStatus.DONE:
        say(f"job {job.job_id} done; main() returned {outcome.result!r}")
        sys.exit(outcome.exit_code)
    assert error is not None  # every other outcome carries its error
    if isinstance(error, StoreFailure):
        say(f"error: {error}")
        say(
            f"job {job.job_id} is left interrupted; once the store is fixed: snaprun "
            f"resume {job.job_id}"
        )
        sys.exit(outcome.exit_code)
    if isinstance(error, SnapshotWriteError):
        raise error  # main(): its message, exit 1
    if outcome.status in (JobStatus.PARKED, JobStatus.WAITING):
        say(str(error))
        sys.exit(outcome.exit_code)
    agent_failed(job, error)


def _json_line(line: str) -> None:
    click.echo(line, err=True)


@click.command(
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
    epilog=_RUN_CODES,
)
@store_option
@click.option("--job", "job_id", default=None, help="Job id (default: generated).")
@click.option(
    "--record-http",
    is_flag=True,
    help="Record every HTTP request the job sends (httpx, requests; the OpenAI and "
    "Anthropic SDKs) in its effect ledger: re-executed code gets the recorded response.",
)
@click.option(
    "--http-read",
    "http_reads",
    multiple=True,
    metavar="HOST/PATH",
    help="With --record-http (implied): requests matching this pattern (e.g. "
    "'api.example.com/search*') change nothing and are sent again when their outcome "
    "is unknown. Repeatable.",
)
@grace_option
@click.argument("script")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def run(
    store: str | None,
    job_id: str | None,
    record_http: bool,
    http_reads: tuple[str, ...],
    grace: float | None,
    script: str,
    args: tuple[str, ...],
) -> None:
    """Run SCRIPT's main() (a .py file or module:function) as a new job.

    ARGS become the agent's sys.argv[1:]. The job id is printed on stderr. The entry
    point is loaded first: without it no job is created."""
    try:
        entry = EntryPoint.parse(script)
    except EntryPointError as exc:
        raise click.UsageError(str(exc)) from None
    if record_http or http_reads:  # kept with the job: resume, worker, fork keep it
        try:
            reads = check_reads(http_reads, "--http-read")
        except (TypeError, ValueError) as exc:
            raise click.UsageError(str(exc)) from None
        entry = dataclasses.replace(entry, record_http=reads)
    check_new_id(job_id, "--job")
    _api.check_settings()  # refused before the job exists
    home = open_home(store, create=True)
    try:
        job = _api.create_job(home, entry, list(args), job_id)
    except EntryPointError as exc:
        raise EntryPointError(f"{exc}; no job was created") from None
    except SnapstateError:
        raise
    except (Exception, SystemExit) as exc:  # the agent's module raised while imported
        sys.stdout.flush()
        sys.stderr.write(agent_traceback(exc))
        say(
            f"the agent's module raised {type(exc).__name__} while it was loaded; no job "
            "was created"
        )
        sys.exit(EXIT_FAILED)
    say(f"job {job.job_id} started")
    _run_job(job, job.run, grace)


@click.command(epilog=_RUN_CODES)
@store_option
@click.option(
    "--at",
    "at",
    type=int,
    default=None,
    help="Resume from this snapshot; later snapshots of the job are dropped.",
)
@click.option("--as", "as_id", default=None, help="With FILE: import it as this job id.")
@click.option(
    "--force",
    is_flag=True,
    help="When the runner holding the job is alive but silent (no heartbeat), "
    "wait until its lease expires, then take the job over (never a runner "
    "that heartbeats).",
)
@grace_option
@click.argument("target")
def resume(
    store: str | None,
    at: int | None,
    as_id: str | None,
    force: bool,
    grace: float | None,
    target: str,
) -> None:
    """Continue job TARGET after its latest snapshot, or the snapshot FILE TARGET.

    A job whose runner was killed resumes without --force. A FILE from another store
    (exported, or copied) is imported as its job (or --as NEW_ID) first."""
    check_ids(target, file_ok=True)
    check_new_id(as_id, "--as")
    _api.check_settings()
    is_file = os.path.isfile(target)
    home = open_home(store, create=is_file, job=None if is_file else target)
    if is_file:
        job, at = _admin.import_file(home, target, as_id)
    else:
        job = _api.open_job(home, target)  # a done job is refused by job.resume()
    _run_job(job, lambda: job.resume(at, force=force), grace)


@click.command(epilog=exit_codes(0, 1, 2, ok="finished"))
@store_option
@click.argument("ref")
def replay(store: str | None, ref: str) -> None:
    """Run from snapshot JOB@SEQ with every effect served from the ledger and none
    dispatched, writing nothing; stops at the first divergence (exit 1) or where the
    recorded history ends (exit 0)."""
    check_ids(ref)
    home = open_home(store, readonly=True)
    job_id, seq = parse_ref(ref)
    if seq is None:
        raise click.UsageError(f"name a snapshot: {job_id}@SEQ")
    job = Job.open(home, job_id)
    job.say = say
    try:
        result = job.replay(seq)
    except DivergenceError as exc:
        sys.stdout.flush()
        say(f"replay of {job_id}@{seq} diverged: {exc}")
        sys.exit(EXIT_FAILED)
    except SnapstateError as exc:
        if not job.agent_started:
            raise  # the snapshot or the store: main() reports it
        agent_failed(job, exc)
    except Exception as exc:
        agent_failed(job, exc)
    sys.stdout.flush()
    if job.replay_stop:
        say(f"replay of {job_id}@{seq} stopped: {job.replay_stop}; nothing was dispatched")
    else:
        say(
            f"replay of {job_id}@{seq} finished: main() returned {result!r}; nothing was dispatched"
        )
    sys.exit(EXIT_DONE)


@click.command(epilog=exit_codes(0, 1, 2, 5, 130, 143))
@store_option
@click.option(
    "--concurrency",
    type=click.IntRange(1, 256),
    default=1,
    show_default=True,
    help="How many jobs run at once (each in its own child process).",
)
@click.option(
    "--poll",
    type=click.FloatRange(0.05, 3600),
    default=_worker.DEFAULT_POLL,
    show_default=True,
    metavar="SECONDS",
    help="How often the store is checked for jobs that can run.",
)
@click.option("--once", is_flag=True, help="One pass: run the jobs runnable now, then exit.")
@click.option(
    "--grace",
    type=click.FloatRange(0, 7 * 86400),
    default=_worker.DEFAULT_GRACE,
    show_default=True,
    metavar="SECONDS",
    callback=finite_grace,
    help="On SIGTERM or Ctrl-C, how long running jobs get to reach their next snapshot "
    "before they are killed (they stay resumable).",
)
@click.option(
    "--max-crashes",
    type=click.IntRange(1, 10**6),
    default=_worker.DEFAULT_MAX_CRASHES,
    show_default=True,
    help="Mark a job failed once its runner died this many times in a row without "
    "progress (retried at once, then after 1s, 2s, 4s... at most 60s). A run that wrote "
    "one snapshot and died is no progress; one that wrote two, or reached an outcome, is.",
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json: each claim, start, outcome, release, back-off, give-up and reconnect as one "
    "JSON object per line on stderr (ts, event, job, pid, detail...).",
)
@click.option(
    "--status",
    is_flag=True,
    help="List the live workers of the store (their heartbeats) and exit; runs nothing.",
)
@json_option
@wide_option
def worker(
    store: str | None,
    concurrency: int,
    poll: float,
    once: bool,
    grace: float,
    max_crashes: int,
    log_format: str,
    status: bool,
    as_json: bool,
    wide: bool,
) -> None:
    """Run jobs that can continue: waiting ones whose timer or rate limit is due or
    whose approval was decided or expired, and interrupted ones (their runner died or
    was stopped). Each runs in a child process (`snaprun resume JOB`); parked and failed
    jobs are left alone. SIGTERM stops it: running jobs stop at their next snapshot
    (within --grace) and stay resumable; exit 143. Its log goes to stderr. While it
    runs it keeps a heartbeat in the store: `snaprun worker --status` lists the live
    workers."""
    if (as_json or wide) and not status:
        raise click.UsageError(f"{'--json' if as_json else '--wide'} goes with --status")
    if status:
        show_workers(open_home(store, readonly=True), as_json, wide)
        return
    home = open_home(store)
    sys.exit(
        _worker.Worker(
            home,
            concurrency=concurrency,
            poll=poll,
            grace=grace,
            once=once,
            max_crashes=max_crashes,
            say=say,
            json_log=_json_line if log_format == "json" else None,
        ).run()
    )
