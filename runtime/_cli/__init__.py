"""snaprun: run, resume, list, inspect and manage durable agent jobs.

stdin, stdout and stderr belong to the agent while it runs: snaprun's own messages go
to stderr, never to stdout. Listing commands (ls, log, inspect, keys list) print to
stdout; with --json, as JSON.

The commands live by what they do: _running.py (run, resume, replay, worker),
_debugging.py (debug),
_reading.py (ls, inspect, log, effects, stats, verify), _diffing.py (diff), _managing.py (init, export,
fork, reconcile, prune, repair), _migrating.py (migrate-store), _approving.py
(approvals, approve, reject), _crashtest.py (crashtest), _ui.py (ui, the dashboard:
runtime/_ui), _keys.py and _db.py; what they share is in _common.py,
how they print in _table.py (text as text, tables that fit the terminal) and
_records.py (the --json form of each object), `help` and the command groups here. A
command parses, calls the runtime and prints; whatever it raises ends in main(), the
one error path: a snapstate error is its message and its exit code (runtime/_api.py's
EXIT_CODES), a usage error the same `snaprun: error:` line with exit 2 and the help
to read, and nothing ends in a traceback.
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
from ._common import EXIT_HELP, STORE_HELP, check_globals, damaged, say
from ._crashtest import crashtest
from ._db import db
from ._debugging import debug
from ._diffing import diff
from ._keys import keys
from ._managing import export, fork, init, prune, reconcile, repair, set_entry
from ._migrating import migrate_store
from ._reading import effects, inspect, list_jobs, log, stats, verify
from ._running import replay, resume, run, worker
from ._ui import ui

__all__ = ["cli", "main", "EXIT_CODES", "exit_code", "COMMAND_GROUPS"]

_EXIT_HELP = EXIT_HELP  # `snaprun help exit-codes`

# How `snaprun --help` groups the commands (a command added without a group is listed
# under "Other commands", never hidden).
COMMAND_GROUPS: dict[str, tuple[str, ...]] = {
    "Running jobs": ("run", "resume", "replay", "debug", "worker", "crashtest"),
    "Reading a store": ("ls", "log", "inspect", "diff", "effects", "stats", "verify", "ui"),
    "Deciding": ("approvals", "approve", "reject", "reconcile"),
    "Managing jobs": ("fork", "export", "set-entry", "prune", "repair"),
    "Store and keys": ("init", "keys", "db", "migrate-store"),
    "Help": ("help",),
}


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


def _usage_message(exc: click.UsageError) -> str:
    """click's message in snaprun's words, with the next step: the command's help."""
    message = exc.format_message()
    if exc.ctx is not None and "`snaprun" not in message:  # no next step named yet
        path = exc.ctx.command_path.split()
        topic = " ".join(["snaprun", "help", *path[1:]]) if len(path) > 1 else "snaprun help"
        message = message.rstrip(".") + f"; see `{topic}`"
    return message


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
            _refuse(_usage_message(exc), exc.exit_code)
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

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands by group (COMMAND_GROUPS), each with its one-line help."""
        commands = {
            name: command
            for name in self.list_commands(ctx)
            if (command := self.get_command(ctx, name)) is not None and not command.hidden
        }
        if not commands:
            return
        limit = formatter.width - 6 - max(len(name) for name in commands)
        listed: set[str] = set()
        sections = [*COMMAND_GROUPS.items(), ("Other commands", tuple(commands))]
        for title, names in sections:
            rows = [
                (name, commands[name].get_short_help_str(limit))
                for name in names
                if name in commands and name not in listed
            ]
            listed.update(name for name, _ in rows)
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


@click.group(
    cls=_Snaprun,
    epilog="\b\nGlobal options go before the command or after it (`snaprun --store DIR ls`).\n"
    "`snaprun help COMMAND`: a command's help; `snaprun help exit-codes`: the exit codes.",
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(package_name="snapstate")
@click.option("--store", type=str, default=None, metavar="DIR|URL", help=STORE_HELP)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print JSON to stdout (the listing commands, docs/cli.md).",
)
@click.option("--wide", is_flag=True, help="Tables: print every cell whole.")
@click.pass_context
def cli(ctx: click.Context, store: str | None, as_json: bool, wide: bool) -> None:
    """Run long-lived Python agents that survive kill -9 and resume where they stopped."""
    check_globals(ctx)


@click.command("help", context_settings={"ignore_unknown_options": True})
@click.argument("topic", nargs=-1)
@click.pass_context
def help_command(ctx: click.Context, topic: tuple[str, ...]) -> None:
    """Show snaprun's help, a command's (`snaprun help ls`, `snaprun help keys list`) or
    the exit codes (`snaprun help exit-codes`)."""
    root = ctx.find_root()
    if topic == ("exit-codes",):
        click.echo(EXIT_HELP.removeprefix("\b\n"))
        return
    command: click.Command = root.command
    context = root
    for word in topic:
        if not isinstance(command, click.Group):
            raise click.UsageError(
                f"`snaprun {' '.join(topic[: topic.index(word)])}` has no subcommands; "
                "see `snaprun help`"
            )
        found = command.get_command(context, word)
        if found is None:
            raise click.UsageError(
                f"no command {word!r}; `snaprun help` lists the commands and "
                "`snaprun help exit-codes` the exit codes"
            )
        command = found
        context = click.Context(command, info_name=word, parent=context)
    click.echo(command.get_help(context))


for _command in (
    run,
    resume,
    replay,
    debug,
    worker,
    list_jobs,
    inspect,
    diff,
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
    ui,
    help_command,
):
    cli.add_command(_command)


def main() -> None:
    """The entry point (`snaprun`)."""
    cli.main(prog_name="snaprun")
