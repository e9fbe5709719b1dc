"""Binding a snapshot file to its catalog row.

Every header names the store, job, sequence number and lease epoch it was written
for (Home.write_snapshot sets them), and the catalog records each file's digest (its
HMAC, which names the exact header and body). Before a file is restored or inspected
through its row, everything is compared: another job's validly signed file put at
this job's path, a dropped branch's file (same seq, older epoch) put back, or any
other file is refused, never resumed as this job.

Forks and imports copy files whose header names the original job (and store): their
rows record what that header says (`origin`), and their digest binds the exact file.
Rows of the previous release have no digest: only seq, job (or its parent) and epoch
are checked for them.
"""

from __future__ import annotations

from typing import Any

from .._errors import HeaderMismatch
from ._store import SnapshotRow

__all__ = ["expected", "origin_of", "check"]


def expected(row: SnapshotRow, store_id: str | None) -> dict[str, Any]:
    """What the header of the row's file must say: store, job and epoch."""
    if row.origin:
        return {
            "store": row.origin.get("store"),
            "job": row.origin.get("job"),
            "epoch": row.origin.get("epoch"),
        }
    return {"store": store_id, "job": row.job_id, "epoch": row.epoch}


def origin_of(
    header: dict[str, Any], store_id: str | None, job_id: str, epoch: int
) -> dict[str, Any] | None:
    """The origin to record for a file entering job `job_id` at `epoch`: None when its
    header is the job's own, else what the header says."""
    seen = {
        "store": header.get("store_id"),
        "job": header.get("job_id"),
        "epoch": header.get("epoch"),
    }
    return None if seen == {"store": store_id, "job": job_id, "epoch": epoch} else seen


def check(
    row: SnapshotRow,
    header: dict[str, Any],
    digest: str,
    *,
    store_id: str | None,
    path: str,
    parent: str | None = None,
) -> None:
    """HeaderMismatch saying what differs, if the verified file at `path` (its header,
    its digest) is not the one the row recorded."""
    problems = []
    if header.get("seq") != row.seq:
        problems.append(f"it holds snapshot {header.get('seq')!r}, not {row.seq}")
    if row.digest is None:
        # A row of the previous release: no digest, no store id, copies at epoch 0.
        job = header.get("job_id")
        if job != row.job_id and (parent is None or job != parent):
            problems.append(f"its header names job {job!r}")
        elif job == row.job_id and row.epoch and header.get("epoch") != row.epoch:
            problems.append(
                f"it was written under lease epoch {header.get('epoch')!r}, the "
                f"catalog's row under epoch {row.epoch} (a dropped branch's file)"
            )
    else:
        want = expected(row, store_id)
        if header.get("job_id") != want["job"]:
            problems.append(
                f"its header names job {header.get('job_id')!r}, the catalog "
                f"expects {want['job']!r}"
            )
        if header.get("epoch") != want["epoch"]:
            problems.append(
                f"it was written under lease epoch {header.get('epoch')!r}, the "
                f"catalog's row under epoch {want['epoch']!r} (a dropped or "
                "older branch's file)"
            )
        if header.get("store_id") != want["store"]:
            problems.append(
                f"its header names store {header.get('store_id')!r}, the "
                f"catalog expects {want['store']!r}"
            )
        if digest != row.digest:
            problems.append("its digest differs from the one the catalog recorded (another file)")
    if problems:
        raise HeaderMismatch(
            f"{path} is not the file the catalog recorded as snapshot {row.seq} of job "
            f"{row.job_id}: {'; '.join(problems)}. Refusing it (a swapped or rolled-back "
            "file); restore the original file, or resume from another snapshot "
            f"(`snaprun log {row.job_id}`)."
        )
