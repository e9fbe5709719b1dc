"""`snaprun db`: the store's catalog schema (create, upgrade, show its version)."""

from __future__ import annotations

import click

from ...serializers._home import default_home
from .. import _admin
from ._common import check_globals, exit_codes, say, store_option

__all__ = ["db"]


@click.group()
@click.pass_context
def db(ctx: click.Context) -> None:
    """The store's catalog tables: create and upgrade them."""
    check_globals(ctx)


@db.command("upgrade", epilog=exit_codes(0, 1, 2))
@store_option
def db_upgrade(store: str | None) -> None:
    """Create the catalog's tables, or upgrade them to this release's schema.

    A PostgreSQL store's empty database is set up on first use; a schema written by an
    older release is upgraded only by this command (run it once every machine has the
    new release). A schema newer than this release knows is refused (exit 2)."""
    report = _admin.upgrade_schema(default_home(store))
    if report.before == report.after:
        say(f"the {report.backend} store {report.where} has schema {report.after}: up to date")
    elif report.before == 0:
        say(f"the {report.backend} store {report.where} was set up (schema {report.after})")
    else:
        say(
            f"the {report.backend} store {report.where} was upgraded from schema "
            f"{report.before} to {report.after}"
        )
