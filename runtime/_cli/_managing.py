"""snaprun's commands that manage a store's jobs and files: init, export, fork,
reconcile, set-entry, prune and repair. Each calls one function of the runtime (runtime/_admin.py,
runtime/_repair.py) and says what it did."""

from __future__ import annotations

import json
import re
import sys
import time

import click

from ..._errors import StoreError
from ...serializers._home import default_home
from ...serializers._location import is_postgres_url, redact
from .. import _admin, _api, _repair
from .._agent import EntryPoint, EntryPointError
from .._api import EXIT_USAGE
from ._common import (
    check_ids,
    check_new_id,
    exit_codes,
    open_home,
    parse_duration,
    parse_ref,
    resolve,
    say,
    store_option,
)
from ._records import effect_ref
from ._table import print_text

__all__ = ["init", "export", "fork", "reconcile", "set_entry", "prune", "repair"]


@click.command(epilog=exit_codes(0, 1, 2))
@store_option
@click.option(
    "--encrypt",
    is_flag=True,
    help="Require encryption: new snapshots are encrypted, plaintext ones refused.",
)
def init(store: str | None, encrypt: bool) -> None:
    """Create a store (and its key); stores are also created on first use."""
    home = open_home(store, create=True)
    if encrypt:
        home.set_encryption(True)
    say(
        f"store {home.directory} ready (key {home.keys.current.key_id}, encryption "
        f"{'required' if home.encrypt else 'off'})"
    )


@click.command(epilog=exit_codes(0, 1, 2))
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
    check_ids(ref, file_ok=True)
    home = open_home(store, readonly=True)
    path, job_id, seq, row = resolve(home, ref, need_seq=True)
    home.verify(path) if row is None else home.verify_row(row)
    _admin.export(home, path, output, row)
    say(f"exported {job_id}@{seq} to {output}")


@click.command(epilog=exit_codes(0, 1, 2))
@store_option
@click.option("--as", "as_id", default=None, help="Id of the new job (default: generated).")
@click.argument("ref")
def fork(store: str | None, as_id: str | None, ref: str) -> None:
    """Start a new job from snapshot JOB@SEQ; the original job is untouched.

    Resume the new job with `snaprun resume NEW`."""
    check_ids(ref)
    check_new_id(as_id, "--as")
    job_id, seq = parse_ref(ref)
    if seq is None:
        raise click.UsageError(f"name a snapshot: {job_id}@SEQ (see `snaprun log {job_id}`)")
    new_id = _admin.fork(open_home(store), job_id, seq, as_id)
    click.echo(new_id)
    say(f"forked {job_id}@{seq} as {new_id}; continue it with: snaprun resume {new_id}")


@click.command(epilog=exit_codes(0, 1, 2, 5))
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
@click.argument("effect")
def reconcile(
    store: str | None, committed: bool | None, result_json: str | None, job_id: str, effect: str
) -> None:
    """Say what happened to an effect whose outcome is unknown, so the job can resume.

    EFFECT as `snaprun effects` shows it: a number, or TASK#N (2#1: task 2's first
    effect); the catalog's raw ordinal is accepted too."""
    if committed is None:
        raise click.UsageError("say what happened: --committed or --not-committed")
    if result_json is not None and not committed:
        raise click.UsageError("--result goes with --committed")
    try:
        result = json.loads(result_json) if result_json is not None else None
    except ValueError as exc:
        raise click.BadParameter(f"--result is not JSON: {exc}") from None
    check_ids(job_id)
    if not re.fullmatch(r"[0-9]+|[0-9][0-9.]*#[0-9]+", effect) or effect.strip("0") == "":
        raise click.BadParameter(
            f"EFFECT {effect!r}: name an effect as `snaprun effects {job_id}` shows it: a "
            "number from 1, or TASK#N (task 2's first effect is 2#1)"
        )
    home = open_home(store)
    ordinal = effect_ref(_api.effect_views(home, job_id), effect) if "#" in effect else int(effect)
    if ordinal >= 2**63:
        raise click.BadParameter(f"{effect!r}: no effect has so large a number")
    _admin.reconcile(home, job_id, ordinal, committed=committed, result=result)
    say(
        f"effect {effect} of job {job_id} reconciled as "
        f"{'committed' if committed else 'not committed'}; continue with: snaprun resume "
        f"{job_id}"
    )


@click.command("set-entry", epilog=exit_codes(0, 1, 2, 5))
@store_option
@click.argument("job_id")
@click.argument("script")
def set_entry(store: str | None, job_id: str, script: str) -> None:
    """Change the entry point a job resumes with to SCRIPT (a .py file or
    module:function, as `snaprun run` takes it), when the agent's file moved.

    The entry point recorded at `run` is the one every resume imports; this is the
    one command that changes it (the catalog row is signed again with the store's
    key). Nothing is imported now: `snaprun resume JOB` loads it."""
    try:
        entry = EntryPoint.parse(script)
    except EntryPointError as exc:
        raise click.UsageError(str(exc)) from None
    check_ids(job_id)
    old = _admin.set_entry(open_home(store), job_id, entry)
    say(
        f"job {job_id}: entry point set to {entry.path or entry.module + ':' + entry.function}"
        f" (was {old.path or old.module + ':' + old.function}); continue it with: "
        f"snaprun resume {job_id}"
    )


@click.command(epilog=exit_codes(0, 1, 2, 5))
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
    cutoff = time.time() - parse_duration(older_than) if older_than else None
    home = open_home(store)
    report = _admin.prune(home, keep_last=keep_last, older_than=cutoff, finished=finished)
    print_text(
        f"pruned {report.snapshots} snapshot(s) and {len(report.jobs)} finished job(s)"
        + (f": {', '.join(report.jobs)}" if report.jobs else "")
        + (f"; removed {report.orphans} orphan file(s)" if report.orphans else "")
        + (f"; removed {report.temp_files} temp file(s)" if report.temp_files else "")
        + (f"; freed {report.chunks} chunk(s)" if report.chunks else "")
        + (f"; removed {report.packs} unused pack file(s)" if report.packs else "")
    )
    for job_id in report.running:
        say(f"job {job_id} is running: not pruned")
    for problem in report.damaged:
        say(f"error: {problem}")
    if report.damaged:  # the rest was pruned: a partial success, reported as refused
        sys.exit(EXIT_USAGE)


@click.command(epilog=exit_codes(0, 1, 2))
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
    if is_postgres_url(directory):
        raise StoreError(
            f"`snaprun repair` rebuilds a directory store's catalog from its snapshot files; "
            f"the PostgreSQL store {redact(directory)} keeps its snapshots in the database: "
            "restore the database from a backup (or its point-in-time recovery)"
        )
    if accept_id is not None:
        _repair.accept(open_home(store), accept_id)
        say(f"job {accept_id} accepted; continue it with: snaprun resume {accept_id}")
        return
    report = _repair.repair(directory)
    for path, reason in report.unverifiable:
        say(f"left alone (not restored): {path}: {reason}")
    if report.identity_restored:
        say(f"store identity {directory}/store.json written again")
    if report.healthy:
        say(f"the catalog of {directory} is healthy; nothing to rebuild")
        return
    if report.moved_aside:
        say(f"the damaged catalog was moved to {report.moved_aside}")
    say(
        "snapshots kept as chunks (those a job takes with this release, unless exported "
        "or imported as files) lived in the catalog and are not rebuilt from files: "
        "restore catalog.db from a backup to get them back"
        + (f" (the damaged one is in {report.moved_aside})" if report.moved_aside else "")
    )
    for job in report.jobs:
        for path in job.left_alone:
            say(f"left alone (not on job {job.job_id}'s latest branch): {path}")
        copied = f" (its first files are copies of job {job.parent}'s)" if job.parent else ""
        print_text(
            f"rebuilt job {job.job_id}: snapshots {', '.join(map(str, job.seqs))}{copied}, parked"
        )
    say(
        f"{len(report.jobs)} job(s) rebuilt and parked: their effect ledgers were lost, so "
        "what each sent after its latest snapshot is unknown. Check with the providers, "
        "then `snaprun repair --accept JOB` and `snaprun resume JOB`."
    )
