"""The SQL catalog's rows: column lists and the conversions between a table row and
the row dataclasses (serializers/_store.py). What the agent produced is sealed on
write and opened on read with the catalog's Sealer (serializers/_sealing.py); each
sealed value is bound to its table, column and row, so it opens nowhere else.

Catalog rows are data, never code: the rows that decide what code runs or what value
the agent receives (jobs: entry point and argv; effects; waits; approvals with their
decision) carry a signature in their `mac` column (Sealer.row_mac: HMAC-SHA256 under a
key derived from the store key, over the row's identity and values), written with the
row and checked on every read before the row is used. A row that does not verify is
refused (StoreDamaged naming the table, job and ordinal or id); a listing of the whole
store (`lenient`) marks it `damaged` instead, so one bad row does not hide the rest."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from ..._errors import StoreDamaged
from .._sealing import Sealer
from .._store import ApprovalRow, EffectRow, JobRow, LeaseRow, Owner, SnapshotRow, WaitRow

Row = tuple[Any, ...]  # a row as the driver returns it (values by the column's type)


def refusal(where: str, problem: str, path: str | None = None) -> StoreDamaged:
    """The error for a catalog row whose signature does not vouch for it."""
    catalog = f"the catalog {path}" if path else "the catalog"
    return StoreDamaged(
        f"the catalog row {where} is refused: {problem}. Someone wrote {catalog} "
        "without the store's key (an edited, forged or transplanted row); nothing was run "
        "or changed, and the job stays as it was. Restore the catalog from a backup (or "
        "the row as snapstate wrote it), then try again"
    )


def _checked(sealer: Sealer, stored: object, where: str, path: str | None, *parts: object) -> None:
    problem = sealer.row_problem(stored, *parts)
    if problem is not None:
        raise refusal(where, problem, path)


def upsert(table: str, columns: str, key: str) -> str:
    """INSERT of `columns` (one placeholder each) that overwrites the row with the same
    `key` columns: SQLite's INSERT OR REPLACE, in the syntax PostgreSQL shares."""
    names = [c.strip() for c in columns.split(",")]
    keys = {k.strip() for k in key.split(",")}
    places = ", ".join("?" * len(names))
    updates = ", ".join(f"{n} = excluded.{n}" for n in names if n not in keys)
    return (
        f"INSERT INTO {table} ({columns}) VALUES ({places}) "
        f"ON CONFLICT ({key}) DO UPDATE SET {updates}"
    )


# ---------------------------------------------------------------- jobs
JOB_COLUMNS = (
    "job_id, entry, argv, status, created, updated, resume_count, parent, fork_seq, error, mac"
)


def job_mac(
    sealer: Sealer,
    job_id: str,
    entry: str,
    argv: str,
    parent: str | None,
    fork_seq: int | None,
) -> str | None:
    """The signature of a jobs row: its entry point and argv (as stored JSON text,
    argv opened), parent and fork point, bound to the job id."""
    return sealer.row_mac("jobs", job_id, entry, argv, parent, fork_seq)


def job_row(sealer: Sealer, row: Row, *, path: str | None = None, lenient: bool = False) -> JobRow:
    """The jobs row, its signature checked (StoreDamaged naming it); `lenient`: a row
    that does not verify comes back marked `damaged` (a listing of every job)."""
    try:
        argv = sealer.open(row[2], "jobs", "argv", row[0])
        _checked(
            sealer,
            row[10],
            f"jobs (job {row[0]}: its entry point and argv)",
            path,
            "jobs",
            *row[:2],
            argv,
            *row[7:9],
        )
        return JobRow(
            row[0],
            json.loads(row[1]),
            json.loads(argv),
            row[3],
            row[4],
            row[5],
            row[6],
            row[7],
            row[8],
            sealer.open(row[9], "jobs", "error", row[0]),
        )
    except (StoreDamaged, ValueError, TypeError) as exc:
        if not lenient:
            if isinstance(exc, StoreDamaged):
                raise
            raise refusal(
                f"jobs (job {row[0]}: its entry point and argv)", f"it is malformed ({exc})", path
            ) from None
        return JobRow(
            row[0], {}, [], row[3], row[4], row[5], row[6], row[7], row[8], None, str(exc)
        )


# ---------------------------------------------------------------- leases
LEASE_COLUMNS = "job_id, host, pid, started, epoch, expires, heartbeat"


def lease_row(row: Row) -> LeaseRow:
    return LeaseRow(row[0], Owner(row[1], row[2], row[3]), row[4], row[5], row[6])


# ---------------------------------------------------------------- snapshots
INSERT_SNAPSHOT = (
    "INSERT INTO snapshots (job_id, seq, label, file, size, created, epoch, "
    "digest, origin) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def select_snapshots(extra: str) -> str:
    """The SELECT of snapshot rows; `extra` is "digest, origin", or "NULL, NULL" for a
    read-only opening of a schema-1 catalog (which has no such columns)."""
    return f"SELECT job_id, seq, label, file, size, created, epoch, {extra} FROM snapshots"


def snapshot_row(sealer: Sealer, row: Row) -> SnapshotRow:
    label = sealer.open(row[2], "snapshots", "label", row[0], row[1])
    return SnapshotRow(
        row[0],
        row[1],
        label,
        row[3],
        row[4],
        row[5],
        row[6],
        row[7],
        json.loads(row[8]) if row[8] else None,
    )


def sealed_label(sealer: Sealer, row: SnapshotRow) -> str | bytes | None:
    return sealer.seal(row.label, "snapshots", "label", row.job_id, row.seq)


def snapshot_values(sealer: Sealer, row: SnapshotRow) -> tuple[object, ...]:
    return (
        row.job_id,
        row.seq,
        sealed_label(sealer, row),
        row.file,
        row.size,
        row.created,
        row.epoch,
        row.digest,
        json.dumps(row.origin, sort_keys=True) if row.origin else None,
    )


# ---------------------------------------------------------------- effects
EFFECT_FIELDS = tuple(f.name for f in dataclasses.fields(EffectRow))
EFFECT_COLUMNS = ", ".join((*EFFECT_FIELDS, "mac"))
EFFECT_PLACES = "(" + ", ".join("?" * (len(EFFECT_FIELDS) + 1)) + ")"
SEALED_EFFECT_COLUMNS = ("args_repr", "result", "external_id", "note")


def effect_row(sealer: Sealer, path: str, row: Row) -> EffectRow:
    """The ledger row, its signature checked; StoreDamaged (naming the catalog at
    `path` and the row) for a row that does not verify, or a state or kind snapstate
    never writes."""
    columns: dict[str, Any] = dict(zip(EFFECT_FIELDS, row[:-1], strict=True))
    job_id, ordinal = columns["job_id"], columns["ordinal"]
    for column in SEALED_EFFECT_COLUMNS:
        columns[column] = sealer.open(columns[column], "effects", column, job_id, ordinal)
    _checked(
        sealer,
        row[-1],
        f"effects (job {job_id}, ordinal {ordinal})",
        path,
        "effects",
        *columns.values(),
    )
    columns["args_digest"] = sealer.stored_digest(
        columns["args_digest"], "effects", "args_digest", job_id, ordinal
    )
    try:
        return EffectRow.from_columns(columns)
    except ValueError:  # a state or kind snapstate never writes
        raise StoreDamaged(
            f"the catalog {path} is damaged or was written by a newer snapstate: "
            f"effect {ordinal} of job {job_id} has state {columns['state']!r} and kind "
            f"{columns['kind']!r}; nothing was changed."
        ) from None


def effect_values(sealer: Sealer, row: EffectRow) -> tuple[object, ...]:
    """The row's columns as stored (sealed), its signature last: over every field as
    the reader opens them (the args digest as stored, keyed in an encrypted store)."""
    columns: dict[str, Any] = row.columns()
    columns["args_digest"] = str(sealer.digest(row.args_digest))
    mac = sealer.row_mac("effects", *columns.values())
    for column in SEALED_EFFECT_COLUMNS:
        columns[column] = sealer.seal(columns[column], "effects", column, row.job_id, row.ordinal)
    return (*columns.values(), mac)


# ---------------------------------------------------------------- waits
WAIT_COLUMNS = "job_id, kind, reason, due, since, seq, approval_id, mac"


def wait_row(sealer: Sealer, r: Row, *, path: str | None = None, lenient: bool = False) -> WaitRow:
    """The wait row, its signature checked (kind, reason, due, since, seq, approval,
    bound to the job); `lenient` as job_row's."""
    try:
        reason = sealer.open(r[2], "waits", "reason", r[0])
        _checked(sealer, r[7], f"waits (job {r[0]})", path, "waits", r[0], r[1], reason, *r[3:7])
        return WaitRow(r[0], r[1], reason, r[3], r[4], r[5], r[6])
    except StoreDamaged as exc:
        if not lenient:
            raise
        return WaitRow(r[0], r[1], "", r[3], r[4], r[5], r[6], str(exc))


def wait_values(sealer: Sealer, w: WaitRow) -> tuple[object, ...]:
    """The row's columns as stored, its signature last."""
    mac = sealer.row_mac("waits", w.job_id, w.kind, w.reason, w.due, w.since, w.seq, w.approval_id)
    reason = sealer.seal(w.reason, "waits", "reason", w.job_id)
    return (w.job_id, w.kind, reason, w.due, w.since, w.seq, w.approval_id, mac)


# ---------------------------------------------------------------- approvals
APPROVAL_COLUMNS = (
    "job_id, approval_id, name, scope, digest, requested, expires, approvers, state, "
    "decided_by, decided_at, note, site, mac"
)
APPROVAL_PLACES = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_DECISION_COLUMNS = ("decided_by", "note")  # sealed with the approval's state
_APPROVAL = tuple(c.strip() for c in APPROVAL_COLUMNS.split(","))[:-1]  # without mac
_SEALED_APPROVAL = frozenset({"name", "scope", "digest", "approvers", "decided_by", "note", "site"})


def approval_row(
    sealer: Sealer, r: Row, *, path: str | None = None, lenient: bool = False
) -> ApprovalRow:
    """The approval row, its signature checked (the request, the decision and who made
    it, bound to the job and the approval id); `lenient` as job_row's (the row as it
    reads, when it still opens, marked `damaged`)."""
    try:
        return _approval_row(sealer, r, path)
    except (StoreDamaged, ValueError, TypeError) as exc:
        if not lenient:
            if isinstance(exc, StoreDamaged):
                raise
            where = f"approvals (job {r[0]}, approval {r[1]})"
            raise refusal(where, f"it is malformed ({exc})", path) from None
        try:
            read = _approval_row(sealer, r, path, checked=False)
        except (StoreDamaged, ValueError, TypeError):
            read = ApprovalRow(r[0], r[1], "", "", "", r[5], r[6], None, str(r[8]))
        return dataclasses.replace(read, damaged=str(exc))


def _approval_row(sealer: Sealer, r: Row, path: str | None, checked: bool = True) -> ApprovalRow:
    def opened(i: int, column: str) -> Any:
        # who decided and their note are bound to the decision (state): a rejection
        # flipped to granted by hand no longer opens
        state = (r[8],) if column in _DECISION_COLUMNS else ()
        return sealer.open(r[i], "approvals", column, r[0], r[1], *state)

    values = [opened(i, c) if c in _SEALED_APPROVAL else r[i] for i, c in enumerate(_APPROVAL)]
    if checked:
        where = f"approvals (job {r[0]}, approval {r[1]})"
        _checked(sealer, r[13], where, path, "approvals", *values)
    approvers = values[7]
    return ApprovalRow(
        job_id=r[0],
        approval_id=r[1],
        name=values[2],
        scope=values[3],
        digest=values[4],
        requested=r[5],
        expires=r[6],
        approvers=None if approvers is None else json.loads(approvers),
        state=r[8],
        decided_by=values[9],
        decided_at=r[10],
        note=values[11],
        site=values[12],
    )


def approval_values(sealer: Sealer, a: ApprovalRow) -> tuple[object, ...]:
    def sealed(value: str | None, column: str) -> object:
        state = (a.state,) if column in _DECISION_COLUMNS else ()
        return sealer.seal(value, "approvals", column, a.job_id, a.approval_id, *state)

    approvers = None if a.approvers is None else json.dumps(a.approvers)
    mac = sealer.row_mac(
        "approvals",
        a.job_id,
        a.approval_id,
        a.name,
        a.scope,
        a.digest,
        a.requested,
        a.expires,
        approvers,
        a.state,
        a.decided_by,
        a.decided_at,
        a.note,
        a.site,
    )
    return (
        a.job_id,
        a.approval_id,
        sealed(a.name, "name"),
        sealed(a.scope, "scope"),
        sealed(a.digest, "digest"),
        a.requested,
        a.expires,
        sealed(approvers, "approvers"),
        a.state,
        sealed(a.decided_by, "decided_by"),
        a.decided_at,
        sealed(a.note, "note"),
        sealed(a.site, "site"),
        mac,
    )
