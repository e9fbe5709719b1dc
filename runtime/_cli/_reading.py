"""snaprun's commands that read a store and change nothing: ls, inspect, log, effects,
stats and verify. Tables go to stdout; with --json, JSON records."""

from __future__ import annotations

import json
import time
from typing import Any

import click

from .. import _admin, _api, _inspect, _worker
from .._clock import clock
from ._common import (
    EXIT_HELP,
    ago,
    check_ids,
    is_file_ref,
    open_home,
    resolve,
    store_option,
    when,
)

__all__ = ["list_jobs", "inspect", "log", "effects", "stats", "verify", "show_workers"]


@click.command("ls", epilog=EXIT_HELP)
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON to stdout.")
def list_jobs(store: str | None, as_json: bool) -> None:
    """List the store's jobs with their status and latest snapshot; why each waiting job
    waits and when it is due; the pins (and, with --json, the meta) of its latest
    snapshot."""
    home = open_home(store, readonly=True)
    now = time.time()
    rows: list[dict[str, Any]] = [  # JSON records
        {
            "job": view.job_id,
            "status": view.status,
            "snapshots": len(view.snapshots),
            "latest": view.latest.seq if view.latest else None,
            "label": view.latest.label if view.latest else None,
            "updated": view.updated,
            "resumes": view.resumes,
            "entry": view.entry,
            "parent": view.parent,
            "error": view.error,
            "wait": None
            if view.wait is None
            else {
                "kind": view.wait.kind,
                "reason": view.wait.reason,
                "due": view.wait.due,
                "since": view.wait.since,
                "approval": view.wait.approval_id,
            },
            "meta": view.meta,
            "pins": view.pins,
            "crashes": _worker.crash_report(home.catalog, view.job_id, view.status, view.error),
        }
        for view in _api.job_views(home, now)
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    headers = ["JOB", "STATUS", "SNAPSHOTS", "LATEST", "UPDATED", "RESUMES", "ENTRY", "WAIT"]
    show_pins = any(r["pins"] for r in rows)
    _inspect.table(
        headers + (["PINS"] if show_pins else []),
        [
            [
                r["job"],
                str(r["status"]),
                str(r["snapshots"]),
                "-"
                if r["latest"] is None
                else f"{r['latest']}" + (f" ({r['label']})" if r["label"] else ""),
                ago(now - r["updated"]),
                str(r["resumes"]),
                r["entry"],
                _crash_text(r["crashes"], now) or _wait_text(r["wait"], r["label"]),
            ]
            + ([_pins_text(r["pins"])] if show_pins else [])
            for r in rows
        ],
    )
    live = _worker_records(home, now)
    if live:
        busy = sum(len(w["running"]) for w in live)
        slots = sum(w["concurrency"] or 0 for w in live)
        click.echo(
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


def show_workers(home: Any, as_json: bool) -> None:
    """`snaprun worker --status`: the store's live workers, from their heartbeats."""
    now = time.time()
    records = _worker_records(home, now)
    if as_json:
        click.echo(json.dumps(records, indent=1))
        return
    if not records:
        click.echo(f"no live workers (none has beaten in the last {_worker.WORKER_TTL:g}s)")
        return
    _inspect.table(
        ["WORKER", "STARTED", "LAST BEAT", "JOBS", "RUNNING"],
        [
            [
                f"pid {r['pid']} on {r['host']}",
                "-" if r["started"] is None else ago(now - r["started"]),
                ago(now - r["beat"]),
                f"{len(r['running'])}/{r['concurrency'] or '?'}",
                " ".join(r["running"]) or "-",
            ]
            for r in records
        ],
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


@click.command(epilog=EXIT_HELP)
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON to stdout.")
@click.argument("ref")
def inspect(store: str | None, as_json: bool, ref: str) -> None:
    """Show a snapshot's tasks, frames and locals: JOB (latest), JOB@SEQ or FILE."""
    check_ids(ref, file_ok=True)
    home = open_home(store, readonly=True)
    path, _, _, row = resolve(home, ref)
    header, payload = home.read(path) if row is None else home.read_row(row)
    report = _inspect.describe(header, payload)
    if as_json:
        click.echo(json.dumps(report, indent=1, default=str))
    else:
        _inspect.render(report)


@click.command(epilog=EXIT_HELP)
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON to stdout.")
@click.argument("job_id")
def log(store: str | None, as_json: bool, job_id: str) -> None:
    """Show a job's timeline: creation, leases, snapshots, resumes, outcome."""
    check_ids(job_id)
    home = open_home(store, readonly=True)
    home.catalog.get_job(job_id)
    events = home.catalog.events(job_id)
    if as_json:
        click.echo(
            json.dumps([{"at": e.at, "kind": e.kind, "detail": e.detail} for e in events], indent=1)
        )
        return
    _inspect.table(["WHEN", "EVENT", "DETAIL"], [[when(e.at), e.kind, e.detail] for e in events])


@click.command(epilog=EXIT_HELP)
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON to stdout.")
@click.argument("job_id")
def effects(store: str | None, as_json: bool, job_id: str) -> None:
    """List a job's effect ledger: each logical action, its state and key."""
    check_ids(job_id)
    home = open_home(store, readonly=True)
    rows: list[dict[str, Any]] = [  # JSON records
        {
            "effect": e.ordinal,
            "state": e.state,
            "kind": e.kind,
            "name": e.name,
            "args": e.args,
            "call_site": e.call_site,
            "key": e.key,
            "attempts": e.attempts,
            "note": e.note,
            "updated": e.updated,
            # a request recorded by record_http: its status; model and tokens of a model call
            "status": e.status,
            "model": e.model,
            "input_tokens": e.input_tokens,
            "output_tokens": e.output_tokens,
        }
        for e in _api.effect_views(home, job_id)
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    http = any(r["status"] is not None for r in rows)  # the HTTP column only when recorded
    _inspect.table(
        ["#", "STATE", "CALL", "AT", "ATTEMPTS", "KEY", "NOTE"] + (["HTTP"] if http else []),
        [
            [
                str(r["effect"]),
                r["state"],
                f"{r['name'].rsplit('.', 1)[-1]}({r['args']})",
                r["call_site"].rsplit("/", 1)[-1],
                str(r["attempts"]),
                r["key"],
                r["note"],
            ]
            + ([_http_cell(r)] if http else [])
            for r in rows
        ],
    )


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


@click.command(epilog=EXIT_HELP)
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON to stdout.")
@click.argument("job_id", required=False)
def stats(store: str | None, as_json: bool, job_id: str | None) -> None:
    """Durability metrics per job: resumes, snapshot age, effects served from the
    ledger after a restore, reconciled and ambiguous actions, restart-to-progress."""
    check_ids(job_id)
    home = open_home(store, readonly=True)
    rows = _admin.stats(home, job_id)
    if as_json:
        click.echo(json.dumps(rows if job_id is None else rows[0], indent=1))
        return
    _inspect.table(
        [
            "JOB",
            "STATUS",
            "RESUMES",
            "SNAPSHOT AGE",
            "EFFECTS",
            "SERVED",
            "RECONCILED",
            "AMBIGUOUS",
            "RESTART->PROGRESS",
            "HTTP SAVED",
        ],
        [
            [
                r["job"],
                r["status"],
                str(r["resumes"]),
                "-" if r["snapshot_age_s"] is None else ago(r["snapshot_age_s"]),
                str(r["effects"]),
                str(r["served_from_ledger"]),
                str(r["reconciled"]),
                str(r["ambiguous"]),
                "-" if r["restart_to_progress_s"] is None else f"{r['restart_to_progress_s']:.3f}s",
                f"{r['http_saved_calls']} ({r['http_saved_input_tokens']}/"
                f"{r['http_saved_output_tokens']} tokens)",
            ]
            for r in rows
        ],
    )


@click.command(epilog=EXIT_HELP)
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
    click.echo(
        f"ok: job {header['job_id']} snapshot {header['seq']}{label}, key "
        f"{header['key_id']}, {'+'.join(header['codecs'])}, taken {when(header['created_at'])}"
        f" under Python {header['versions']['python_full']}"
    )
    click.echo(_inspect.written_by(header))
