"""`snaprun migrate-store SRC DST`: copy a store's jobs into another store (runtime/_migrate.py)."""

from __future__ import annotations

import json
import sys

import click

from .. import _migrate
from ._common import exit_codes, json_option, say
from ._table import print_text

__all__ = ["migrate_store"]


@click.command("migrate-store", epilog=exit_codes(0, 1, 2, 5))
@click.argument("source", metavar="SRC")
@click.argument("target", metavar="DST")
@click.option(
    "--decrypt",
    is_flag=True,
    help="Let an encrypted source go into an existing plaintext destination, stored in clear.",
)
@json_option
def migrate_store(source: str, target: str, decrypt: bool, as_json: bool) -> None:
    """Copy every job of the store SRC into the store DST (each a store directory or a
    postgresql:// URL; DST is created if need be), with its snapshots, effect ledger,
    approvals, wait, timeline and metrics, every signature verified on the way.

    SRC is only read. A job already in DST is skipped when identical (a second run is a
    no-op) and refused when it differs; a job or snapshot that fails verification is
    refused, named, and not copied (exit 2); a job running in SRC (its lease is live) is
    not copied (exit 5: stop it, then run the command again). A job whose runner died
    arrives interrupted (resumable). DST must hold SRC's keys (missing ones are imported
    into its key file); an encrypted SRC goes into a plaintext DST only with --decrypt
    (a DST created here is encrypted like SRC). A PostgreSQL store's key comes from
    SNAPSTATE_KEY_FILE or SNAPSTATE_KEY."""
    report = _migrate.migrate_store(source, target, decrypt=decrypt)
    if as_json:
        click.echo(json.dumps(report.as_json(), indent=1))
    else:
        print_text(
            f"{report.source} -> {report.target}"
            + (
                " (created" + (", encrypted)" if report.encrypted else ")")
                if report.created
                else ""
            )
            + f": {len(report.copied)} job(s) copied, {len(report.skipped)} already there "
            f"(skipped); {report.snapshots} snapshot(s), {report.effects} effect(s), "
            f"{report.approvals} approval(s)"
        )
        if report.keys_imported:
            print_text(f"keys imported into the destination: {', '.join(report.keys_imported)}")
    for job_id in report.running:
        say(
            f"job {job_id} is running in the source (its lease is live): not copied; stop "
            "it (or let it finish), then run the command again"
        )
    for refusal in report.refused:
        say(f"error: job {refusal.job} was not copied: {refusal.reason}")
    if report.exit_code:
        sys.exit(report.exit_code)
