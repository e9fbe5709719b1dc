"""`snaprun keys`: list, rotate, export, import and retire a store's signing and
encryption keys (never printing a secret)."""

from __future__ import annotations

import json
from typing import Any

import click

from ._common import check_globals, exit_codes, json_option, open_home, say, store_option, when
from ._table import Column, table, wide_option

__all__ = ["keys"]


@click.group()
@click.pass_context
def keys(ctx: click.Context) -> None:
    """Manage the store's signing and encryption keys."""
    check_globals(ctx)


_CODES = exit_codes(0, 1, 2)


@keys.command("list", epilog=_CODES)
@store_option
@json_option
@wide_option
def keys_list(store: str | None, as_json: bool, wide: bool) -> None:
    """List key ids (never the secrets)."""
    home = open_home(store, readonly=True)
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
    table(
        [
            Column("KEY", lambda r: r["key"], keep=True),
            Column(
                "STATE",
                lambda r: "current" if r["current"] else ("retired" if r["retired"] else "valid"),
            ),
            Column(
                "CREATED", lambda r: when(r["created"]) if r["created"] else "from SNAPSTATE_KEY"
            ),
        ],
        rows,
        wide=wide,
    )


@keys.command("rotate", epilog=_CODES)
@store_option
def keys_rotate(store: str | None) -> None:
    """Make a new key current; snapshots signed with older keys still load."""
    key = open_home(store, create=True).keys.rotate()
    say(f"key {key.key_id} is now current")


@keys.command("export", epilog=_CODES)
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
    open_home(store).keys.export(key_id, output)
    say(
        f"key {key_id} written to {output} (it holds the secret: keep it private, "
        "delete it once imported)"
    )


@keys.command("import", epilog=_CODES)
@store_option
@click.argument("path", type=click.Path(dir_okay=False))
def keys_import(store: str | None, path: str) -> None:
    """Add the key of a file made by `snaprun keys export` (valid, not current)."""
    key, added = open_home(store, create=True).keys.import_file(path)
    say(
        f"key {key.key_id} "
        + (
            "imported: snapshots signed with it now verify here"
            if added
            else "was already in this store; nothing changed"
            + (" (it is retired: its snapshots stay refused)" if key.retired else "")
        )
    )


@keys.command("retire", epilog=_CODES)
@store_option
@click.argument("key_id")
def keys_retire(store: str | None, key_id: str) -> None:
    """Stop trusting KEY_ID: snapshots signed with it are refused."""
    open_home(store, create=True).keys.retire(key_id)
    say(f"key {key_id} retired")
