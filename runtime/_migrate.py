"""`snaprun migrate-store SRC DST`: copy every job of one store into another (a store
directory, SQLite, or a postgresql:// URL, either way), verifying every signature on the
way; the source is only read.

Per job, in the source's one read transaction (AdminCatalog.read_job_copy): the job row
(entry point, argv, status, error, parent and fork point, resume count, its lease-epoch
counter), every snapshot, the whole effect ledger, approvals with their decisions, the
wait row, the timeline and the metrics, each row verified against its signature by the
source's catalog. Every snapshot is then read with the source's keys (its manifest and
every chunk, or its file, and its binding to the row: serializers/_binding.py) and
written into the destination as the destination writes snapshots: chunks (encrypted when
the destination is), its header unchanged but for its sealed fields (sealed again for an
encrypted destination), its manifest signed with the destination's current key, its row
recording where the header came from (`origin`: the source store, job and epoch), so
the binding holds there. Every recorded effect result is checked against its signature
and copied byte for byte. The destination commits the job and all its rows in one
transaction (AdminCatalog.insert_job_copy), signing and sealing each row with its own
key; its timeline gets one more event, "migrated".

Decisions (docs/design.md, "Moving a store"):
- a job whose lease is live in the source (it is running) is not copied: it is listed as
  running and the command ends with exit 5 (stop it, run the command again); a job whose
  runner died is copied with its lease left behind, so it arrives interrupted (resumable);
- a job or snapshot that fails verification is refused, named, and not copied (exit 2 at
  the end; the other jobs are copied);
- a job already in the destination is skipped when it is identical (same rows, same
  snapshot contents), refused when it differs (exit 2): nothing is overwritten, so a
  second run is a no-op;
- keys: recorded results (and credentials sealed inside snapshots) are signed with the
  source's keys and copied as they are, so the destination must hold every key of the
  source: those it lacks are imported into its key file (reported); a destination whose
  key comes from SNAPSTATE_KEY alone, with no key file, is refused naming the key;
- encryption: the destination's setting decides how it stores what it receives. A
  destination created by this command takes the source's setting; an existing plaintext
  destination refuses an encrypted source unless `decrypt` (--decrypt) is given: nothing
  is silently stored in clear.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .._errors import (
    CorruptSnapshot,
    InvalidJobId,
    JobNotFound,
    SnapshotRejected,
    StoreError,
    UnknownKey,
)
from ..serializers import _binding, _identity, _sealing
from ..serializers._home import Home, open_store
from ..serializers._ids import validate_job_id
from ..serializers._location import is_postgres_url, redact
from ..serializers._store import CHUNKED, JobCopy, SnapshotBody, SnapshotRow
from ._ledger import verify_sealed

__all__ = ["MigrationReport", "migrate_store", "Refusal"]

# Header fields a manifest (or a snapshot file's trailer) adds: not the job's.
_CONTAINER_FIELDS = frozenset(
    {"key_id", "codecs", "size", "chunker", "chunk_size", "nonce_prefix", "sealed"}
)
_PROBLEMS = (SnapshotRejected, CorruptSnapshot, StoreError)


@dataclass(frozen=True)
class Refusal:
    job: str
    reason: str


@dataclass
class MigrationReport:
    source: str  # where from (a URL without its password)
    target: str
    created: bool = False  # the destination store was created by this run
    encrypted: bool = False  # the destination stores encrypted
    copied: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # already there, identical
    running: list[str] = field(default_factory=list)  # live in the source: not copied
    refused: list[Refusal] = field(default_factory=list)  # damaged, or different there
    keys_imported: list[str] = field(default_factory=list)
    snapshots: int = 0  # copied (of the copied jobs)
    effects: int = 0
    approvals: int = 0
    events: int = 0

    @property
    def exit_code(self) -> int:
        """2 when a job was refused, 5 when one was left because it runs, else 0."""
        return 2 if self.refused else 5 if self.running else 0

    def as_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["refused"] = [{"job": r.job, "reason": r.reason} for r in self.refused]
        out["exit_code"] = self.exit_code
        return out


# ---------------------------------------------------------------------------- opening
def _same_place(src: str, dst: str) -> bool:
    if is_postgres_url(src) or is_postgres_url(dst):
        return src == dst
    return os.path.realpath(src) == os.path.realpath(dst)


def _named(location: str) -> str:
    return redact(location) if is_postgres_url(location) else os.path.abspath(location)


def _exists(location: str) -> bool:
    """Whether a store is at `location` (the tables of an empty database are set up, as
    the destination's opening would)."""
    if not is_postgres_url(location):
        return os.path.isdir(location) and _identity.is_store(location)
    from ..serializers._postgres import PostgresCatalog

    catalog = PostgresCatalog(location, create=True, writable=True, upgrade=False)
    try:
        return "store_id" in catalog.meta()
    finally:
        catalog.close()


@contextlib.contextmanager
def _opened(src: str, dst: str) -> Iterator[tuple[Home, Home, bool]]:
    source = open_store(src, create=False, writable=False)
    try:
        created = not _exists(dst)
        target = open_store(dst, create=True)
        try:
            yield source, target, created
        finally:
            target.close()
    finally:
        source.close()


def _share_keys(source: Home, target: Home, report: MigrationReport) -> None:
    """The destination must hold every (unretired) key of the source: recorded results
    and credentials sealed inside snapshots stay signed with them."""
    for key in source.keys.keys():
        if key.retired:
            continue
        try:
            have = target.keys.get(key.key_id)
        except UnknownKey:
            have = None
        if have is not None:
            if have.secret != key.secret:
                raise StoreError(
                    f"the destination {target.directory} has another key with the id "
                    f"{key.key_id!r} than the source {source.directory}; nothing was copied"
                )
            continue
        if not target.keys.path:
            raise StoreError(
                f"the destination {target.directory} takes its key from SNAPSTATE_KEY alone "
                f"and lacks the source's key {key.key_id!r}, which signs the source's recorded "
                "results: give the destination a key file holding it (SNAPSTATE_KEY_FILE, "
                f"or in the source `snaprun keys export {key.key_id} -o key.json`, then "
                "`snaprun keys import key.json` into the destination); nothing was copied"
            )
        with tempfile.TemporaryDirectory(prefix="snapstate-key-") as folder:
            path = os.path.join(folder, "key.json")
            source.keys.export(key.key_id, path)
            target.keys.import_file(path)
        report.keys_imported.append(key.key_id)
    if report.keys_imported:
        target.record_keys()


def _check_encryption(
    source: Home, target: Home, created: bool, decrypt: bool, report: MigrationReport
) -> None:
    if source.encrypt and not target.encrypt:
        if created:
            target.set_encryption(True)
        elif not decrypt:
            raise StoreError(
                f"the source {source.directory} is encrypted and the destination "
                f"{target.directory} is not: its jobs would be stored in clear. Make the "
                "destination encrypted first (`snaprun init --encrypt --store DST`), or "
                "pass --decrypt to store them in clear on purpose; nothing was copied"
            )
    report.encrypted = target.encrypt


# ---------------------------------------------------------------------------- one job
@dataclass(frozen=True)
class _Body:
    header: dict[str, Any]  # the job header, opened, without the container's fields
    payload: bytes
    digest: str  # sha256 of the payload (to compare copies)


def _read_body(home: Home, row: SnapshotRow) -> _Body:
    header, payload = home.read_row(row)  # manifest or file, every chunk, the binding
    clean = {k: v for k, v in header.items() if k not in _CONTAINER_FIELDS}
    data = bytes(payload)
    return _Body(clean, data, hashlib.sha256(data).hexdigest())


def _read_job(home: Home, job_id: str) -> tuple[JobCopy, dict[int, _Body]]:
    """A job's rows and snapshot bodies, every signature verified (raises naming the row
    or snapshot that fails)."""
    copy = home.catalog.read_job_copy(job_id)
    bodies = {row.seq: _read_body(home, row) for row in copy.snapshots}
    for effect in copy.effects:
        if effect.result is not None:
            verify_sealed(
                home.keys, bytes(effect.result), f"effect {effect.ordinal} of job {job_id}"
            )
    return copy, bodies


def _difference(
    mine: tuple[JobCopy, dict[int, _Body]], theirs: tuple[JobCopy, dict[int, _Body]]
) -> str | None:
    """What differs between the source's job and the destination's (None: identical,
    but for events the destination logged after the source's)."""
    (src, src_bodies), (dst, dst_bodies) = mine, theirs
    job_a = dataclasses.replace(src.job, damaged=None)
    job_b = dataclasses.replace(dst.job, damaged=None)
    if job_a != job_b or src.epoch != dst.epoch:
        return "its job row (entry point, argv, status, times or counters)"
    keys_a = [(r.seq, r.label, r.created, r.epoch) for r in src.snapshots]
    keys_b = [(r.seq, r.label, r.created, r.epoch) for r in dst.snapshots]
    if keys_a != keys_b:
        return "its snapshot list"
    for seq, body in src_bodies.items():
        other = dst_bodies[seq]
        if body.digest != other.digest or body.header != other.header:
            return f"the contents of snapshot {seq}"
    if src.effects != dst.effects:
        return "its effect ledger"
    if src.approvals != dst.approvals:
        return "its approvals"
    if src.wait != dst.wait:
        return "its wait row"
    if dict(src.metrics) != dict(dst.metrics):
        return "its metrics"
    # The destination's timeline goes on from the source's (its "migrated" event, and
    # what was logged since without changing the job, a fork of it, say).
    if list(dst.events[: len(src.events)]) != list(src.events):
        return "its timeline"
    return None


def _written(
    target: Home, copy: JobCopy, bodies: dict[int, _Body]
) -> tuple[JobCopy, dict[int, SnapshotBody]]:
    """The job's rows as the destination records them, with each snapshot's new chunks
    and manifest (stored, not yet committed)."""
    job_id = copy.job.job_id
    rows, out = [], {}
    try:
        for row in copy.snapshots:
            body = bodies[row.seq]
            header = body.header
            if target.encrypt:
                header = _sealing.seal_header(header, target.keys)
            prepared = target.chunks.prepare(
                job_id, row.seq, row.epoch, row.label, header, body.payload
            )
            out[row.seq] = prepared.body
            rows.append(
                SnapshotRow(
                    job_id,
                    row.seq,
                    row.label,
                    CHUNKED,
                    prepared.row.size,
                    row.created,
                    row.epoch,
                    prepared.row.digest,
                    _binding.origin_of(body.header, target.store_id, job_id, row.epoch),
                )
            )
    finally:
        target.chunks.forget(job_id)
    return dataclasses.replace(copy, snapshots=tuple(rows), lease=None), out


def _migrate_job(source: Home, target: Home, job_id: str, report: MigrationReport) -> None:
    try:
        validate_job_id(job_id)
    except InvalidJobId as exc:
        report.refused.append(Refusal(job_id, str(exc)))
        return
    try:
        lease = source.catalog.get_lease(job_id)
        if lease is not None and lease.is_live(time.time()):
            report.running.append(job_id)
            return
        mine = _read_job(source, job_id)
    except _PROBLEMS as exc:
        report.refused.append(Refusal(job_id, f"in the source: {exc}"))
        return
    copy, bodies = mine
    if copy.lease is not None and copy.lease.is_live(time.time()):
        report.running.append(job_id)  # it started meanwhile
        return
    try:
        theirs = _read_job(target, job_id)
    except JobNotFound:
        theirs = None
    except _PROBLEMS as exc:
        report.refused.append(
            Refusal(job_id, f"the destination has a job {job_id} that does not verify: {exc}")
        )
        return
    if theirs is not None:
        differs = _difference(mine, theirs)
        if differs is None:
            report.skipped.append(job_id)
        else:
            report.refused.append(
                Refusal(
                    job_id,
                    f"the destination already has a job {job_id} that differs from the "
                    f"source's ({differs}); it was left as it is. Remove or rename one of "
                    "them, then run the command again",
                )
            )
        return
    try:
        rows, stored = _written(target, copy, bodies)
        target.catalog.insert_job_copy(rows, stored, f"from {redact(source.location)}")
    except StoreError as exc:  # taken meanwhile, or its chunks swept by a prune
        report.refused.append(Refusal(job_id, f"not written into the destination: {exc}"))
        return
    report.copied.append(job_id)
    report.snapshots += len(rows.snapshots)
    report.effects += len(rows.effects)
    report.approvals += len(rows.approvals)
    report.events += len(rows.events)


# ---------------------------------------------------------------------------- the store
def migrate_store(src: str, dst: str, *, decrypt: bool = False) -> MigrationReport:
    """Copy every job of the store at `src` into the store at `dst` (created if need
    be), as the module doc says. The source is opened read-only. StoreError (exit 2)
    before anything is copied for the same store twice, an encrypted source into a
    plaintext destination without `decrypt`, or keys the destination cannot take."""
    if _same_place(src, dst):
        raise StoreError(f"the source and the destination are the same store ({redact(src)})")
    report = MigrationReport(_named(src), _named(dst))
    with _opened(src, dst) as (source, target, created):
        report.created = created
        _check_encryption(source, target, created, decrypt, report)
        _share_keys(source, target, report)
        for job in source.catalog.list_jobs():
            _migrate_job(source, target, job.job_id, report)
    return report
