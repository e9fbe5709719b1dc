"""The SQLite catalog's rows: column lists and the conversions between a table row
and the row dataclasses (serializers/_store.py). What the agent produced is sealed on
write and opened on read with the catalog's Sealer (serializers/_sealing.py); each
sealed value is bound to its table, column and row, so it opens nowhere else."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from ..._errors import StoreDamaged
from .._sealing import Sealer
from .._store import ApprovalRow, EffectRow, JobRow, LeaseRow, Owner, SnapshotRow, WaitRow

Row = tuple[Any, ...]  # a row as the driver returns it (values by the column's type)


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
JOB_COLUMNS = "job_id, entry, argv, status, created, updated, resume_count, parent, fork_seq, error"


def job_row(sealer: Sealer, row: Row) -> JobRow:
    argv = sealer.open(row[2], "jobs", "argv", row[0])
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
EFFECT_COLUMNS = ", ".join(EFFECT_FIELDS)
EFFECT_PLACES = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
SEALED_EFFECT_COLUMNS = ("args_repr", "result", "external_id", "note")


def effect_row(sealer: Sealer, path: str, row: Row) -> EffectRow:
    """The ledger row; StoreDamaged (naming the catalog at `path`) for a state or kind
    snapstate never writes."""
    columns: dict[str, Any] = dict(zip(EFFECT_FIELDS, row, strict=True))
    job_id, ordinal = columns["job_id"], columns["ordinal"]
    for column in SEALED_EFFECT_COLUMNS:
        columns[column] = sealer.open(columns[column], "effects", column, job_id, ordinal)
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
    columns: dict[str, Any] = row.columns()
    for column in SEALED_EFFECT_COLUMNS:
        columns[column] = sealer.seal(columns[column], "effects", column, row.job_id, row.ordinal)
    columns["args_digest"] = sealer.digest(row.args_digest)
    return tuple(columns.values())


# ---------------------------------------------------------------- waits
WAIT_COLUMNS = "job_id, kind, reason, due, since, seq, approval_id"


def wait_row(sealer: Sealer, r: Row) -> WaitRow:
    return WaitRow(r[0], r[1], sealer.open(r[2], "waits", "reason", r[0]), r[3], r[4], r[5], r[6])


# ---------------------------------------------------------------- approvals
APPROVAL_COLUMNS = (
    "job_id, approval_id, name, scope, digest, requested, expires, approvers, state, "
    "decided_by, decided_at, note, site"
)
APPROVAL_PLACES = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_DECISION_COLUMNS = ("decided_by", "note")  # sealed with the approval's state


def approval_row(sealer: Sealer, r: Row) -> ApprovalRow:
    def opened(i: int, column: str) -> Any:
        # who decided and their note are bound to the decision (state): a rejection
        # flipped to granted by hand no longer opens
        state = (r[8],) if column in _DECISION_COLUMNS else ()
        return sealer.open(r[i], "approvals", column, r[0], r[1], *state)

    approvers = opened(7, "approvers")
    return ApprovalRow(
        job_id=r[0],
        approval_id=r[1],
        name=opened(2, "name"),
        scope=opened(3, "scope"),
        digest=opened(4, "digest"),
        requested=r[5],
        expires=r[6],
        approvers=None if approvers is None else json.loads(approvers),
        state=r[8],
        decided_by=opened(9, "decided_by"),
        decided_at=r[10],
        note=opened(11, "note"),
        site=opened(12, "site"),
    )


def approval_values(sealer: Sealer, a: ApprovalRow) -> tuple[object, ...]:
    def sealed(value: str | None, column: str) -> object:
        state = (a.state,) if column in _DECISION_COLUMNS else ()
        return sealer.seal(value, "approvals", column, a.job_id, a.approval_id, *state)

    return (
        a.job_id,
        a.approval_id,
        sealed(a.name, "name"),
        sealed(a.scope, "scope"),
        sealed(a.digest, "digest"),
        a.requested,
        a.expires,
        sealed(None if a.approvers is None else json.dumps(a.approvers), "approvers"),
        a.state,
        sealed(a.decided_by, "decided_by"),
        a.decided_at,
        sealed(a.note, "note"),
        sealed(a.site, "site"),
    )
