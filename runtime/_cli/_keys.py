"""`snaprun keys`: list, rotate, export, import and retire a store's signing and
encryption keys (never printing a secret)."""

from __future__ import annotations

import json
from typing import Any

import click

from .. import _inspect
from ._common import open_home, say, store_option, when

__all__ = ["keys"]


@click.group()
def keys() -> None:
    """Manage the store's signing and encryption keys."""


@keys.command("list")
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON to stdout.")
def keys_list(store: str | None, as_json: bool) -> None:
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
    _inspect.table(
        ["KEY", "STATE", "CREATED"],
        [
            [
                r["key"],
                "current" if r["current"] else ("retired" if r["retired"] else "valid"),
                when(r["created"]) if r["created"] else "from SNAPSTATE_KEY",
            ]
            for r in rows
        ],
    )


@keys.command("rotate")
@store_option
def keys_rotate(store: str | None) -> None:
    """Make a new key current; snapshots signed with older keys still load."""
    key = open_home(store, create=True).keys.rotate()
    say(f"key {key.key_id} is now current")


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
    open_home(store).keys.export(key_id, output)
    say(
        f"key {key_id} written to {output} (it holds the secret: keep it private, "
        "delete it once imported)"
    )


@keys.command("import")
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


@keys.command("retire")
@store_option
@click.argument("key_id")
def keys_retire(store: str | None, key_id: str) -> None:
    """Stop trusting KEY_ID: snapshots signed with it are refused."""
    open_home(store, create=True).keys.retire(key_id)
    say(f"key {key_id} retired")
