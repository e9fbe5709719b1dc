"""`snaprun repair`: rebuild a store's lost or damaged catalog from its signed snapshot
files, and `snaprun repair --accept JOB`.

The damaged catalog (with its -wal and -shm) is moved aside into
`<store>/catalog.damaged-<time>/`, never deleted. Every file under snapshots/ is
verified with the store's keys; a file that does not verify, or whose header does not
match its place (job folder, seq and epoch in its name), is reported and left alone.
Per job, the files of its latest branch (lease epochs never decrease along a job's
snapshots, so a file of a dropped branch is told apart) become its snapshot rows,
bound to their digests, and the job's lease epoch is set above every epoch seen.

The effect ledger, the timeline and the approvals lived only in the catalog. What the
job sent after its latest snapshot cannot be known, so every rebuilt job is parked and
marked: `resume` (and the Python API) refuses it with exit 4 until the user checked
the providers and ran `snaprun repair --accept JOB`.

The new catalog is built in a scratch folder and renamed into place, so a repair cut
short leaves either the damaged catalog or no catalog (run repair again), never a
partial one.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .._errors import JobParked, SnapstateError, StoreDamaged, StoreError
from ..serializers import _binding, _fs, _identity, _sealing, _snapfile
from ..serializers._catalog import Catalog
from ..serializers._home import Home, _job_header
from ..serializers._ids import is_valid_job_id
from ..serializers._keys import KeyRing
from ..serializers._sqlite import SqliteCatalog
from ..serializers._store import JobRow, SnapshotRow

__all__ = ["MARK", "RebuiltJob", "RepairReport", "repair", "accept", "check_accepted"]

MARK = "repair_unaccepted"  # metric set on a rebuilt job until --accept
_SNAP_NAME = re.compile(r"(\d+)-e(\d+)\.snap")
_SCRATCH = "repair.tmp-"


@dataclass
class RebuiltJob:
    job_id: str
    seqs: list[int]
    epoch: int
    parent: str | None = None
    left_alone: list[str] = field(default_factory=list)  # files not on its latest branch


@dataclass
class RepairReport:
    directory: str
    healthy: bool = False  # nothing needed rebuilding
    moved_aside: str | None = None  # the folder holding the damaged catalog
    identity_restored: bool = False  # store.json was missing and was written
    jobs: list[RebuiltJob] = field(default_factory=list)
    unverifiable: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)


def parked_message(job_id: str, latest: int, when: float) -> str:
    return (
        f"job {job_id} was rebuilt by `snaprun repair` from its snapshot files on "
        f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(when))}: its effect ledger "
        f"was lost with the catalog, so what it sent after snapshot {latest} (and whether "
        "it had already finished) is unknown, and resuming could send those effects "
        "again. Check with the providers what it already did, then `snaprun repair "
        f"--accept {job_id}` and `snaprun resume {job_id}` (or start over from a snapshot "
        f"with `snaprun fork {job_id}@{latest}`)."
    )


def check_accepted(catalog: Catalog, job_id: str) -> None:
    """JobParked (exit 4) for a job rebuilt by repair that the user has not accepted."""
    if catalog.metrics(job_id).get(MARK):
        latest = catalog.latest(job_id)
        raise JobParked(
            parked_message(job_id, latest.seq if latest else 0, catalog.metrics(job_id)[MARK])
        )


def accept(home: Home, job_id: str) -> None:
    """The user checked the providers: the rebuilt job may resume."""
    job = home.catalog.get_job(job_id)
    if not home.catalog.metrics(job_id).get(MARK):
        raise StoreError(
            f"job {job_id} was not rebuilt by `snaprun repair` (or was already "
            "accepted); nothing to accept"
        )
    if job.status == "parked":
        home.catalog.set_status(job_id, "interrupted", error=None)
    home.catalog.set_metric(job_id, MARK, 0)
    home.catalog.log_event(
        job_id,
        "accepted",
        "rebuilt job accepted after repair: it may "
        "resume; effects after its latest snapshot may be sent again",
    )


# ------------------------------------------------------------------------ repair
def _catalog_healthy(directory: str) -> bool:
    if _identity.catalog_problem(directory):
        return False
    try:
        catalog = SqliteCatalog(directory, create=False, writable=False)
    except StoreDamaged:
        return False
    try:
        return bool(catalog._db().execute("PRAGMA quick_check").fetchone()[0] == "ok")
    except Exception:
        return False
    finally:
        catalog.close()


def _load_config_encrypt(directory: str) -> bool:
    import json

    try:
        with open(os.path.join(directory, "config.json")) as f:
            return bool(json.load(f).get("encrypt"))
    except FileNotFoundError:
        return False


# {job: {seq: [(file epoch, path, header, digest), ...]}}
_Found = dict[str, dict[int, list[tuple[int, str, dict[str, Any], str]]]]


def _scan(directory: str, keys: KeyRing, encrypt: bool, report: RepairReport) -> _Found:
    """{job: {seq: [(file epoch, path, header, digest), ...]}} of the files that verify
    and sit where their header says."""
    found: _Found = {}
    root = os.path.join(directory, "snapshots")
    for job in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        folder = os.path.join(root, job)
        if not os.path.isdir(folder) or os.path.islink(folder):
            continue
        if not is_valid_job_id(job):
            report.unverifiable.append((folder, "not a valid job id; left alone"))
            continue
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            match = _SNAP_NAME.fullmatch(name)
            if match is None:
                if name.endswith(".snap"):
                    report.unverifiable.append((path, "not named SEQ-eEPOCH.snap"))
                continue
            seq, epoch = int(match.group(1)), int(match.group(2))
            try:
                header, digest = _snapfile.verify_digest(path, keys, require_encryption=encrypt)
                header = _job_header(path, _sealing.open_header(header, keys, path))
            except SnapstateError as exc:
                report.unverifiable.append((path, str(exc)))
                continue
            if header["seq"] != seq:
                report.unverifiable.append((path, f"its header holds snapshot {header['seq']}"))
                continue
            if header["job_id"] == job and header.get("epoch") != epoch:
                report.unverifiable.append(
                    (path, f"its header says epoch {header.get('epoch')!r}, its name {epoch}")
                )
                continue
            found.setdefault(job, {}).setdefault(seq, []).append((epoch, path, header, digest))
    return found


def _store_id(directory: str, found: _Found) -> tuple[str | None, bool]:
    """(store id, restored?): store.json's, or, when it is lost, the one the store's own
    files name (their header's job is their folder's)."""
    identity = _identity.load(directory)
    if identity is not None:
        return identity.store_id, False
    seen = Counter(
        h.get("store_id")
        for job, seqs in found.items()
        for files in seqs.values()
        for _, _, h, _ in files
        if h["job_id"] == job and h.get("store_id")
    )
    return (seen.most_common(1)[0][0] if seen else None), True


def _branch(
    job: str,
    seqs: dict[int, list[tuple[int, str, dict[str, Any], str]]],
    store_id: str | None,
    now: float,
) -> tuple[RebuiltJob, JobRow, list[SnapshotRow]]:
    """The job's latest branch: per seq its newest file, up to the first seq whose
    epoch is lower than an earlier one's (epochs never go down along a job's
    snapshots: from there on, the files are a dropped branch's leftovers)."""
    rebuilt = RebuiltJob(job, [], 0)
    rows: list[SnapshotRow] = []
    top, stopped = -1, False
    last_header: dict[str, Any] | None = None
    for seq in sorted(seqs):
        files = sorted(seqs[seq], key=lambda f: f[0])
        epoch, path, header, digest = files[-1]
        rebuilt.left_alone += [f[1] for f in files[:-1]]
        if stopped or epoch < top:
            stopped = True
            rebuilt.left_alone.append(path)
            continue
        top, last_header = epoch, header
        origin = _binding.origin_of(header, store_id, job, epoch)
        rows.append(
            SnapshotRow(
                job,
                seq,
                header.get("label"),
                os.path.join("snapshots", job, os.path.basename(path)),
                os.path.getsize(path),
                header["created_at"],
                epoch,
                digest,
                origin,
            )
        )
        rebuilt.seqs.append(seq)
        own = header.get("epoch") if header["job_id"] == job else 0
        rebuilt.epoch = max(rebuilt.epoch, epoch, own if isinstance(own, int) else 0)
    rebuilt.epoch = max([rebuilt.epoch] + [f[0] for files in seqs.values() for f in files])
    copied = [r for r in rows if r.origin and r.origin.get("job") != job]
    rebuilt.parent = (copied[-1].origin or {}).get("job") if copied else None  # origin is set
    assert last_header is not None  # the first seq's newest file is always on the branch
    latest = rows[-1].seq
    job_row = JobRow(
        job,
        last_header["entry"],
        list(last_header.get("argv") or []),
        "parked",
        min(r.created for r in rows),
        now,
        0,
        rebuilt.parent,
        copied[-1].seq if copied else None,
        parked_message(job, latest, now),
    )
    return rebuilt, job_row, rows


def repair(directory: str, fs: _fs.FileSystem = _fs.OS) -> RepairReport:
    """Rebuild the catalog of the store at `directory` from its snapshot files (see the
    module docstring). A healthy catalog is left as it is (only a lost store.json is
    written again). Files are moved and deleted through `fs`."""
    directory = os.path.abspath(directory)
    report = RepairReport(directory)
    if not os.path.isdir(directory) or not _identity.is_store(directory):
        raise StoreError(f"no store at {directory}: nothing to repair")
    keys_path = os.path.join(directory, _identity.KEYS_FILE)
    if not os.path.exists(keys_path):
        raise StoreDamaged(
            f"the key file {keys_path} is missing: without the store's keys no "
            "snapshot can be verified, so nothing can be rebuilt. Restore "
            "keys.json from a backup, then run `snaprun repair` again"
        )
    with _identity.store_lock(directory, exclusive=True, create=True):
        for name in os.listdir(directory):  # a repair cut short
            if name.startswith(_SCRATCH):
                _remove_scratch(os.path.join(directory, name), fs)
        keys = KeyRing(directory)
        healthy = _catalog_healthy(directory)
        if healthy and _identity.load(directory) is not None:
            report.healthy = True
            return report
        found = _scan(directory, keys, _load_config_encrypt(directory), report)
        store_id, restored = _store_id(directory, found)
        if restored:
            _identity.create(directory, _identity.key_fingerprints(keys), store_id)
            report.identity_restored = True
        if healthy:
            report.healthy = True
            return report
        now = time.time()
        scratch = os.path.join(directory, f"{_SCRATCH}{os.getpid()}")
        # In an encrypted store the rebuilt rows are sealed like every other row.
        catalog = SqliteCatalog(
            scratch, sealer=_sealing.Sealer(keys, _load_config_encrypt(directory))
        )
        try:
            for job in sorted(found):
                rebuilt, job_row, rows = _branch(job, found[job], store_id, now)
                catalog.rebuild_job(job_row, rebuilt.epoch, rows, {MARK: now})
                report.jobs.append(rebuilt)
            db = catalog._db()
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            db.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
        finally:
            catalog.close()
        report.moved_aside = _move_aside(directory, now, fs)
        fs.rename(
            os.path.join(scratch, _identity.CATALOG_FILE),
            os.path.join(directory, _identity.CATALOG_FILE),
        )
        fs.fsync_dir(directory)
        _remove_scratch(scratch, fs)
    return report


def _remove_scratch(folder: str, fs: _fs.FileSystem) -> None:
    """Delete a scratch folder; what a failure leaves is deleted by the next repair."""
    with contextlib.suppress(OSError):
        fs.remove_tree(folder)


def _move_aside(directory: str, now: float, fs: _fs.FileSystem) -> str | None:
    """Move catalog.db, -wal and -shm into catalog.damaged-<time>/ (never deleted)."""
    names = [
        n
        for n in (
            _identity.CATALOG_FILE,
            _identity.CATALOG_FILE + "-wal",
            _identity.CATALOG_FILE + "-shm",
        )
        if os.path.lexists(os.path.join(directory, n))
    ]
    if not names:
        return None
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now))
    aside = os.path.join(directory, f"catalog.damaged-{stamp}")
    suffix = 1
    while os.path.lexists(aside):
        suffix += 1
        aside = os.path.join(directory, f"catalog.damaged-{stamp}-{suffix}")
    os.mkdir(aside, 0o700)
    for name in names:
        fs.rename(os.path.join(directory, name), os.path.join(aside, name))
    fs.fsync_dir(directory)
    return aside
