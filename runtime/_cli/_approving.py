"""snaprun's approval commands: approvals (list), approve and reject. A decision is
recorded in the store; the job continues when it is resumed (`snaprun worker`)."""

from __future__ import annotations

import json
from typing import Any

import click

from ..._errors import ApprovalError
from .. import _api, _approvals, _inspect
from .._clock import clock
from ._common import EXIT_HELP, check_ids, open_home, say, shown, store_option, when

__all__ = ["approvals", "approve", "reject"]


@click.command(epilog=EXIT_HELP)
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON to stdout.")
@click.option("--all", "show_all", is_flag=True, help="Also decided and expired approvals.")
def approvals(store: str | None, as_json: bool, show_all: bool) -> None:
    """List the approvals waiting for a decision (with --all, every approval): job, id,
    name, the exact scope, when requested, when it expires, who may decide."""
    home = open_home(store, readonly=True)
    now = clock().time()
    rows = _api.approval_rows(home, every=show_all)
    records: list[dict[str, Any]] = []  # JSON records
    for row in rows:
        view = _api.approval_view(home, row, now)
        records.append(
            {
                "job": view.job_id,
                "id": view.approval_id,
                "name": view.name,
                "state": view.state,
                "scope": view.scope,
                "digest": row.digest,
                "requested": view.requested,
                "expires": view.expires,
                "approvers": None if view.approvers is None else list(view.approvers),
                "decided_by": view.decided_by,
                "decided_at": view.decided_at,
                "note": view.note,
                "site": view.site,
                "altered": view.altered,  # `approve` refuses such a row
                "damaged": row.damaged,  # why the catalog refuses the row (None: it doesn't)
            }
        )
    if as_json:
        click.echo(json.dumps(records, indent=1))
        return
    if not records:
        say("no approval is waiting for a decision" if not show_all else "no approvals")
        return
    headers = ["JOB", "ID", "NAME", "SCOPE", "REQUESTED", "EXPIRES", "APPROVERS"]
    _inspect.table(
        headers + (["STATE", "DECIDED BY"] if show_all else []),
        [
            [
                shown(r["job"]),
                shown(r["id"]),
                shown(r["name"]) + (" (ALTERED in the catalog: refused)" if r["altered"] else ""),
                shown(json.dumps(r["scope"], sort_keys=True)),
                when(r["requested"]),
                "never" if r["expires"] is None else when(r["expires"]),
                "anyone" if r["approvers"] is None else shown(", ".join(r["approvers"])),
            ]
            + ([shown(r["state"]), shown(r["decided_by"] or "-")] if show_all else [])
            for r in records
        ],
    )


def _decide(store: str | None, job_id: str, approval_id: str, **how: Any) -> None:
    check_ids(job_id)
    home = open_home(store)
    try:
        row = _approvals.decide(home, job_id, approval_id, **how)
    except (TypeError, ValueError) as exc:  # an invalid --by or --note
        raise ApprovalError(str(exc)) from None
    expires = "never expires" if row.expires is None else f"expires {when(row.expires)}"
    note = f" ({'reason' if row.state == 'rejected' else 'note'}: {row.note})" if row.note else ""
    say(
        f"approval {row.approval_id} ({row.name!r}) of job {job_id} {row.state} by "
        f"{row.decided_by} at {when(row.decided_at or 0.0)}{note}; scope {row.scope}; "
        f"{expires}. The job continues when it is resumed (`snaprun worker`, or "
        f"`snaprun resume {job_id}`)"
    )


@click.command(epilog=EXIT_HELP)
@store_option
@click.option("--by", default=None, help="Who approves (default: the OS user name).")
@click.option("--note", default=None, help="A note recorded with the decision.")
@click.argument("job_id")
@click.argument("approval_id")
def approve(
    store: str | None, by: str | None, note: str | None, job_id: str, approval_id: str
) -> None:
    """Grant approval APPROVAL_ID of job JOB_ID with exactly the scope it was requested
    with (shown); records who and when. The job stays waiting until it is resumed."""
    _decide(store, job_id, approval_id, granted=True, by=by, note=note)


@click.command(epilog=EXIT_HELP)
@store_option
@click.option("--reason", default=None, help="Why (recorded; the agent sees it).")
@click.option("--by", default=None, help="Who rejects (default: the OS user name).")
@click.argument("job_id")
@click.argument("approval_id")
def reject(
    store: str | None, reason: str | None, by: str | None, job_id: str, approval_id: str
) -> None:
    """Reject approval APPROVAL_ID of job JOB_ID: when resumed, the job gets
    ApprovalRejected at its request_approval() call."""
    _decide(store, job_id, approval_id, granted=False, by=by, note=reason)
