"""snaprun's commands that read a store and change nothing: ls, inspect, log, effects,
stats and verify. Tables go to stdout; with --json, JSON records."""

from __future__ import annotations

import json
import time
import urllib.parse
from typing import Any

import click

from .. import _admin, _api, _inspect, _inspect_path, _worker
from .._clock import clock
from ._common import (
    ago,
    check_ids,
    exit_codes,
    is_file_ref,
    json_option,
    open_home,
    resolve,
    say,
    store_option,
    when,
)
from ._inspecting import render_report, render_value
from ._records import (
    INTERNAL_KINDS,
    effect_record,
    effect_site,
    event_record,
    job_record,
)
from ._table import Column, print_text, table, wide_option

__all__ = [
    "list_jobs",
    "inspect",
    "log",
    "effects",
    "stats",
    "verify",
    "show_workers",
    "DEFAULT_LIMIT",
]


_READ_CODES = exit_codes(0, 1, 2)
DEFAULT_LIMIT = 50


def _latest_text(r: dict[str, Any]) -> str:
    if r["latest"] is None:
        return "-"
    return f"{r['latest']}" + (f" ({r['label']})" if r["label"] else "")


@click.command("ls", epilog=_READ_CODES)
@store_option
@json_option
@wide_option
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=DEFAULT_LIMIT,
    show_default=True,
    metavar="N",
    help="List the newest N jobs.",
)
@click.option("--all", "show_all", is_flag=True, help="List every job.")
def list_jobs(store: str | None, as_json: bool, wide: bool, limit: int, show_all: bool) -> None:
    """List the store's newest jobs with their status and latest snapshot; why each
    waiting job waits and when it is due; the pins (and, with --json, the meta) of its
    latest snapshot. Oldest first; the newest 50 unless --limit N or --all (a line on
    stderr says how many more there are)."""
    home = open_home(store, readonly=True)
    now = time.time()
    total, views = _api.job_page(home, now, None if show_all else limit)
    rows: list[dict[str, Any]] = [
        job_record(view, _worker.crash_report(home.catalog, view.job_id, view.status, view.error))
        for view in views
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=1))
    else:
        show_pins = any(r["pins"] for r in rows)
        columns: list[Column[dict[str, Any]]] = [
            Column("JOB", lambda r: r["job"], keep=True),
            Column("STATUS", lambda r: r["status"], keep=True),
            Column("SNAPS", lambda r: r["snapshots"], right=True),
            Column("LATEST", _latest_text, flex=True, min_width=12),
            Column("UPDATED", lambda r: ago(now - r["updated"])),
            Column("RESUMES", lambda r: r["resumes"], right=True, optional=True),
            Column("ENTRY", lambda r: r["entry"], flex=True, optional=True),
            Column(
                "WAIT",
                lambda r: _crash_text(r["crashes"], now) or _wait_text(r["wait"], r["label"]),
                flex=True,
                min_width=16,
            ),
        ]
        if show_pins:
            columns.append(Column("PINS", lambda r: _pins_text(r["pins"]), flex=True))
        table(columns, rows, wide=wide)
    if len(rows) < total:
        say(
            f"showing the newest {len(rows)} of {total} jobs: `snaprun ls --limit N` or "
            "`snaprun ls --all` lists more"
        )
    if as_json:
        return
    live = _worker_records(home, now)
    if live:
        busy = sum(len(w["running"]) for w in live)
        slots = sum(w["concurrency"] or 0 for w in live)
        print_text(
            f"{len(live)} live worker(s), running {busy} of {slots} job slot(s): "
            + ", ".join(f"pid {w['pid']} on {w['host']}" for w in live)
            + " (`snaprun worker --status`)"
        )


def _worker_records(home: Any, now: float) -> list[dict[str, Any]]:
    """The live workers' heartbeats as JSON records (a catalog row is data: a field of
    the wrong type is shown as unknown, never a traceback)."""
    out = []
    for row in home.catalog.workers(now):
        info = row.info
        running = info.get("running")
        started, concurrency = info.get("started"), info.get("concurrency")
        out.append(
            {
                "host": row.owner.host,
                "pid": row.owner.pid,
                "started": started if isinstance(started, (int, float)) else None,
                "beat": row.beat,
                "expires": row.expires,
                "concurrency": concurrency if isinstance(concurrency, int) else None,
                "running": [j for j in running if isinstance(j, str)]
                if isinstance(running, list)
                else [],
            }
        )
    return out


def show_workers(home: Any, as_json: bool, wide: bool = False) -> None:
    """`snaprun worker --status`: the store's live workers, from their heartbeats."""
    now = time.time()
    records = _worker_records(home, now)
    if as_json:
        click.echo(json.dumps(records, indent=1))
        return
    if not records:
        click.echo(f"no live workers (none has beaten in the last {_worker.WORKER_TTL:g}s)")
        return
    table(
        [
            Column("WORKER", lambda r: f"pid {r['pid']} on {r['host']}", flex=True),
            Column("STARTED", lambda r: "-" if r["started"] is None else ago(now - r["started"])),
            Column("LAST BEAT", lambda r: ago(now - r["beat"])),
            Column("JOBS", lambda r: f"{len(r['running'])}/{r['concurrency'] or '?'}"),
            Column("RUNNING", lambda r: " ".join(r["running"]) or "-", flex=True),
        ],
        records,
        wide=wide,
    )


def _wait_text(wait: dict[str, Any] | None, label: str | None) -> str:
    """`kind, due WHEN: reason` of a waiting job (the reason only when the latest
    snapshot's label, "waiting: reason", does not already say it); "-" for the others."""
    if wait is None:
        return "-"
    if wait["kind"] == "approval":  # its due time is its expiry: decided or not by then
        due = "until decided" + (
            f" (expires {when(wait['due'])})" if wait["due"] is not None else ""
        )
    else:
        due = f"due {when(wait['due'])}" if wait["due"] is not None else "until decided"
    reason = "" if label == f"waiting: {wait['reason']}" else f": {wait['reason']}"
    return f"{wait['kind']}, {due}{reason}"


def _crash_text(crashes: dict[str, Any] | None, now: float) -> str | None:
    """`crash N of MAX in a row, retry in S: last error` of a job the worker backs off
    (once it gave up, its error: "the worker gave up: ..."); None for the others."""
    if crashes is None:
        return None
    limit = f" of {crashes['max']}" if crashes["max"] else ""
    if crashes["gave_up"]:  # its error says so: "the worker gave up: ..."
        return str(crashes["last_error"])
    else:
        left = crashes["retry_at"] - clock().time()
        retry = f"retry in {left:.0f}s" if left > 0.5 else "retry due"
        head = f"crash {crashes['count']}{limit} in a row, {retry}"
    error = crashes["last_error"]
    return head + (f": {error}" if error else "")


def _pins_text(pins: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(pins.items())) or "-"


@click.command(epilog=_READ_CODES)
@store_option
@json_option
@click.option(
    "--path",
    "value_path",
    metavar="PATH",
    default=None,
    help="Show one value and its children, e.g. 'frame[0].locals.notes[3]', "
    "'task[2].frame[1].locals.x', 'globals.agent.CACHE[\"k\"].items' (frame[0] is "
    "the innermost, as the listing numbers them; docs/diff.md).",
)
@click.argument("ref")
def inspect(store: str | None, as_json: bool, value_path: str | None, ref: str) -> None:
    """Show a snapshot's tasks, frames and locals: JOB (latest), JOB@SEQ or FILE.
    Runs none of the snapshot's code (an inert decoder) and reads its body as a
    stream."""
    check_ids(ref, file_ok=True)
    home = open_home(store, readonly=True)
    path, _, _, row = resolve(home, ref)
    view = _inspect.snapshot_view(*_inspect.load_state(home, path if row is None else row))
    if value_path is not None:
        try:
            named, value = _inspect_path.resolve_path(view, value_path)
        except _inspect_path.PathError as exc:
            raise click.BadParameter(str(exc), param_hint="--path") from None
        shown = _inspect_path.show_value(named, value)
        if as_json:
            click.echo(json.dumps(shown, indent=1, default=str))
        else:
            for line in render_value(shown):
                print_text(line)
        return
    report = _inspect.describe_view(view)
    if as_json:
        click.echo(json.dumps(report, indent=1, default=str))
    else:
        for line in render_report(report):
            print_text(line)


@click.command(epilog=_READ_CODES)
@store_option
@json_option
@wide_option
@click.argument("job_id")
def log(store: str | None, as_json: bool, wide: bool, job_id: str) -> None:
    """Show a job's timeline: creation, leases, snapshots, resumes, outcome."""
    check_ids(job_id)
    home = open_home(store, readonly=True)
    home.catalog.get_job(job_id)
    events = home.catalog.events(job_id)
    if as_json:
        click.echo(json.dumps([event_record(e) for e in events], indent=1))
        return
    table(
        [
            Column("WHEN", lambda e: when(e.at)),
            Column("EVENT", lambda e: e.kind),
            Column("DETAIL", lambda e: e.detail, flex=True),
        ],
        events,
        wide=wide,
    )


@click.command(epilog=_READ_CODES)
@store_option
@json_option
@wide_option
@click.option(
    "--all",
    "show_all",
    is_flag=True,
    help="Also the rows snapstate records for the agent's now(), random() and uuid4() "
    "(--json always lists them, each marked internal).",
)
@click.argument("job_id")
def effects(store: str | None, as_json: bool, wide: bool, show_all: bool, job_id: str) -> None:
    """List a job's effect ledger: each logical action, its state and key. `#` is how
    `snaprun reconcile` names it: a number, or TASK#N for a spawned task's N-th action
    (2#1: task 2's first)."""
    check_ids(job_id)
    home = open_home(store, readonly=True)
    views = _api.effect_views(home, job_id)
    if as_json:  # every row, each saying whether it is internal
        click.echo(json.dumps([effect_record(v) for v in views], indent=1))
        return
    shown = [v for v in views if show_all or v.kind not in INTERNAL_KINDS]
    rows: list[dict[str, Any]] = [effect_record(v) for v in shown]
    table(
        [
            Column("#", lambda r: r["id"], keep=True),
            Column("STATE", lambda r: r["state"], keep=True),
            Column(
                "CALL",
                _call_cell,
                flex=True,
                min_width=16,
            ),
            Column("AT", lambda r: r["site"].rsplit("/", 1)[-1], flex=True),
            Column("TRIES", lambda r: r["attempts"], right=True),
            Column("KEY", lambda r: r["key"], flex=True),
            Column("NOTE", lambda r: r["note"], flex=True, optional=True),
        ]
        # a request recorded by record_http: its status, and a model call's model and tokens
        + (
            [Column("HTTP", _http_cell, keep=True)]
            if any(r["status"] is not None for r in rows)
            else []
        ),
        [dict(r, site=effect_site(v)) for r, v in zip(rows, shown, strict=True)],
        wide=wide,
    )
    hidden = len(views) - len(shown)
    if hidden:
        say(
            f"{hidden} row(s) recording now(), random() or uuid4() not shown: "
            f"`snaprun effects {job_id} --all` lists them"
        )


def _call_cell(row: dict[str, Any]) -> str:
    """An effect as `effects` names it: `place_order(vendor='acme', ...)`; a request
    recorded by record_http as its method, path and host (`POST /v1/chat/completions
    api.openai.com`), the part a cut cell keeps first (its body's size and digest are in
    --json's args)."""
    name, args = row["name"], row["args"]
    if row["status"] is not None and name.startswith("http."):
        url = urllib.parse.urlsplit(args.split(", ", 1)[0])
        if url.scheme and url.netloc:
            query = "?…" if url.query else ""
            return f"{name[5:]} {url.path or '/'}{query} {url.netloc}"
    return f"{name.rsplit('.', 1)[-1]}({args})"


def _http_cell(row: dict[str, Any]) -> str:
    """A recorded request's status, and the model and tokens (in/out) of a model call."""
    if row["status"] is None:
        return ""
    parts = [str(row["status"])]
    if row["model"]:
        parts.append(str(row["model"]))
    if row["input_tokens"] is not None or row["output_tokens"] is not None:
        parts.append(f"{row['input_tokens'] or 0}/{row['output_tokens'] or 0} tokens")
    return " ".join(parts)


@click.command(epilog=_READ_CODES)
@store_option
@json_option
@wide_option
@click.argument("job_id", required=False)
def stats(store: str | None, as_json: bool, wide: bool, job_id: str | None) -> None:
    """Durability metrics per job: resumes, snapshot age, effects served from the
    ledger after a restore, reconciled and ambiguous actions, restart-to-progress."""
    check_ids(job_id)
    home = open_home(store, readonly=True)
    rows = _admin.stats(home, job_id)
    if as_json:
        click.echo(json.dumps(rows if job_id is None else rows[0], indent=1))
        return
    table(
        [
            Column("JOB", lambda r: r["job"], keep=True),
            Column("STATUS", lambda r: r["status"], keep=True),
            Column("RESUMES", lambda r: r["resumes"], right=True),
            Column(
                "AGE",
                lambda r: "-" if r["snapshot_age_s"] is None else ago(r["snapshot_age_s"]),
            ),
            Column("EFFECTS", lambda r: r["effects"], right=True),
            Column("SERVED", lambda r: r["served_from_ledger"], right=True),
            Column("RECONCILED", lambda r: r["reconciled"], right=True),
            Column("AMBIGUOUS", lambda r: r["ambiguous"], right=True),
            Column(
                "RESTART",
                lambda r: (
                    "-"
                    if r["restart_to_progress_s"] is None
                    else f"{r['restart_to_progress_s']:.3f}s"
                ),
                right=True,
            ),
            # model calls recorded by record_http answered from the ledger after a restore
            Column(
                "HTTP SAVED",
                lambda r: (
                    f"{r['http_saved_calls']} ({r['http_saved_input_tokens']}/"
                    f"{r['http_saved_output_tokens']} tokens)"
                ),
                flex=True,
            ),
        ],
        rows,
        wide=wide,
    )


@click.command(epilog=_READ_CODES)
@store_option
@click.argument("ref")
def verify(store: str | None, ref: str) -> None:
    """Check a snapshot's integrity and signature without loading it: FILE, JOB
    (latest) or JOB@SEQ (every chunk of a chunked snapshot is checked)."""
    check_ids(ref, file_ok=True)
    home = open_home(store, readonly=True)
    if is_file_ref(ref):
        header = home.verify(ref)
    else:
        row = resolve(home, ref)[3]
        assert row is not None  # not a FILE: the job's catalog row
        header = home.verify_row(row)[0]
    label = f" ({header['label']})" if header.get("label") else ""
    print_text(
        f"ok: job {header['job_id']} snapshot {header['seq']}{label}, key "
        f"{header['key_id']}, {'+'.join(header['codecs'])}, taken {when(header['created_at'])}"
        f" under Python {header['versions']['python_full']}"
    )
    print_text(_inspect.written_by(header))
