"""What the dashboard shows and does, without any web library: each page's data read
from the store (read-only) through the functions `snaprun ls`, `log`, `effects`,
`inspect` and `approvals` use, and the decisions made through those of `approve`,
`reject` and `reconcile`. Values are the stored ones, unescaped: the templates
escape them (Jinja2's autoescape), as the CLI's tables make them visible."""

from __future__ import annotations

import json
import time
from typing import Any

from ..._errors import ApprovalError, SnapstateError, StoreError
from ...serializers._home import Home
from ...serializers._ids import validate_job_id
from ...serializers._store import effect_label
from .. import _admin, _api, _approvals, _diff, _inspect, _inspect_path
from .._clock import clock

__all__ = [
    "STATUSES",
    "jobs_data",
    "job_data",
    "snapshot_data",
    "value_data",
    "diff_data",
    "ValueNotFound",
    "approvals_data",
    "decide",
    "reconcile",
    "when",
    "relative",
    "DecisionRefused",
]

STATUSES = tuple(str(s) for s in _api.JobStatus)
# Effects a person may say the outcome of (the catalog refuses the others):
RECONCILABLE = frozenset({"ambiguous", "dispatched", "failed"})


class DecisionRefused(SnapstateError):
    """A decision the dashboard refuses before it reaches the store (an unknown user, an
    unknown outcome, a result that is not JSON)."""


def when(t: float | None) -> str:
    """A time as the CLI shows it (`2026-12-02 05:21:08`, local time); a damaged one
    (a catalog row holding text or an out-of-range number) as what it is, so one bad
    row does not make the whole page an error."""
    if t is None:
        return "-"
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
    except (TypeError, ValueError, OverflowError, OSError):
        return f"(not a time: {str(t)[:40]!r})"


def relative(seconds: float) -> str:
    """`5m ago` for a past moment's distance, `in 5m` for a future one's (negative)."""
    future, seconds = seconds < 0, abs(seconds)
    text = f"{seconds:.0f}s"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            text = f"{seconds / size:.0f}{unit}"
            break
    return f"in {text}" if future else f"{text} ago"


# ------------------------------------------------------------------------ jobs
def _job_row(view: _api.JobView, now: float, pending: dict[str, int]) -> dict[str, Any]:
    latest = view.latest
    wait = view.wait
    return {
        "job": view.job_id,
        "status": str(view.status),
        "snapshots": len(view.snapshots),
        "latest": latest.seq if latest else None,
        "label": latest.label if latest else None,
        "updated": view.updated,
        "updated_ago": relative(now - view.updated),
        "resumes": view.resumes,
        "error": view.error,
        "parent": view.parent,
        "wait": None
        if wait is None
        else {
            "kind": wait.kind,
            "reason": wait.reason,
            "due": None if wait.due is None else relative(now - wait.due),
            "approval": wait.approval_id,
        },
        "pending_approvals": pending.get(view.job_id, 0),
    }


def jobs_data(home: Home, status: str | None, query: str, limit: int = 100) -> dict[str, Any]:
    """The newest `limit` jobs (`snaprun ls --limit`), newest first; with a status or a
    search (`query` in the job id or latest label, any case), every job is searched."""
    now = clock().time()
    needle = query.strip().casefold()
    filtered = bool(status or needle)
    total, views = _api.job_page(home, now, None if filtered else limit)
    pending: dict[str, int] = {}
    for row in _approvals.pending(home):
        pending[row.job_id] = pending.get(row.job_id, 0) + 1
    rows = [_job_row(v, now, pending) for v in reversed(views)]
    counts = {s: sum(1 for r in rows if r["status"] == s) for s in STATUSES}
    if status:
        rows = [r for r in rows if r["status"] == status]
    if needle:
        rows = [
            r
            for r in rows
            if needle in r["job"].casefold() or needle in (r["label"] or "").casefold()
        ]
    return {"jobs": rows, "total": total, "counts": counts, "listed": len(views)}


def _effect_row(view: _api.EffectView) -> dict[str, Any]:
    label, site = effect_label(view.ordinal, view.call_site)
    return {
        "ordinal": view.ordinal,
        "id": label,
        "site": site,
        "state": view.state,
        "kind": view.kind,
        "internal": view.kind == "value",
        "call": f"{view.name.rsplit('.', 1)[-1]}({view.args})",
        "key": view.key,
        "attempts": view.attempts,
        "note": view.note,
        "updated": view.updated,
        "status": view.status,
        "model": view.model,
        "reconcilable": view.state in RECONCILABLE and view.kind != "value",
    }


def _approval_row(home: Home, row: Any, now: float) -> dict[str, Any]:
    view = _api.approval_view(home, row, now)
    return {
        "job": view.job_id,
        "id": view.approval_id,
        "name": view.name,
        "state": view.state,
        "scope": json.dumps(view.scope, sort_keys=True, indent=1),
        "requested": view.requested,
        "requested_ago": relative(now - view.requested),
        "expires": view.expires,
        "expires_in": None if view.expires is None else relative(now - view.expires),
        "approvers": None if view.approvers is None else list(view.approvers),
        "decided_by": view.decided_by,
        "decided_at": view.decided_at,
        "note": view.note,
        "site": view.site,
        "altered": view.altered,
        "decidable": view.state == "pending" and not view.altered,
    }


def job_data(home: Home, job_id: str) -> dict[str, Any]:
    """A job's page: its status and wait, its timeline (`snaprun log`: creation, leases,
    snapshots, resumes, waits, errors), its snapshots, its effect ledger (`snaprun
    effects`), its approvals and its lease. JobNotFound names the job."""
    validate_job_id(job_id)
    now = clock().time()
    view = _api.job_view(home, job_id, now)
    lease = home.catalog.get_lease(job_id)
    approvals = [r for r in home.catalog.approvals() if r.job_id == job_id]
    return {
        "job": _job_row(view, now, {}),
        "entry": view.entry,
        "argv": view.argv,
        "created": view.created,
        "events": [
            {"at": e.at, "kind": e.kind, "detail": e.detail} for e in home.catalog.events(job_id)
        ],
        "snapshots": [
            {"seq": s.seq, "label": s.label, "created": s.created, "size": s.size}
            for s in view.snapshots
        ],
        "effects": [_effect_row(e) for e in view.effects],
        "approvals": [_approval_row(home, r, now) for r in approvals],
        "lease": None
        if lease is None
        else {
            "owner": str(lease.owner),
            "epoch": lease.epoch,
            "live": lease.is_live(now),
            "expires": lease.expires,
            "heartbeat": lease.heartbeat,
        },
        "meta": view.meta,
        "pins": view.pins,
    }


def _decoded(home: Home, job_id: str, seq: int) -> _inspect.SnapshotView:
    """A snapshot verified and decoded by the inert unpickler, streamed (no agent code
    imported or run; the body never held whole)."""
    validate_job_id(job_id)
    home.catalog.get_job(job_id)
    row = home.catalog.snapshot(job_id, seq)
    return _inspect.snapshot_view(*_inspect.load_state(home, row))


def snapshot_data(home: Home, job_id: str, seq: int) -> dict[str, Any]:
    """A snapshot's frames, locals and globals as `snaprun inspect` shows them, each
    frame with the path (`snaprun inspect --path`) its locals are read by."""
    report = _inspect.describe_view(_decoded(home, job_id, seq))
    for place, task in enumerate(report["tasks"]):
        prefix = "" if place == 0 else f"task[{place}]."
        for frame in task["frames"]:
            base = f"{prefix}frame[{frame['index']}].locals"
            frame["paths"] = {
                n: f"{base}.{n}" if n.isidentifier() else None for n in frame["locals"] or {}
            }
    report["global_paths"] = {
        module: {n: f"globals.{module}.{n}" if n.isidentifier() else None for n in values}
        for module, values in (report.get("globals") or {}).items()
    }
    seqs = [s.seq for s in home.catalog.snapshots(job_id)]
    report["previous"] = max((s for s in seqs if s < seq), default=None)
    report["next"] = min((s for s in seqs if s > seq), default=None)
    return report


class ValueNotFound(SnapstateError):
    """A drill-down path that does not resolve (the message names the part that did
    not and what exists there)."""


def value_data(home: Home, job_id: str, seq: int, path: str) -> dict[str, Any]:
    """One value of a snapshot and its children, by path (`snaprun inspect --path`)."""
    view = _decoded(home, job_id, seq)
    try:
        named, value = _inspect_path.resolve_path(view, path)
    except _inspect_path.PathError as exc:
        raise ValueNotFound(str(exc)) from None
    return _inspect_path.show_value(named, value)


def diff_data(home: Home, ref_a: str, ref_b: str) -> dict[str, Any]:
    """What changed from snapshot ref_a to ref_b (JOB or JOB@SEQ each), as `snaprun
    diff --json` reports it."""
    return _diff.diff_report(home, ref_a, ref_b)


def approvals_data(home: Home, every: bool) -> list[dict[str, Any]]:
    """The approvals waiting for a decision (`snaprun approvals`); with `every`, all."""
    now = clock().time()
    return [_approval_row(home, r, now) for r in _api.approval_rows(home, every=every)]


# ------------------------------------------------------------------------ decisions
def _decider(by: str, users: tuple[str, ...]) -> str:
    if by not in users:
        raise DecisionRefused(
            f"{by!r} is not one of the dashboard's users ({', '.join(users)}); pick one "
            "(`snaprun ui --user NAME` names them)"
        )
    return by


def decide(
    home: Home,
    job_id: str,
    approval_id: str,
    *,
    decision: str,
    by: str,
    note: str,
    users: tuple[str, ...],
) -> str:
    """Approve or reject as `snaprun approve` / `reject --by BY` do (the same refusals:
    decided, expired, not an approver, an altered row); returns what was done."""
    if decision not in ("approve", "reject"):
        raise DecisionRefused(f"unknown decision {decision!r}: approve or reject")
    who = _decider(by, users)
    try:
        row = _approvals.decide(
            home,
            job_id,
            approval_id,
            granted=decision == "approve",
            by=who,
            note=note or None,
        )
    except (TypeError, ValueError) as exc:  # an invalid note
        raise ApprovalError(str(exc)) from None
    return (
        f"approval {row.approval_id} ({row.name!r}) of job {job_id} {row.state} by "
        f"{row.decided_by}; the job continues when it is resumed (`snaprun worker`, or "
        f"`snaprun resume {job_id}`)"
    )


def reconcile(
    home: Home,
    job_id: str,
    ordinal: int,
    *,
    outcome: str,
    result: str,
    by: str,
    users: tuple[str, ...],
) -> str:
    """Say what happened to an effect, as `snaprun reconcile` does (`result`: JSON, for
    a committed effect only); the note records who. Returns what was done."""
    if outcome not in ("committed", "not-committed"):
        raise DecisionRefused(f"unknown outcome {outcome!r}: committed or not-committed")
    who = _decider(by, users)
    committed = outcome == "committed"
    value: object = None
    if result.strip():
        if not committed:
            raise DecisionRefused("a result goes with a committed effect only")
        try:
            value = json.loads(result)
        except ValueError as exc:
            raise DecisionRefused(f"the result is not JSON: {exc}") from None
    if not 1 <= ordinal < 2**63:
        raise StoreError(f"job {job_id} has no effect {ordinal} (`snaprun effects {job_id}`)")
    row = _admin.reconcile(home, job_id, ordinal, committed=committed, result=value, by=who)
    shown = effect_label(row.ordinal, row.call_site)[0]
    return (
        f"effect {shown} of job {job_id} reconciled as "
        f"{'committed' if committed else 'not committed'} by {who}; continue with: "
        f"snaprun resume {job_id}"
    )
