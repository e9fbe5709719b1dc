"""snaprun: run, resume, list, inspect and manage durable agent jobs.

stdin, stdout and stderr belong to the agent while it runs: snaprun's own messages go
to stderr, never to stdout. Listing commands (ls, log, inspect, keys list) print to
stdout; with --json, as JSON.

The commands live by what they do: _running.py (run, resume, replay, worker),
_reading.py (ls, inspect, log, effects, stats, verify), _managing.py (init, export,
fork, reconcile, prune, repair), _migrating.py (migrate-store), _approving.py (approvals, approve, reject),
_crashtest.py (crashtest) and _keys.py; what they share is in _common.py. A command parses, calls the runtime and
prints; whatever it raises ends in main(), the one error path: a snapstate error is
its message and its exit code (runtime/_api.py's EXIT_CODES), a usage error the same
`snaprun: error:` line with exit 2, and nothing ends in a traceback.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import click

from ..._errors import SnapstateError
from .._api import EXIT_CODES, EXIT_FAILED, EXIT_USAGE, exit_code
from ._approving import approvals, approve, reject
from ._common import EXIT_HELP, STORE_HELP, damaged, say
from ._crashtest import crashtest
from ._db import db
from ._keys import keys
from ._managing import export, fork, init, prune, reconcile, repair, set_entry
from ._migrating import migrate_store
from ._reading import effects, inspect, list_jobs, log, stats, verify
from ._running import replay, resume, run, worker

__all__ = ["cli", "main", "EXIT_CODES", "exit_code"]

_EXIT_HELP = EXIT_HELP  # the epilog of every command's --help


# A group called without a command shows its help (exit 2); click 8.1 exits 0 itself.
_NO_ARGS_IS_HELP: tuple[type[click.UsageError], ...] = tuple(
    getattr(click.exceptions, name)
    for name in ("NoArgsIsHelpError",)
    if hasattr(click.exceptions, name)
)


def _refuse(message: str, code: int) -> NoReturn:
    sys.stdout.flush()  # the agent's output, if any, comes first
    say(f"error: {message}")
    sys.exit(code)


class _Snaprun(click.Group):
    """The group whose main() is the one error path, however it is called (the
    `snaprun` entry point, `python -m`, click's CliRunner in tests)."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> NoReturn:
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _NO_ARGS_IS_HELP as exc:  # `snaprun`, `snaprun keys`: the help, on stderr
            exc.show()
            sys.exit(exc.exit_code)
        except click.UsageError as exc:  # a bad option, argument or combination
            message = exc.format_message()
            if exc.ctx is not None and "`snaprun" not in message:  # no next step named yet
                message += f" (see `{exc.ctx.command_path} --help`)"
            _refuse(message, exc.exit_code)
        except click.ClickException as exc:
            _refuse(exc.format_message(), exc.exit_code)
        except click.Abort:  # Ctrl-C or end of input at a prompt
            click.echo("Aborted!", err=True)
            sys.exit(EXIT_FAILED)
        except SnapstateError as exc:
            _refuse(str(exc), exit_code(exc))
        except (sqlite3.DatabaseError, ValueError, RecursionError) as exc:
            # The last resort: store files the code did not expect. An agent's exceptions
            # are reported by the commands that run it, so what reaches here is snapstate's.
            _refuse(str(damaged(exc)), EXIT_USAGE)
        except OSError as exc:
            if exc.errno == errno.EPIPE:  # stdout closed early (`snaprun ls | head`)
                # Python's advice: point stdout at devnull so the flush at exit is quiet.
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                sys.exit(EXIT_FAILED)
            where = f" {exc.filename}" if exc.filename else ""
            _refuse(f"cannot read or write{where}: {exc.strerror or exc}", EXIT_USAGE)
        sys.exit(code if isinstance(code, int) else 0)


@click.group(cls=_Snaprun, epilog=EXIT_HELP)
@click.version_option(package_name="snapstate")
@click.option("--store", type=str, default=None, metavar="DIR|URL", help=STORE_HELP)
def cli(store: str | None) -> None:
    """Run long-lived Python agents that survive kill -9 and resume where they stopped."""


for _command in (
    run,
    resume,
    replay,
    worker,
    list_jobs,
    inspect,
    log,
    effects,
    stats,
    verify,
    init,
    export,
    fork,
    reconcile,
    set_entry,
    prune,
    repair,
    approvals,
    approve,
    reject,
    keys,
    db,
    migrate_store,
    crashtest,
):
    cli.add_command(_command)


def main() -> None:
    """The entry point (`snaprun`)."""
    cli.main(prog_name="snaprun")
