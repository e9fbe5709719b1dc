"""snaprun: run and resume agents.

stdin, stdout and stderr belong to the agent: snaprun's own messages go to stderr,
never to stdout. Exit codes: 0 done, 1 the agent raised, 2 usage or invalid input
(unknown file, tampered, truncated or foreign snapshot), 3 waiting, 4 parked,
5 conflict.
"""

from __future__ import annotations

import os
import sys
import traceback

import click

from ._agent import EntryPoint, EntryPointError
from ._errors import SnapstateError
from ._job import Job

EXIT_DONE, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

_EXIT_HELP = """\b
Exit codes:
  0  done
  1  the agent raised an exception
  2  usage error or invalid input (bad snapshot, unknown file)
  3  waiting (approval, timer)       4  parked (needs reconcile)
  5  conflict (another runner holds the job)"""


def _home(store: str | None) -> str:
    return os.path.abspath(store or os.environ.get("SNAPSTATE_HOME") or ".snapstate")


def _say(message: str) -> None:
    click.echo(f"snaprun: {message}", err=True)


def _agent_traceback(exc: BaseException) -> str:
    """The agent's traceback without snapstate's own frames."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    tb = exc.__traceback__
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(package):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _finish(job: Job, run) -> None:
    try:
        result = run()
    except Exception as exc:  # the agent raised
        sys.stdout.flush()
        sys.stderr.write(_agent_traceback(exc))
        _say(f"job {job.job_id} failed: {type(exc).__name__}: {exc}")
        if job.last_snapshot:
            _say(f"resume from the last snapshot with: snaprun resume {job.last_snapshot}")
        sys.exit(EXIT_FAILED)
    sys.stdout.flush()
    _say(f"job {job.job_id} done; main() returned {result!r}")
    sys.exit(EXIT_DONE)


@click.group(epilog=_EXIT_HELP)
@click.version_option(package_name="snapstate")
def cli() -> None:
    """Run long-lived Python agents that survive kill -9 and resume where they stopped."""


@cli.command(context_settings={"ignore_unknown_options": True,
                               "allow_interspersed_args": False}, epilog=_EXIT_HELP)
@click.option("--store", type=click.Path(file_okay=False), default=None,
              help="Store directory (default: $SNAPSTATE_HOME or ./.snapstate).")
@click.option("--job", "job_id", default=None, help="Job id (default: generated).")
@click.argument("script")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def run(store, job_id, script, args) -> None:
    """Run SCRIPT's main() (a .py file or module:function) as a job.

    ARGS become the agent's sys.argv[1:]. Snapshots are written under the store."""
    try:
        entry = EntryPoint.parse(script)
    except EntryPointError as exc:
        raise click.UsageError(str(exc)) from None
    job = Job(entry, "", job_id, list(args))
    job.directory = os.path.join(_home(store), "jobs", job.job_id)
    _say(f"job {job.job_id} started; snapshots in {job.directory}")
    try:
        fn = job.prepare()
    except SnapstateError as exc:
        _say(f"error: {exc}")
        sys.exit(EXIT_USAGE)
    _finish(job, lambda: job.run_restored(fn))


@cli.command(epilog=_EXIT_HELP)
@click.argument("snapshot_file", type=click.Path(dir_okay=False))
def resume(snapshot_file) -> None:
    """Continue a job right after the snapshot() that wrote SNAPSHOT_FILE."""
    try:
        job, header, body = Job.from_snapshot(snapshot_file)
        outer = job.restore(header, body, snapshot_file)
    except SnapstateError as exc:
        _say(f"error: {exc}")
        sys.exit(EXIT_USAGE)
    _say(f"job {job.job_id} resumed from snapshot {header['seq']}")
    _finish(job, lambda: job.run_restored(outer))


def main() -> None:
    cli(prog_name="snaprun")


if __name__ == "__main__":
    main()
