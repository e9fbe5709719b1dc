"""snaprun: run, resume, list, inspect and manage durable agent jobs.

stdin, stdout and stderr belong to the agent while it runs: snaprun's own messages go
to stderr, never to stdout. Listing commands (ls, log, inspect, keys list) print to
stdout; with --json, as JSON.
"""

from __future__ import annotations

import json
import math
import os
import re
import sqlite3
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click
from rich.markup import escape

from .._errors import (
    DivergenceError,
    JobParked,
    JobWaiting,
    LeaseHeld,
    SnapshotNotFound,
    SnapshotWriteError,
    SnapstateError,
    StaleWriter,
    StoreError,
    StoreFailure,
)
from ..serializers._home import Home, default_home
from ..serializers._ids import validate_job_id
from ..serializers._sqlite import store_failure
from ..serializers._store import ApprovalRow, SnapshotRow
from . import _admin, _api, _approvals, _inspect, _repair, _worker
from ._agent import EntryPoint, EntryPointError
from ._clock import clock
from ._job import Job
from ._signals import SigtermHandler

EXIT_DONE, EXIT_FAILED, EXIT_USAGE, EXIT_WAITING, EXIT_PARKED, EXIT_CONFLICT = 0, 1, 2, 3, 4, 5

_EXIT_HELP = """\b
Exit codes:
  0  done
  1  the agent raised an exception (or a snapshot could not be written, or the
     store failed: disk full, read-only; the job stays resumable)
  2  usage error or invalid input (unknown job, invalid job id, damaged or foreign
     store, tampered, truncated or foreign snapshot, a done job resumed)
  3  waiting (an approval, a timer, a rate limit): the job hibernated; `snaprun
     worker` (or `snaprun resume JOB`) continues it
  4  parked (an ambiguous effect needs `snaprun reconcile`)
  5  conflict (another live runner holds the job, or won the race to resume it)
  130  stopped by Ctrl-C (resumable)
  143  stopped by SIGTERM (resumable; see --grace)"""

# The one exception -> exit code table of every command: the first class that matches
# wins (so subclasses come before their bases).
EXIT_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (StoreFailure, EXIT_FAILED),  # the store failed, not the input: job resumable
    (SnapshotWriteError, EXIT_FAILED),
    (JobParked, EXIT_PARKED),
    (JobWaiting, EXIT_WAITING),
    (LeaseHeld, EXIT_CONFLICT),
    (StaleWriter, EXIT_CONFLICT),
    (SnapstateError, EXIT_USAGE),  # invalid input, damaged or foreign store or file
)


def exit_code(exc: BaseException) -> int:
    """The exit code of a snapstate error, from EXIT_CODES."""
    for kind, code in EXIT_CODES:
        if isinstance(exc, kind):
            return code
    return EXIT_FAILED


def _say(message: str) -> None:
    click.echo(f"snaprun: {message}", err=True)


def _fail(exc: SnapstateError) -> NoReturn:
    _say(f"error: {exc}")
    sys.exit(exit_code(exc))


def _check_ids(*refs: str | None, file_ok: bool = False) -> None:
    """Refuse an invalid job id in JOB or JOB@SEQ before the store is even opened:
    nothing is created for a refused id. With file_ok, an existing file is a snapshot
    FILE, not a job."""
    for ref in refs:
        if ref is None or (file_ok and os.path.isfile(ref)):
            continue
        try:
            _parse_ref(ref)
        except SnapstateError as exc:
            if file_ok and (os.sep in ref or ref.endswith(".snap")):  # meant as a FILE
                exc = SnapshotNotFound(f"no snapshot file at {ref}; as a job id: {exc}")
            _fail(exc)


def _check_new_id(job_id: str | None, option: str) -> None:
    """Refuse an invalid new job id (--job, --as) before the store is opened."""
    if job_id is not None:
        try:
            validate_job_id(job_id, what=f"the job id {option}")
        except SnapstateError as exc:
            _fail(exc)


_STORE_IN_USE: list[str] = []  # for the last-resort message in main()


def _home(
    store: str | None,
    file: str | None = None,
    *,
    create: bool = False,
    readonly: bool = False,
    job: str | None = None,
) -> Home:
    """The store in use. Only `create` (run, init, resume FILE) makes a new store;
    `readonly` commands write nothing to it at all. `file` never chooses the store: a
    file is verified only with the keys of the store in use (--store, $SNAPSTATE_HOME,
    ./.snapstate) and SNAPSTATE_KEY, never with those of a directory around it."""
    _STORE_IN_USE[:] = [default_home(store)]
    try:
        home = Home(default_home(store), create=create, writable=not readonly)
        context = click.get_current_context(silent=True)
        if context is not None:  # closed with the command, however it ends
            context.call_on_close(home.close)
        return home
    except StoreFailure as exc:
        _fail(exc)
    except StoreError as exc:
        _say(f"error: {exc}")
        sys.exit(EXIT_USAGE)
    except OSError as exc:
        # A full, read-only or failing file system is the store failing (exit 1, the
        # jobs stay resumable), not bad input.
        failure = store_failure(exc, os.path.join(default_home(store), "catalog.db"))
        if isinstance(failure, StoreFailure):
            if job is not None:  # the resume command names the job
                failure = StoreFailure(
                    str(failure).replace("snaprun resume JOB", f"snaprun resume {job}")
                )
            _fail(failure)
        _say(f"error: cannot open the store at {default_home(store)}: {exc}")
        sys.exit(EXIT_USAGE)
    except (sqlite3.DatabaseError, ValueError, RecursionError, KeyError, TypeError) as exc:
        _damaged(exc)  # the last resort: store files the code did not expect


def _check_settings() -> None:
    """Refuse a bad SNAPSTATE_* setting before any job runs (exit 2, naming it)."""
    try:
        _api.check_settings()
    except SnapstateError as exc:
        _fail(exc)


def _finite_grace(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    if value is not None and not math.isfinite(value):
        raise click.BadParameter("must be a number of seconds", ctx, param)
    return value


_F = TypeVar("_F", bound=Callable[..., Any])


def grace_option(fn: _F) -> _F:
    return click.option(
        "--grace",
        type=click.FloatRange(min=0, max=7 * 86400, min_open=True),
        default=None,
        metavar="SECONDS",
        help="On SIGTERM, run on to the next snapshot() and stop right after it is "
        "committed (exit 143); stop at once if the grace runs out first.",
        callback=_finite_grace,
    )(fn)


def store_option(fn: _F) -> _F:
    return click.option(
        "--store",
        type=click.Path(file_okay=False),
        default=None,
        help="Store directory (default: $SNAPSTATE_HOME or ./.snapstate).",
    )(fn)


def _agent_traceback(exc: BaseException) -> str:
    """The agent's traceback without snapstate's own frames."""
    tb = exc.__traceback__
    while tb is not None and str(tb.tb_frame.f_globals.get("__name__", "")).startswith(
        "snapstate."
    ):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _damaged(exc: BaseException) -> NoReturn:
    where = _STORE_IN_USE[0] if _STORE_IN_USE else default_home(None)
    _say(
        f"error: the store at {where} is damaged or unreadable: {type(exc).__name__}: "
        f"{exc}. Nothing was changed; restore it from a backup (or `snaprun repair`)."
    )
    sys.exit(EXIT_USAGE)


def _run_job(job: Job, action: Callable[[], object], grace: float | None = None) -> NoReturn:
    """Run or resume a job through the Python API (runtime/_api.py drive()) and exit
    with the contract's code."""
    job.say = _say
    sigterm = SigtermHandler(job, grace)
    sigterm.install()
    try:
        outcome = _api.drive(job, action)
    except KeyboardInterrupt:
        sys.stdout.flush()
        _say(f"job {job.job_id} interrupted; continue it with: snaprun resume {job.job_id}")
        sys.exit(130)
    except (StaleWriter, LeaseHeld) as exc:
        sys.stdout.flush()
        _fail(exc)
    except SnapstateError as exc:  # the job could not start or be restored
        _fail(exc)
    finally:
        sigterm.disarm()
    error = outcome.error
    if outcome.status == "done":
        sys.stdout.flush()
        _say(f"job {job.job_id} done; main() returned {outcome.result!r}")
        sys.exit(EXIT_DONE)
    assert error is not None  # every other outcome carries its error
    if isinstance(error, StoreFailure):
        sys.stdout.flush()
        _say(f"error: {error}")
        _say(
            f"job {job.job_id} is left interrupted; once the store is fixed: snaprun "
            f"resume {job.job_id}"
        )
        sys.exit(EXIT_FAILED)
    if isinstance(error, SnapshotWriteError):
        sys.stdout.flush()
        _fail(error)
    if outcome.status in ("parked", "waiting"):
        sys.stdout.flush()
        _say(str(error))
        sys.exit(EXIT_PARKED if outcome.status == "parked" else EXIT_WAITING)
    _agent_failed(job, error)


def _agent_failed(job: Job, exc: BaseException) -> NoReturn:
    sys.stdout.flush()
    sys.stderr.write(_agent_traceback(exc))
    _say(f"job {job.job_id} failed: {type(exc).__name__}: {exc}")
    if job.seq:
        _say(f"its last snapshot is {job.seq}; after fixing the cause: snaprun resume {job.job_id}")
    sys.exit(EXIT_FAILED)


def _parse_ref(ref: str) -> tuple[str, int | None]:
    """(job id, seq or None) of JOB or JOB@SEQ; InvalidJobId for a bad job id."""
    match = re.fullmatch(r"(.+?)(?:@(\d+))?", ref, re.DOTALL)
    if match is None:
        return validate_job_id(ref), None
    return (validate_job_id(match.group(1)), int(match.group(2)) if match.group(2) else None)


def _resolve(
    home: Home, ref: str, *, need_seq: bool = False
) -> tuple[str, str, int, SnapshotRow | None]:
    """(path, job id, seq, catalog row or None for a FILE) of JOB, JOB@SEQ or FILE."""
    if os.path.isfile(ref):
        header = home.verify(ref)
        return ref, header["job_id"], header["seq"], None
    job_id, seq = _parse_ref(ref)
    if need_seq and seq is None:
        raise click.UsageError(f"name a snapshot: {job_id}@SEQ (see `snaprun log {job_id}`)")
    home.catalog.get_job(job_id)
    rows = home.catalog.snapshots(job_id)
    if seq is None:
        if not rows:
            raise SnapshotNotFound(f"job {job_id} has no snapshot yet")
        row = rows[-1]
    else:
        row = home.catalog.snapshot(job_id, seq)
    return home.row_path(row), job_id, row.seq, row


def _ago(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit} ago"
    return f"{seconds:.0f}s ago"


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _parse_duration(text: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([smhdw])", text.strip())
    if not match:
        raise click.BadParameter(f"{text!r}: use a number and a unit, e.g. 30m, 12h, 7d, 2w")
    return (
        float(match.group(1))
        * {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[match.group(2)]
    )


# ------------------------------------------------------------------------ commands
@click.group(epilog=_EXIT_HELP)
@click.version_option(package_name="snapstate")
def cli() -> None:
    """Run long-lived Python agents that survive kill -9 and resume where they stopped."""


@cli.command(
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
    epilog=_EXIT_HELP,
)
@store_option
@click.option("--job", "job_id", default=None, help="Job id (default: generated).")
@grace_option
@click.argument("script")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def run(
    store: str | None,
    job_id: str | None,
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
    _check_new_id(job_id, "--job")
    _check_settings()  # refused before the job exists
    home = _home(store, create=True)
    try:
        job = _api.create_job(home, entry, list(args), job_id)
    except EntryPointError as exc:
        _say(f"error: {exc}; no job was created")
        sys.exit(EXIT_USAGE)
    except SnapstateError as exc:
        _fail(exc)
    except (Exception, SystemExit) as exc:  # the agent's module raised while imported
        sys.stdout.flush()
        sys.stderr.write(_agent_traceback(exc))
        _say(
            f"the agent's module raised {type(exc).__name__} while it was loaded; no job "
            "was created"
        )
        sys.exit(EXIT_FAILED)
    _say(f"job {job.job_id} started")
    _run_job(job, job.run, grace)


@cli.command(epilog=_EXIT_HELP)
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
    _check_ids(target, file_ok=True)
    _check_new_id(as_id, "--as")
    _check_settings()
    home = _home(
        store, target, create=os.path.isfile(target), job=None if os.path.isfile(target) else target
    )
    try:
        if os.path.isfile(target):
            job, at = _admin.import_file(home, target, as_id)
        else:
            job = _api.open_job(home, target)  # a done job is refused by job.resume()
    except SnapstateError as exc:
        _fail(exc)
    _run_job(job, lambda: job.resume(at, force=force), grace)


@cli.command("ls", epilog=_EXIT_HELP)
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON to stdout.")
def list_jobs(store: str | None, as_json: bool) -> None:
    """List the store's jobs with their status and latest snapshot; why each waiting job
    waits and when it is due; the pins (and, with --json, the meta) of its latest
    snapshot."""
    home = _home(store, readonly=True)
    now = time.time()
    rows: list[dict[str, Any]] = [  # JSON records
        {
            "job": view.job_id,
            "status": view.status,
            "snapshots": len(view.snapshots),
            "latest": view.latest.seq if view.latest else None,
            "label": view.latest.label if view.latest else None,
            "updated": view.updated,
            "resumes": view.resumes,
            "entry": view.entry,
            "parent": view.parent,
            "error": view.error,
            "wait": None
            if view.wait is None
            else {
                "kind": view.wait.kind,
                "reason": view.wait.reason,
                "due": view.wait.due,
                "since": view.wait.since,
                "approval": view.wait.approval_id,
            },
            "meta": view.meta,
            "pins": view.pins,
        }
        for view in _api.job_views(home, now)
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    headers = ["JOB", "STATUS", "SNAPSHOTS", "LATEST", "UPDATED", "RESUMES", "ENTRY", "WAIT"]
    show_pins = any(r["pins"] for r in rows)
    _inspect.table(
        headers + (["PINS"] if show_pins else []),
        [
            [
                r["job"],
                r["status"],
                str(r["snapshots"]),
                "-"
                if r["latest"] is None
                else f"{r['latest']}" + (f" ({r['label']})" if r["label"] else ""),
                _ago(now - r["updated"]),
                str(r["resumes"]),
                r["entry"],
                _wait_text(r["wait"], r["label"]),
            ]
            + ([_pins_text(r["pins"])] if show_pins else [])
            for r in rows
        ],
    )


def _wait_text(wait: dict[str, Any] | None, label: str | None) -> str:
    """`kind, due WHEN: reason` of a waiting job (the reason only when the latest
    snapshot's label, "waiting: reason", does not already say it); "-" for the others."""
    if wait is None:
        return "-"
    if wait["kind"] == "approval":  # its due time is its expiry: decided or not by then
        due = "until decided" + (
            f" (expires {_when(wait['due'])})" if wait["due"] is not None else ""
        )
    else:
        due = f"due {_when(wait['due'])}" if wait["due"] is not None else "until decided"
    reason = "" if label == f"waiting: {wait['reason']}" else f": {wait['reason']}"
    return f"{wait['kind']}, {due}{reason}"


def _pins_text(pins: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(pins.items())) or "-"


@cli.command(epilog=_EXIT_HELP)
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON to stdout.")
@click.argument("ref")
def inspect(store: str | None, as_json: bool, ref: str) -> None:
    """Show a snapshot's tasks, frames and locals: JOB (latest), JOB@SEQ or FILE."""
    _check_ids(ref, file_ok=True)
    home = _home(store, ref, readonly=True)
    try:
        path, job_id, seq, row = _resolve(home, ref)
        header, payload = home.read(path) if row is None else home.read_row(row)
    except SnapstateError as exc:
        _fail(exc)
    report = _inspect.describe(header, payload)
    if as_json:
        click.echo(json.dumps(report, indent=1, default=str))
    else:
        _inspect.render(report)


@cli.command(epilog=_EXIT_HELP)
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON to stdout.")
@click.argument("job_id")
def log(store: str | None, as_json: bool, job_id: str) -> None:
    """Show a job's timeline: creation, leases, snapshots, resumes, outcome."""
    _check_ids(job_id)
    home = _home(store, readonly=True)
    try:
        home.catalog.get_job(job_id)
    except SnapstateError as exc:
        _fail(exc)
    events = home.catalog.events(job_id)
    if as_json:
        click.echo(
            json.dumps([{"at": e.at, "kind": e.kind, "detail": e.detail} for e in events], indent=1)
        )
        return
    _inspect.table(["WHEN", "EVENT", "DETAIL"], [[_when(e.at), e.kind, e.detail] for e in events])


@cli.command(epilog=_EXIT_HELP)
@store_option
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(dir_okay=False),
    help="Where to write the self-contained snapshot file.",
)
@click.argument("ref")
def export(store: str | None, output: str, ref: str) -> None:
    """Write snapshot JOB@SEQ to a self-contained file that resume and inspect accept.

    The file is signed with this store's key: another store resumes it when it has
    the key (`snaprun keys export`/`keys import`, or SNAPSTATE_KEY)."""
    _check_ids(ref, file_ok=True)
    home = _home(store, readonly=True)
    try:
        path, job_id, seq, row = _resolve(home, ref, need_seq=True)
        home.verify(path) if row is None else home.verify_row(row)
    except SnapstateError as exc:
        _fail(exc)
    try:
        _admin.check_export_target(home, output)
    except SnapstateError as exc:
        _fail(exc)
    from ..serializers._fs import write_atomic
    from ..serializers._home import _read_chunks

    write_atomic(output, _read_chunks(path))
    _say(f"exported {job_id}@{seq} to {output}")


@cli.command(epilog=_EXIT_HELP)
@store_option
@click.argument("path", type=click.Path(dir_okay=False))
def verify(store: str | None, path: str) -> None:
    """Check a snapshot file's integrity and signature without loading it."""
    home = _home(store, path, readonly=True)
    try:
        header = home.verify(path)
    except SnapstateError as exc:
        _fail(exc)
    label = f" ({header['label']})" if header.get("label") else ""
    click.echo(
        f"ok: job {header['job_id']} snapshot {header['seq']}{label}, key "
        f"{header['key_id']}, {'+'.join(header['codecs'])}, taken {_when(header['created_at'])}"
        f" under Python {header['versions']['python_full']}"
    )
    click.echo(_inspect.written_by(header))


@cli.command(epilog=_EXIT_HELP)
@store_option
@click.option("--as", "as_id", default=None, help="Id of the new job (default: generated).")
@click.argument("ref")
def fork(store: str | None, as_id: str | None, ref: str) -> None:
    """Start a new job from snapshot JOB@SEQ; the original job is untouched.

    Resume the new job with `snaprun resume NEW`."""
    _check_ids(ref)
    _check_new_id(as_id, "--as")
    job_id, seq = _parse_ref(ref)
    if seq is None:
        raise click.UsageError(f"name a snapshot: {job_id}@SEQ (see `snaprun log {job_id}`)")
    home = _home(store)
    try:
        new_id = _admin.fork(home, job_id, seq, as_id)
    except SnapstateError as exc:
        _fail(exc)
    click.echo(new_id)
    _say(f"forked {job_id}@{seq} as {new_id}; continue it with: snaprun resume {new_id}")


@cli.command(epilog=_EXIT_HELP)
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
    callback=_finite_grace,
    help="On SIGTERM or Ctrl-C, how long running jobs get to reach their next snapshot "
    "before they are killed (they stay resumable).",
)
@click.option(
    "--max-crashes",
    type=click.IntRange(1, 10**6),
    default=_worker.DEFAULT_MAX_CRASHES,
    show_default=True,
    help="Mark a job failed once its runner died this many times in a row without a new "
    "snapshot (retried at once, then after 1s, 2s, 4s... at most 60s).",
)
def worker(
    store: str | None,
    concurrency: int,
    poll: float,
    once: bool,
    grace: float,
    max_crashes: int,
) -> None:
    """Run jobs that can continue: waiting ones whose timer or rate limit is due or
    whose approval was decided or expired, and interrupted ones (their runner died or
    was stopped). Each runs in a child process (`snaprun resume JOB`); parked and failed
    jobs are left alone. SIGTERM stops it: running jobs stop at their next snapshot
    (within --grace) and stay resumable; exit 143. Its log goes to stderr."""
    home = _home(store)
    try:
        code = _worker.Worker(
            home,
            concurrency=concurrency,
            poll=poll,
            grace=grace,
            once=once,
            max_crashes=max_crashes,
            say=_say,
        ).run()
    except SnapstateError as exc:
        _fail(exc)
    sys.exit(code)


@cli.command(epilog=_EXIT_HELP)
@store_option
@click.option("--keep-last", type=int, default=None, help="Keep each job's N latest snapshots.")
@click.option(
    "--older-than",
    default=None,
    help="Drop snapshots older than this (30m, 12h, 7d, 2w); a job's latest stays.",
)
@click.option("--finished", is_flag=True, help="Drop done and failed jobs entirely.")
def prune(store: str | None, keep_last: int | None, older_than: str | None, finished: bool) -> None:
    """Delete old snapshots and finished jobs. A job that can still be resumed always
    keeps its latest snapshot; files no catalog row names are swept too."""
    if keep_last is None and older_than is None and not finished:
        raise click.UsageError(
            "say what to prune: --keep-last N, --older-than DURATION and/or --finished"
        )
    if keep_last is not None and keep_last < 1:
        raise click.BadParameter("--keep-last must be at least 1")
    cutoff = time.time() - _parse_duration(older_than) if older_than else None
    home = _home(store)
    try:
        report = _admin.prune(home, keep_last=keep_last, older_than=cutoff, finished=finished)
    except SnapstateError as exc:
        _fail(exc)
    click.echo(
        f"pruned {report.snapshots} snapshot(s) and {len(report.jobs)} finished job(s)"
        + (f": {', '.join(report.jobs)}" if report.jobs else "")
        + (f"; removed {report.orphans} orphan file(s)" if report.orphans else "")
        + (f"; removed {report.temp_files} temp file(s)" if report.temp_files else "")
    )
    for job_id in report.running:
        _say(f"job {job_id} is running: not pruned")
    for problem in report.damaged:
        _say(f"error: {problem}")
    if report.damaged:
        sys.exit(EXIT_USAGE)


@cli.command(epilog=_EXIT_HELP)
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON to stdout.")
@click.argument("job_id")
def effects(store: str | None, as_json: bool, job_id: str) -> None:
    """List a job's effect ledger: each logical action, its state and key."""
    _check_ids(job_id)
    home = _home(store, readonly=True)
    try:
        home.catalog.get_job(job_id)
    except SnapstateError as exc:
        _fail(exc)
    rows: list[dict[str, Any]] = [  # JSON records
        {
            "effect": e.ordinal,
            "state": e.state,
            "kind": e.kind,
            "name": e.name,
            "args": e.args_repr,
            "call_site": e.call_site,
            "key": e.key,
            "attempts": e.attempts,
            "note": e.note,
            "updated": e.updated,
        }
        for e in home.catalog.effects(job_id)
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    _inspect.table(
        ["#", "STATE", "CALL", "AT", "ATTEMPTS", "KEY", "NOTE"],
        [
            [
                str(r["effect"]),
                r["state"],
                f"{r['name'].rsplit('.', 1)[-1]}({r['args']})",
                r["call_site"].rsplit("/", 1)[-1],
                str(r["attempts"]),
                r["key"],
                r["note"],
            ]
            for r in rows
        ],
    )


@cli.command(epilog=_EXIT_HELP)
@store_option
@click.option(
    "--committed",
    "committed",
    flag_value=True,
    default=None,
    help="The action did happen at the provider.",
)
@click.option(
    "--not-committed",
    "committed",
    flag_value=False,
    help="The action did not happen: it will be dispatched again on resume.",
)
@click.option(
    "--result",
    "result_json",
    default=None,
    help="With --committed: the provider's result, as JSON (default: None).",
)
@click.argument("job_id")
@click.argument("effect", type=click.IntRange(1, 2**63 - 1))
def reconcile(
    store: str | None, committed: bool | None, result_json: str | None, job_id: str, effect: int
) -> None:
    """Say what happened to an effect whose outcome is unknown, so the job can resume."""
    if committed is None:
        raise click.UsageError("say what happened: --committed or --not-committed")
    if result_json is not None and not committed:
        raise click.UsageError("--result goes with --committed")
    try:
        result = json.loads(result_json) if result_json is not None else None
    except ValueError as exc:
        raise click.BadParameter(f"--result is not JSON: {exc}") from None
    _check_ids(job_id)
    home = _home(store)
    try:
        _admin.reconcile(home, job_id, effect, committed=committed, result=result)
    except SnapstateError as exc:
        _fail(exc)
    _say(
        f"effect {effect} of job {job_id} reconciled as "
        f"{'committed' if committed else 'not committed'}; continue with: snaprun resume "
        f"{job_id}"
    )


@cli.command(epilog=_EXIT_HELP)
@store_option
@click.argument("ref")
def replay(store: str | None, ref: str) -> None:
    """Run from snapshot JOB@SEQ with every effect served from the ledger and none
    dispatched, writing nothing; stops at the first divergence (exit 1) or where the
    recorded history ends (exit 0)."""
    _check_ids(ref)
    home = _home(store, readonly=True)
    try:
        job_id, seq = _parse_ref(ref)
        if seq is None:
            raise click.UsageError(f"name a snapshot: {job_id}@SEQ")
        job = Job.open(home, job_id)
        job.say = _say
    except SnapstateError as exc:
        _fail(exc)
    try:
        result = job.replay(seq)
    except DivergenceError as exc:
        sys.stdout.flush()
        _say(f"replay of {job_id}@{seq} diverged: {exc}")
        sys.exit(EXIT_FAILED)
    except SnapstateError as exc:
        if job._agent is None:
            _fail(exc)
        _agent_failed(job, exc)
    except Exception as exc:
        _agent_failed(job, exc)
    sys.stdout.flush()
    if job.replay_stop:
        _say(f"replay of {job_id}@{seq} stopped: {job.replay_stop}; nothing was dispatched")
    else:
        _say(
            f"replay of {job_id}@{seq} finished: main() returned {result!r}; nothing was dispatched"
        )
    sys.exit(EXIT_DONE)


@cli.command(epilog=_EXIT_HELP)
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON to stdout.")
@click.argument("job_id", required=False)
def stats(store: str | None, as_json: bool, job_id: str | None) -> None:
    """Durability metrics per job: resumes, snapshot age, effects served from the
    ledger after a restore, reconciled and ambiguous actions, restart-to-progress."""
    _check_ids(job_id)
    home = _home(store, readonly=True)
    try:
        rows = _admin.stats(home, job_id)
    except SnapstateError as exc:
        _fail(exc)
    if as_json:
        click.echo(json.dumps(rows if job_id is None else rows[0], indent=1))
        return
    _inspect.table(
        [
            "JOB",
            "STATUS",
            "RESUMES",
            "SNAPSHOT AGE",
            "EFFECTS",
            "SERVED",
            "RECONCILED",
            "AMBIGUOUS",
            "RESTART->PROGRESS",
        ],
        [
            [
                r["job"],
                r["status"],
                str(r["resumes"]),
                "-" if r["snapshot_age_s"] is None else _ago(r["snapshot_age_s"]),
                str(r["effects"]),
                str(r["served_from_ledger"]),
                str(r["reconciled"]),
                str(r["ambiguous"]),
                "-" if r["restart_to_progress_s"] is None else f"{r['restart_to_progress_s']:.3f}s",
            ]
            for r in rows
        ],
    )


@cli.command(epilog=_EXIT_HELP)
@store_option
@click.option(
    "--encrypt",
    is_flag=True,
    help="Require encryption: new snapshots are encrypted, plaintext ones refused.",
)
def init(store: str | None, encrypt: bool) -> None:
    """Create a store (and its key); stores are also created on first use."""
    home = _home(store, create=True)
    if encrypt:
        home.set_encryption(True)
    _say(
        f"store {home.directory} ready (key {home.keys.current.key_id}, encryption "
        f"{'required' if home.encrypt else 'off'})"
    )


@cli.command(epilog=_EXIT_HELP)
@store_option
@click.option(
    "--accept",
    "accept_id",
    default=None,
    metavar="JOB",
    help="Let a job rebuilt by repair resume, once you checked its providers.",
)
def repair(store: str | None, accept_id: str | None) -> None:
    """Rebuild a lost or damaged catalog from the signed snapshot files.

    The damaged catalog is moved aside, never deleted. Every rebuilt job is parked:
    its effect ledger was lost, so check with the providers what it already did, then
    `snaprun repair --accept JOB` lets it resume."""
    directory = default_home(store)
    try:
        if accept_id is not None:
            _repair.accept(_home(store), accept_id)
            _say(f"job {accept_id} accepted; continue it with: snaprun resume {accept_id}")
            return
        report = _repair.repair(directory)
    except SnapstateError as exc:
        _fail(exc)
    for path, reason in report.unverifiable:
        _say(f"left alone (not restored): {path}: {reason}")
    if report.identity_restored:
        _say(f"store identity {directory}/store.json written again")
    if report.healthy:
        _say(f"the catalog of {directory} is healthy; nothing to rebuild")
        return
    if report.moved_aside:
        _say(f"the damaged catalog was moved to {report.moved_aside}")
    for job in report.jobs:
        for path in job.left_alone:
            _say(f"left alone (not on job {job.job_id}'s latest branch): {path}")
        copied = f" (its first files are copies of job {job.parent}'s)" if job.parent else ""
        click.echo(
            f"rebuilt job {job.job_id}: snapshots {', '.join(map(str, job.seqs))}{copied}, parked"
        )
    _say(
        f"{len(report.jobs)} job(s) rebuilt and parked: their effect ledgers were lost, so "
        "what each sent after its latest snapshot is unknown. Check with the providers, "
        "then `snaprun repair --accept JOB` and `snaprun resume JOB`."
    )


# ------------------------------------------------------------------------ approvals
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def _shown(text: str) -> str:
    """Catalog text for a terminal: control characters (escape sequences an edited
    catalog could hold) shown as \\xNN, rich markup escaped."""
    return escape(_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text))


def _approval_record(row: ApprovalRow, now: float) -> dict[str, Any]:
    """An approval as `snaprun approvals --json` prints it."""
    state = row.state
    if state == "pending" and _approvals.is_expired(row, now):
        state = "expired"
    return {
        "job": row.job_id,
        "id": row.approval_id,
        "name": row.name,
        "state": state,
        "scope": json.loads(row.scope),
        "digest": row.digest,
        "requested": row.requested,
        "expires": row.expires,
        "approvers": row.approvers,
        "decided_by": row.decided_by,
        "decided_at": row.decided_at,
        "note": row.note,
        "site": row.site,
    }


@cli.command(epilog=_EXIT_HELP)
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON to stdout.")
@click.option("--all", "show_all", is_flag=True, help="Also decided and expired approvals.")
def approvals(store: str | None, as_json: bool, show_all: bool) -> None:
    """List the approvals waiting for a decision (with --all, every approval): job, id,
    name, the exact scope, when requested, when it expires, who may decide."""
    home = _home(store, readonly=True)
    now = clock().time()
    try:
        rows = home.catalog.approvals() if show_all else _approvals.pending(home)
        altered = {(r.job_id, r.approval_id) for r in rows if not _approvals.verified(home, r)}
    except SnapstateError as exc:
        _fail(exc)
    records = [_approval_record(r, now) for r in rows]
    for r in records:
        r["altered"] = (r["job"], r["id"]) in altered  # `approve` refuses such a row
    if as_json:
        click.echo(json.dumps(records, indent=1))
        return
    if not records:
        _say("no approval is waiting for a decision" if not show_all else "no approvals")
        return
    headers = ["JOB", "ID", "NAME", "SCOPE", "REQUESTED", "EXPIRES", "APPROVERS"]
    _inspect.table(
        headers + (["STATE", "DECIDED BY"] if show_all else []),
        [
            [
                _shown(r["job"]),
                _shown(r["id"]),
                _shown(r["name"]) + (" (ALTERED in the catalog: refused)" if r["altered"] else ""),
                _shown(json.dumps(r["scope"], sort_keys=True)),
                _when(r["requested"]),
                "never" if r["expires"] is None else _when(r["expires"]),
                "anyone" if r["approvers"] is None else _shown(", ".join(r["approvers"])),
            ]
            + ([_shown(r["state"]), _shown(r["decided_by"] or "-")] if show_all else [])
            for r in records
        ],
    )


def _decide(store: str | None, job_id: str, approval_id: str, **how: Any) -> None:
    _check_ids(job_id)
    home = _home(store)
    try:
        row = _approvals.decide(home, job_id, approval_id, **how)
    except SnapstateError as exc:
        _fail(exc)
    except (TypeError, ValueError) as exc:  # an invalid --by or --note
        _say(f"error: {exc}")
        sys.exit(EXIT_USAGE)
    expires = "never expires" if row.expires is None else f"expires {_when(row.expires)}"
    note = f" ({'reason' if row.state == 'rejected' else 'note'}: {row.note})" if row.note else ""
    _say(
        f"approval {row.approval_id} ({row.name!r}) of job {job_id} {row.state} by "
        f"{row.decided_by} at {_when(row.decided_at or 0.0)}{note}; scope {row.scope}; "
        f"{expires}. The job continues when it is resumed (`snaprun worker`, or "
        f"`snaprun resume {job_id}`)"
    )


@cli.command(epilog=_EXIT_HELP)
@store_option
@click.option("--by", default=None, help="Who approves (default: the OS user name).")
@click.option("--note", default=None, help="A note recorded with the decision.")
@click.argument("job_id")
@click.argument("approval_id")
def approve(
    store: str | None, by: str | None, note: str | None, job_id: str, approval_id: str
) -> None:
    """Grant approval APPROVAL_ID of job JOB_ID with exactly the scope it was requested
    with (shown); records who and when. The job stays waiting until it is resumed."""
    _decide(store, job_id, approval_id, granted=True, by=by, note=note)


@cli.command(epilog=_EXIT_HELP)
@store_option
@click.option("--reason", default=None, help="Why (recorded; the agent sees it).")
@click.option("--by", default=None, help="Who rejects (default: the OS user name).")
@click.argument("job_id")
@click.argument("approval_id")
def reject(
    store: str | None, reason: str | None, by: str | None, job_id: str, approval_id: str
) -> None:
    """Reject approval APPROVAL_ID of job JOB_ID: when resumed, the job gets
    ApprovalRejected at its request_approval() call."""
    _decide(store, job_id, approval_id, granted=False, by=by, note=reason)


@cli.group()
def keys() -> None:
    """Manage the store's signing and encryption keys."""


@keys.command("list")
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON to stdout.")
def keys_list(store: str | None, as_json: bool) -> None:
    """List key ids (never the secrets)."""
    home = _home(store, readonly=True)
    current = home.keys.current.key_id
    rows: list[dict[str, Any]] = [  # JSON records
        {
            "key": k.key_id,
            "current": k.key_id == current,
            "retired": k.retired,
            "created": k.created,
        }
        for k in home.keys.keys()
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    _inspect.table(
        ["KEY", "STATE", "CREATED"],
        [
            [
                r["key"],
                "current" if r["current"] else ("retired" if r["retired"] else "valid"),
                _when(r["created"]) if r["created"] else "from SNAPSTATE_KEY",
            ]
            for r in rows
        ],
    )


@keys.command("rotate")
@store_option
def keys_rotate(store: str | None) -> None:
    """Make a new key current; snapshots signed with older keys still load."""
    try:
        key = _home(store, create=True).keys.rotate()
    except SnapstateError as exc:
        _fail(exc)
    _say(f"key {key.key_id} is now current")


@keys.command("export")
@store_option
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(dir_okay=False),
    help="The key file to write (mode 0600; never overwritten).",
)
@click.argument("key_id")
def keys_export(store: str | None, output: str, key_id: str) -> None:
    """Write key KEY_ID (with its secret) to a new file, for `snaprun keys import`."""
    try:
        _home(store).keys.export(key_id, output)
    except SnapstateError as exc:
        _fail(exc)
    _say(
        f"key {key_id} written to {output} (it holds the secret: keep it private, "
        "delete it once imported)"
    )


@keys.command("import")
@store_option
@click.argument("path", type=click.Path(dir_okay=False))
def keys_import(store: str | None, path: str) -> None:
    """Add the key of a file made by `snaprun keys export` (valid, not current)."""
    try:
        key, added = _home(store, create=True).keys.import_file(path)
    except SnapstateError as exc:
        _fail(exc)
    _say(
        f"key {key.key_id} "
        + (
            "imported: snapshots signed with it now verify here"
            if added
            else "was already in this store; nothing changed"
            + (" (it is retired: its snapshots stay refused)" if key.retired else "")
        )
    )


@keys.command("retire")
@store_option
@click.argument("key_id")
def keys_retire(store: str | None, key_id: str) -> None:
    """Stop trusting KEY_ID: snapshots signed with it are refused."""
    try:
        _home(store, create=True).keys.retire(key_id)
    except SnapstateError as exc:
        _fail(exc)
    _say(f"key {key_id} retired")


def main() -> None:
    # The last resort: an error escaping a command is snapstate's own (an agent's
    # exceptions are reported by _run_job), so it gets a message and an exit code,
    # never a traceback.
    try:
        cli(prog_name="snaprun")
    except SnapstateError as exc:
        _fail(exc)
    except (sqlite3.DatabaseError, ValueError, RecursionError) as exc:
        _damaged(exc)
    except OSError as exc:
        where = f" {exc.filename}" if exc.filename else ""
        _say(f"error: cannot read or write{where}: {exc.strerror or exc}")
        sys.exit(EXIT_USAGE)


if __name__ == "__main__":
    main()
