"""Store operations around jobs: fork, import (`resume FILE`), prune, reconcile, stats,
set-entry.

Each is a function of the runtime (the CLI only parses, calls and prints) and each
changes the catalog in one store transaction with its checks inside it (a check made in
one transaction and acted on in another could be overtaken by a runner starting in
between). Files go first: a fork or an import copies its files into the store before
the rows naming them are committed, and prune deletes files only after the rows are
gone, so a crash in between leaves only files no row names (orphans), which prune
sweeps. Every id is validated and every path confined to the store (serializers/_home.py).
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass, field
from typing import Any

from .._errors import (
    HeaderMismatch,
    InvalidJobId,
    JobExists,
    JobNotFound,
    LeaseHeld,
    StoreDamaged,
    StoreError,
)
from ..serializers._fs import write_atomic
from ..serializers._home import Home, _read_chunks, open_store
from ..serializers._ids import derive_job_id, validate_job_id
from ..serializers._location import is_postgres_url, redact
from ..serializers._sqlite import sqlite_schema_version
from ..serializers._store import CHUNKED, EffectKind, EffectRow, EffectState, SnapshotRow
from . import _agent
from ._job import Job
from ._ledger import seal

__all__ = [
    "fork",
    "import_file",
    "prune",
    "PruneReport",
    "reconcile",
    "stats",
    "check_export_target",
    "export",
    "ORPHAN_GRACE_S",
    "set_entry",
]

# A file no catalog row names is swept only once it is this old: younger, it may be a
# snapshot being written or a fork being copied whose row is about to be committed.
ORPHAN_GRACE_S = 15 * 60.0


def _exists(home: Home, job_id: str) -> bool:
    try:
        home.catalog.get_job(job_id)
        return True
    except JobNotFound:
        return False


# ---------------------------------------------------------------------------- entry
def set_entry(home: Home, job_id: str, entry: _agent.EntryPoint) -> _agent.EntryPoint:
    """Record `entry` as the job's entry point (the agent's file moved): the one
    explicit way a job's entry point changes; the catalog row is signed again with the
    store's key. Nothing of the agent is imported here: `snaprun resume` loads it.
    Returns the entry point it replaces. LeaseHeld while the job runs; StoreDamaged
    for a row that does not verify (restore it: it is never re-signed)."""
    validate_job_id(job_id)
    try:  # the job's settings stay (record_http): only where its code is changes
        current = _agent.EntryPoint.from_dict(home.catalog.get_job(job_id).entry)
        entry = dataclasses.replace(entry, record_http=current.record_http)
    except ValueError:
        pass  # a damaged entry: the catalog's own check below names it
    old = home.catalog.set_entry(job_id, entry.as_dict())
    return _agent.EntryPoint.from_dict(old.entry)


# ---------------------------------------------------------------------------- fork
def fork(home: Home, job_id: str, seq: int, new_id: str | None = None) -> str:
    """Start job `new_id` (default: generated) from snapshot `seq` of `job_id`; the
    original is untouched. Returns the new id."""
    validate_job_id(job_id)
    if new_id is not None:
        validate_job_id(new_id, what="the new job id (--as)")
    home.catalog.get_job(job_id)
    point = home.catalog.snapshot(job_id, seq)
    header = home.row_header(point)  # the fork point is the row's own snapshot
    inherited = header.get("effects", 0)
    if not isinstance(inherited, int) or isinstance(inherited, bool) or inherited < 0:
        raise HeaderMismatch(
            f"snapshot {seq} of job {job_id} has no valid effect count in "
            "its header; refusing to fork it"
        )
    new_id = new_id or derive_job_id(f"{job_id}-fork", os.urandom(3).hex())
    if _exists(home, new_id):  # never copy over another job's files
        raise JobExists(
            f"a job named {new_id!r} already exists in {home.directory}; choose "
            "another id with --as"
        )
    sources = [row for row in home.catalog.snapshots(job_id) if row.seq <= seq]
    for row in sources:
        home.verify_row(row)  # no half-made fork of a swapped file or a damaged chunk
    # Each copy is checked against its row first (a swapped file is never laundered)
    # and recorded with what its header says, its digest bound.
    copies = {row.seq: home.copy_row(row, new_id) for row in sources}
    home.catalog.fork_job(job_id, seq, new_id, copies, inherited)
    return new_id


# ---------------------------------------------------------------------------- export
def check_export_target(home: Home, output: str) -> None:
    """An exported file is new and lies outside the store: `export -o` never replaces
    a file (the catalog, another snapshot, the user's data)."""
    target = os.path.realpath(output)
    store = os.path.realpath(home.directory) if home.keeps_files else None
    if store is not None and (target == store or target.startswith(store + os.sep)):
        raise StoreError(
            f"{output} lies inside the store {home.directory}; export to a file outside it"
        )
    if os.path.lexists(output):
        raise StoreError(
            f"{output} already exists; it was not overwritten. Choose a new file "
            "name (or remove that file first)"
        )


def export(home: Home, source: str, output: str, row: SnapshotRow | None = None) -> None:
    """Write the snapshot file `source` (verified by the caller), or the store's
    snapshot `row` (a chunked one as one self-contained file), to `output`, a new file
    outside the store (check_export_target), durably, through the store's file
    system."""
    check_export_target(home, output)
    if row is not None:
        home.export_row(row, output)
    else:
        write_atomic(output, _read_chunks(source), home.fs)


# ---------------------------------------------------------------------------- import
def import_file(home: Home, path: str, as_id: str | None = None) -> tuple[Job, int]:
    """The job and snapshot that `resume FILE` continues: the store's own file of a
    job resumes that job (from that snapshot); any other file is copied into the store
    as a new job (its own id, or `as_id`). The store keeps its own verified copy: the
    user's file can change afterwards without changing the store."""
    if as_id is not None:
        validate_job_id(as_id, what="the new job id (--as)")
    header = home.verify(path)
    # A validly signed file may still carry a hostile id: it would name a folder.
    validate_job_id(header["job_id"], what=f"the job id in the header of {path}")
    source_id, seq = header["job_id"], header["seq"]
    if as_id is None and _exists(home, source_id):
        for row in home.catalog.snapshots(source_id):
            if row.file == CHUNKED:
                continue
            own = home.row_path(row)
            if os.path.exists(own) and os.path.samefile(own, path):
                return Job.open(home, source_id), row.seq
    job_id = as_id or source_id
    if _exists(home, job_id):
        raise JobExists(
            f"this store already has a job {job_id!r}; import the file under "
            "another id with --as NEW_ID"
        )
    try:
        entry = _agent.EntryPoint.from_dict(header["entry"])
        argv = [str(a) for a in header["argv"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise HeaderMismatch(
            f"{path} is signed but its header names no entry point ({exc}); refusing it"
        ) from None
    header, row, body = home.import_file(path, job_id)  # a copy; the row binds its digest
    # What is committed is the store's copy, checked again against that digest: the
    # user's file may have changed between the first check and the copy. (Chunks are
    # cut from the very bytes that were verified: nothing to check again.)
    if body is not None:
        if (header["job_id"], header["seq"]) != (source_id, seq):
            raise HeaderMismatch(f"{path} changed while it was imported; nothing was imported")
        home.catalog.import_job(
            job_id,
            entry.as_dict(),
            argv,
            row,
            parent=source_id,
            source=os.path.abspath(path),
            body=body,
        )
        return Job(home, job_id, entry, argv), seq
    try:
        copied, _ = home.verify_row(row)
    except HeaderMismatch:
        home.delete_file(row.file, job_id)
        raise HeaderMismatch(
            f"{path} changed while it was imported; nothing was imported"
        ) from None
    if (copied["job_id"], copied["seq"]) != (source_id, seq):
        home.delete_file(row.file, job_id)
        raise HeaderMismatch(f"{path} changed while it was imported; nothing was imported")
    home.catalog.import_job(
        job_id, entry.as_dict(), argv, row, parent=source_id, source=os.path.abspath(path)
    )
    return Job(home, job_id, entry, argv), seq


# ---------------------------------------------------------------------------- prune
@dataclass
class PruneReport:
    snapshots: int = 0  # snapshot files dropped
    jobs: list[str] = field(default_factory=list)  # finished jobs dropped
    orphans: int = 0  # files no row named
    temp_files: int = 0  # dead writers' temp files
    chunks: int = 0  # chunks no retained snapshot lists
    packs: int = 0  # pack files no chunk lives in any more
    running: list[str] = field(default_factory=list)  # skipped: a live runner
    damaged: list[str] = field(default_factory=list)  # refused: hostile rows


def prune(
    home: Home,
    *,
    keep_last: int | None = None,
    older_than: float | None = None,
    finished: bool = False,
    orphan_grace: float = ORPHAN_GRACE_S,
) -> PruneReport:
    """Drop old snapshots (beyond `keep_last`, created before the timestamp
    `older_than`; a job's latest always stays) and, with `finished`, done and failed
    jobs; sweep orphan and temp files. A job held by a live runner is skipped; a job
    whose catalog rows name a path outside its folder is refused and left untouched
    (report.damaged)."""
    report = PruneReport()
    now = time.time()
    catalogued = set()
    for job in home.catalog.list_jobs():
        catalogued.add(job.job_id)
        try:
            validate_job_id(job.job_id)
            if home.keeps_files:
                home.job_directory(job.job_id)
            for row in home.catalog.snapshots(job.job_id):
                if row.file != CHUNKED:
                    home.row_path(row)
        except (InvalidJobId, StoreDamaged) as exc:
            report.damaged.append(f"job {job.job_id!r} was not pruned: {exc}")
            continue
        try:
            dropped_job, rows = home.catalog.prune_job(
                job.job_id, finished=finished, keep_last=keep_last, older_than=older_than
            )
        except LeaseHeld:
            report.running.append(job.job_id)
            continue
        if dropped_job:
            home.delete_job_files(job.job_id)
            report.jobs.append(job.job_id)
            continue
        for row in rows:
            home.delete_file(row.file, row.job_id)
            report.snapshots += 1
        lease = home.catalog.get_lease(job.job_id)
        if lease is None or not lease.is_live(now):
            report.orphans += _sweep(
                home, job.job_id, home.orphan_files(job.job_id), now - orphan_grace
            )
    if home.keeps_files:
        report.orphans += _sweep_uncatalogued(home, catalogued, now - orphan_grace)
    report.chunks, report.packs = home.sweep_chunks()
    report.temp_files = home.sweep_temp_files()
    return report


def _sweep(home: Home, job_id: str, files: list[str], before: float) -> int:
    removed = 0
    for file in files:
        try:
            if os.stat(home.absolute(file, job_id)).st_mtime < before:
                home.delete_file(file, job_id)
                removed += 1
        except FileNotFoundError:
            pass
    return removed


def _sweep_uncatalogued(home: Home, catalogued: set[str], before: float) -> int:
    """The copies of a fork or an import that crashed before its rows were committed:
    a folder of a job the catalog does not know, holding only copies (epoch 0; a
    runner's files have epoch >= 1), all older than the grace period."""
    root = os.path.join(home.directory, "snapshots")
    removed = 0
    for name in sorted(os.listdir(root)):
        folder = os.path.join(root, name)
        if (
            name in catalogued
            or not os.path.isdir(folder)
            or os.path.islink(folder)
            or _exists_quietly(home, name)
        ):
            continue
        names = os.listdir(folder)
        files = [os.path.join(folder, n) for n in names]
        if not names or not all(
            n.endswith("-e0.snap")
            and os.path.isfile(f)
            and not os.path.islink(f)
            and os.stat(f).st_mtime < before
            for n, f in zip(names, files)
        ):
            continue
        for file in files:
            home.delete_file(home.relative(file), name)
            removed += 1
        try:
            home.fs.remove_dir(folder)
        except OSError:
            pass
    return removed


def _exists_quietly(home: Home, name: str) -> bool:
    try:
        validate_job_id(name)
    except InvalidJobId:
        return True  # not a job folder we made: leave it alone
    return _exists(home, name)


# ---------------------------------------------------------------------------- reconcile
def reconcile(
    home: Home,
    job_id: str,
    ordinal: int,
    *,
    committed: bool,
    result: object = None,
    by: str | None = None,
) -> EffectRow:
    """Say what happened to an effect whose outcome is unknown, so the job can resume:
    refused while a live runner holds the job, with the ledger unchanged. `by` names who
    decided (the dashboard's configured user), recorded in the row's note."""
    validate_job_id(job_id)
    note = ("reconciled: committed" if committed else "reconciled: not committed") + (
        f" by {by}" if by is not None else " by hand"
    )
    return home.catalog.reconcile_effect(
        job_id,
        ordinal,
        state=EffectState.CONFIRMED if committed else EffectState.NOT_COMMITTED,
        result=seal(home.keys, result) if committed else None,
        note=note,
    )


# ---------------------------------------------------------------------------- stats
def stats(home: Home, job_id: str | None = None) -> list[dict[str, Any]]:
    """Durability metrics per job (or of one job): resumes, snapshot age, effects,
    effects served from the ledger, reconciled and ambiguous actions, restart-to-
    progress time, recorded HTTP requests (and their model tokens) served from the
    ledger after a restore. Reads only. Over every job, a job whose catalog rows are refused
    (their signatures do not verify) is listed with status "damaged" and its effects
    uncounted; asked for by name, it is refused (StoreDamaged)."""
    if job_id is not None:
        validate_job_id(job_id)
    jobs = [home.catalog.get_job(job_id)] if job_id else home.catalog.list_jobs()
    now = time.time()
    rows = []
    for job in jobs:
        metrics = home.catalog.metrics(job.job_id)
        latest = home.catalog.latest(job.job_id)
        status = home.catalog.effective_status(job, now)
        try:
            ledger = home.catalog.effects(job.job_id)
        except StoreDamaged:
            if job_id is not None:
                raise
            ledger, status = [], "damaged"
        if job.damaged is not None:
            status = "damaged"
        rows.append(
            {
                "job": job.job_id,
                "status": status,
                "resumes": job.resume_count,
                "snapshot_age_s": None if latest is None else round(now - latest.created, 3),
                "effects": sum(1 for e in ledger if e.kind != EffectKind.VALUE),
                "served_from_ledger": int(metrics.get("served_from_ledger", 0)),
                "reconciled": int(metrics.get("reconciled", 0)),
                "ambiguous": sum(1 for e in ledger if e.state == EffectState.AMBIGUOUS),
                "ambiguous_total": int(metrics.get("ambiguous", 0)),
                "restart_to_progress_s": metrics.get("restart_to_progress_s"),
                # record_http: requests answered from the ledger after a restore, and
                # the model tokens (in/out) their answers had: what the ledger saved
                "http_saved_calls": int(metrics.get("http_saved_calls", 0)),
                "http_saved_input_tokens": int(metrics.get("http_saved_input_tokens", 0)),
                "http_saved_output_tokens": int(metrics.get("http_saved_output_tokens", 0)),
            }
        )
    return rows


# ---------------------------------------------------------------------------- db upgrade
@dataclass
class SchemaReport:
    backend: str  # "sqlite" or "postgresql"
    where: str  # the store (a URL without its password)
    before: int  # the schema version found (0: none yet)
    after: int  # the schema version now


def upgrade_schema(location: str) -> SchemaReport:
    """Create or upgrade the catalog's tables of the store at `location` (a directory
    or a postgresql:// URL) to this release's schema; a newer schema is refused."""
    if is_postgres_url(location):
        from ..serializers._postgres import PostgresCatalog

        catalog = PostgresCatalog(location, create=True, writable=True, upgrade=True)
        try:
            return SchemaReport(
                "postgresql", redact(location), catalog.found_version, catalog.version()
            )
        finally:
            catalog.close()
    before = sqlite_schema_version(location)
    home = open_store(location, create=True)
    try:
        after = int(getattr(home.catalog, "schema_version", 0))
    finally:
        home.close()
    return SchemaReport("sqlite", location, before, after)
