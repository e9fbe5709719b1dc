"""snaprun's approval commands: approvals (list), approve and reject. A decision is
recorded in the store; the job continues when it is resumed (`snaprun worker`)."""

from __future__ import annotations

import json
from typing import Any

import click

from ..._errors import ApprovalError
from .. import _api, _approvals
from .._clock import clock
from ._common import (
    ago,
    check_ids,
    exit_codes,
    json_option,
    open_home,
    say,
    store_option,
    until,
    when,
)
from ._records import approval_record
from ._table import Column, table, wide_option

__all__ = ["approvals", "approve", "reject"]


@click.command(epilog=exit_codes(0, 1, 2))
@store_option
@json_option
@wide_option
@click.option("--all", "show_all", is_flag=True, help="Also decided and expired approvals.")
def approvals(store: str | None, as_json: bool, wide: bool, show_all: bool) -> None:
    """List the approvals waiting for a decision (with --all, every approval): job, id,
    name, the exact scope, when requested, when it expires, who may decide."""
    home = open_home(store, readonly=True)
    now = clock().time()
    records = [
        approval_record(_api.approval_view(home, row, now), row.digest, row.damaged)
        for row in _api.approval_rows(home, every=show_all)
    ]
    if as_json:
        click.echo(json.dumps(records, indent=1))
        return
    if not records:
        say("no approval is waiting for a decision" if not show_all else "no approvals")
        return
    columns: list[Column[dict[str, Any]]] = [
        Column("JOB", lambda r: r["job"], keep=True),
        Column("ID", lambda r: r["id"], keep=True),
        Column("STATE", _state_text, keep=True),  # never cut: ALTERED is a refusal
        Column("NAME", lambda r: r["name"], flex=True),
        Column("SCOPE", lambda r: json.dumps(r["scope"], sort_keys=True), flex=True),
        Column("REQUESTED", lambda r: ago(now - r["requested"])),
        Column("EXPIRES", lambda r: "never" if r["expires"] is None else until(r["expires"] - now)),
        Column(
            "APPROVERS",
            lambda r: "anyone" if r["approvers"] is None else ", ".join(r["approvers"]),
            flex=True,
        ),
    ]
    table(columns, records, wide=wide)


def _state_text(record: dict[str, Any]) -> str:
    """`pending`, `granted by alice`...; `ALTERED: refused` for a row the catalog
    refuses (approve and reject refuse it too)."""
    if record["altered"]:
        return "ALTERED: refused"
    by, state = record["decided_by"], str(record["state"])
    return state + (f" by {by}" if by and record["state"] in ("granted", "rejected") else "")


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


@click.command(epilog=exit_codes(0, 1, 2))
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


@click.command(epilog=exit_codes(0, 1, 2))
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
