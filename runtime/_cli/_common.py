"""What every snaprun command shares: its messages, the store it opens, the options and
the checks it makes before anything is opened, and the text forms of times and ids.

A command raises what goes wrong (a SnapstateError, or a click.UsageError for its
arguments); runtime/_cli/__init__.py's main() is the one place that turns it into a
message and an exit code."""

from __future__ import annotations

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

from ..._errors import (
    SnapshotNotFound,
    SnapstateError,
    StoreDamaged,
    StoreError,
    StoreFailure,
)
from ...serializers._home import Home, default_home, open_store
from ...serializers._ids import parse_ref, validate_job_id
from ...serializers._location import is_postgres_url, redact
from ...serializers._sqlite import store_failure
from ...serializers._store import SnapshotRow
from .._api import EXIT_FAILED
from .._job import Job
from ._table import visible

__all__ = [
    "EXIT_HELP",
    "EXIT_MEANINGS",
    "exit_codes",
    "json_option",
    "check_globals",
    "say",
    "open_home",
    "damaged",
    "store_option",
    "grace_option",
    "finite_grace",
    "check_ids",
    "is_file_ref",
    "check_new_id",
    "parse_ref",
    "resolve",
    "agent_failed",
    "agent_traceback",
    "ago",
    "until",
    "when",
    "parse_duration",
]

EXIT_HELP = """\b
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


# Each code in a few words, for the help of the commands that can return it.
EXIT_MEANINGS = {
    0: "done",
    1: "failed",
    2: "usage or invalid input",
    3: "waiting",
    4: "parked",
    5: "conflict",
    130: "Ctrl-C",
    143: "SIGTERM",
}


def exit_codes(*codes: int, ok: str = "ok") -> str:
    """A command's help epilog: only the exit codes it can return (`ok`: what 0 means
    for it), and where the whole table is."""
    words = [f"{code} {ok if code == 0 else EXIT_MEANINGS[code]}" for code in codes]
    return "\b\nExit codes: " + ", ".join(words) + " (`snaprun help exit-codes`)."


def say(message: str) -> None:
    """One of snaprun's own messages: to stderr (stdout belongs to the agent). What it
    quotes (ids, labels, errors) is shown through visible(): only its line breaks are
    kept."""
    text = "\n".join(visible(line) for line in message.split("\n"))
    click.echo(f"snaprun: {text}", err=True)


# ------------------------------------------------------------------------ the store
_STORE_IN_USE: list[str] = []  # named by damaged(), whoever finds the damage


def damaged(exc: BaseException) -> StoreDamaged:
    """The error for store files the code did not expect (the last resort)."""
    where = _STORE_IN_USE[0] if _STORE_IN_USE else default_home(None)
    return StoreDamaged(
        f"the store at {where} is damaged or unreadable: {type(exc).__name__}: "
        f"{exc}. Nothing was changed; restore it from a backup (or `snaprun repair`)."
    )


def open_home(
    store: str | None,
    *,
    create: bool = False,
    readonly: bool = False,
    job: str | None = None,
) -> Home:
    """The store in use (--store, $SNAPSTATE_HOME or ./.snapstate), closed with the
    command however it ends. Only `create` (run, init, resume FILE, keys) makes a new
    store; `readonly` commands write nothing to it at all. A snapshot FILE never
    chooses the store: it is verified only with the keys of the store in use and
    SNAPSTATE_KEY, never with those of a directory around it. `job` names the job in
    the hint of a failing store (resume)."""
    directory = default_home(store)
    _STORE_IN_USE[:] = [redact(directory) if is_postgres_url(directory) else directory]
    try:
        home = open_store(directory, create=create, writable=not readonly)
    except SnapstateError:
        raise  # its own message and exit code
    except OSError as exc:
        # A full, read-only or failing file system is the store failing (exit 1, the
        # jobs stay resumable), not bad input.
        failure = store_failure(exc, os.path.join(directory, "catalog.db"))
        if not isinstance(failure, StoreFailure):
            raise StoreError(f"cannot open the store at {directory}: {exc}") from exc
        if job is not None:
            failure = StoreFailure(
                str(failure).replace("snaprun resume JOB", f"snaprun resume {job}")
            )
        raise failure from exc
    except (sqlite3.DatabaseError, ValueError, RecursionError, KeyError, TypeError) as exc:
        raise damaged(exc) from exc
    context = click.get_current_context(silent=True)
    if context is not None:
        context.call_on_close(home.close)
    return home


# ------------------------------------------------------------------------ options
_F = TypeVar("_F", bound=Callable[..., Any])


def finite_grace(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    if value is not None and not math.isfinite(value):
        raise click.BadParameter("must be a number of seconds", ctx, param)
    return value


def grace_option(fn: _F) -> _F:
    return click.option(
        "--grace",
        type=click.FloatRange(min=0, max=7 * 86400, min_open=True),
        default=None,
        metavar="SECONDS",
        help="On SIGTERM, run on to the next snapshot() and stop right after it is "
        "committed (exit 143); stop at once if the grace runs out first.",
        callback=finite_grace,
    )(fn)


STORE_HELP = (
    "The store: a directory (the embedded SQLite store) or a postgresql://USER@HOST:PORT/DB "
    "URL (default: $SNAPSTATE_STORE, else $SNAPSTATE_HOME, else ./.snapstate)."
)


def _store_given_first(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A command's --store, else the one given before the command (`snaprun --store X ls`)."""
    if value is not None:
        return value
    root = ctx.find_root()
    given = root.params.get("store") if root is not ctx else None
    return given if isinstance(given, str) else None


def store_option(fn: _F) -> _F:
    return click.option(
        "--store",
        type=str,
        default=None,
        metavar="DIR|URL",
        callback=_store_given_first,
        help=STORE_HELP,
    )(fn)


def _json_given_first(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    """A command's --json, or the one given before the command (`snaprun --json ls`)."""
    root = ctx.find_root()
    return bool(value or (root is not ctx and root.params.get("as_json")))


def json_option(fn: _F) -> _F:
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        callback=_json_given_first,
        help="Print JSON to stdout (the objects of docs/cli.md).",
    )(fn)


_GLOBAL_FLAGS = {"store": "--store", "as_json": "--json", "wide": "--wide"}


def check_globals(ctx: click.Context) -> None:
    """In a group's callback: a global flag given before a command that has no such
    option is refused, never ignored (`snaprun --json run ...`)."""
    name = ctx.invoked_subcommand
    group = ctx.command
    if name is None or not isinstance(group, click.Group):
        return
    command = group.get_command(ctx, name)
    if command is None or isinstance(command, click.Group) or name == "help":
        return  # click names an unknown command; a group checks its own commands
    taken = {p.name for p in command.params}
    for param, flag in _GLOBAL_FLAGS.items():
        if ctx.find_root().params.get(param) and param not in taken:
            path = f"{ctx.command_path.removeprefix(ctx.find_root().info_name or '')} {name}"
            path = "snaprun" + (" " + path.strip() if path.strip() else "")
            topic = path.replace("snaprun", "snaprun help", 1)
            raise click.UsageError(f"{flag} does not apply to `{path}`; see `{topic}`")


# ------------------------------------------------------------------------ ids and refs
def check_ids(*refs: str | None, file_ok: bool = False) -> None:
    """Refuse an invalid job id in JOB or JOB@SEQ before the store is even opened:
    nothing is created for a refused id. With file_ok, an existing file is a snapshot
    FILE, not a job."""
    for ref in refs:
        if ref is None or (file_ok and is_file_ref(ref)):
            continue
        try:
            parse_ref(ref)
        except SnapstateError as exc:
            if file_ok and (os.sep in ref or ref.endswith(".snap")):  # meant as a FILE
                raise SnapshotNotFound(f"no snapshot file at {ref}; as a job id: {exc}") from None
            raise


def is_file_ref(ref: str) -> bool:
    """A ref meant as a FILE: a regular file there, or something else at a path that
    is no directory (a FIFO, a device: the reader refuses it, saying what it is)."""
    return os.path.isfile(ref) or (
        os.sep in ref and os.path.lexists(ref) and not os.path.isdir(ref)
    )


def check_new_id(job_id: str | None, option: str) -> None:
    """Refuse an invalid new job id (--job, --as) before the store is opened."""
    if job_id is not None:
        validate_job_id(job_id, what=f"the job id {option}")


def resolve(
    home: Home, ref: str, *, need_seq: bool = False
) -> tuple[str, str, int, SnapshotRow | None]:
    """(path or description, job id, seq, catalog row or None for a FILE) of JOB,
    JOB@SEQ or FILE."""
    if is_file_ref(ref):
        header = home.verify(ref)
        return ref, header["job_id"], header["seq"], None
    job_id, seq = parse_ref(ref)
    if need_seq and seq is None:
        raise click.UsageError(f"name a snapshot: {job_id}@SEQ (see `snaprun log {job_id}`)")
    row = home.snapshot_row(job_id, seq)
    return home.where(row), job_id, row.seq, row


# ------------------------------------------------------------------------ the agent's errors
def agent_traceback(exc: BaseException) -> str:
    """The agent's traceback without snapstate's own frames."""
    tb = exc.__traceback__
    while tb is not None and str(tb.tb_frame.f_globals.get("__name__", "")).startswith(
        "snapstate."
    ):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def agent_failed(job: Job, exc: BaseException) -> NoReturn:
    """The agent raised: its traceback, what to do next, exit 1."""
    sys.stdout.flush()
    sys.stderr.write(agent_traceback(exc))
    say(f"job {job.job_id} failed: {type(exc).__name__}: {exc}")
    if job.seq:
        say(f"its last snapshot is {job.seq}; after fixing the cause: snaprun resume {job.job_id}")
    sys.exit(EXIT_FAILED)


# ------------------------------------------------------------------------ text
def ago(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit} ago"
    return f"{seconds:.0f}s ago"


def until(seconds: float) -> str:
    """`in 5m`, or `expired 2h ago` once past."""
    if seconds <= 0:
        return "expired " + ago(-seconds)
    return "in " + ago(seconds).removesuffix(" ago")


def when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def parse_duration(text: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([smhdw])", text.strip())
    if not match:
        raise click.BadParameter(f"{text!r}: use a number and a unit, e.g. 30m, 12h, 7d, 2w")
    return (
        float(match.group(1))
        * {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[match.group(2)]
    )
