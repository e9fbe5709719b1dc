"""The exceptions snapstate raises.

Every error names the place (job, frame, file:line, file path) and the next step.

    SnapstateError                  base of everything below
    ├── SnapshotError               snapshot() could not freeze the job; raised into the
    │                               agent at the snapshot() call, the job keeps running
    │                               and every earlier snapshot stays valid
    ├── SnapshotWriteError          a snapshot could not be written durably (a failed
    │                               write, fsync or rename; never retried): the run stops,
    │                               the previous snapshot is intact
    ├── EffectOutsideJob            an effect was called from a thread or greenlet the job
    │                               did not start: it could not be recorded, so it was
    │                               not sent
    ├── DivergenceError             re-executed code made a different effect call than the
    │                               ledger recorded at that point: nothing was dispatched
    ├── EffectRefused               in `snaprun debug`, an effect the job never recorded
    │                               (or whose outcome is unknown): not sent; raised into
    │                               the agent at the call, the session goes on
    ├── SecretUnavailable           a Secret's value was not saved in the snapshot
    ├── ResourceReopenError         a resource (file, connection, client) could not be
    │                               reopened after a snapshot or restore; the snapshot
    │                               is intact
    ├── JobParked                   an effect's outcome is unknown: the job stopped until
    │                               `snaprun reconcile` says what happened (exit code 4)
    ├── JobWaiting                  the job hibernated at a wait (a timer, an approval, a
    │                               rate limit): not a failure; it is resumed when the
    │                               wait is over (exit code 3)
    ├── RateLimited                 raised by an effect function (or mapped from an HTTP
    │                               429): the provider refused, nothing happened; the job
    │                               waits retry_after seconds and sends the same action
    │                               again with the same idempotency key
    ├── ApprovalError               an approval cannot be requested, decided or used as
    │   │                           asked (outside a job, an unknown or already decided
    │   │                           approval, a person not among its approvers; exit 2)
    │   ├── ApprovalRejected        the approval the agent asked for was rejected; raised
    │   │                           into the agent at its request_approval() call
    │   ├── ApprovalExpired         the approval expired before anyone decided it (raised
    │   │                           into the agent), or deciding it came too late
    │   └── ApprovalScopeError      an effect that requires an approval was called with no
    │                               granted, unexpired approval of that name, or outside
    │                               the scope recorded when it was granted: nothing sent
    ├── RestoreError                a snapshot could not be turned back into a running job
    │   └── IncompatibleSnapshot    the snapshot was taken under another Python or
    │                               library version, or the agent's code has changed
    ├── CorruptSnapshot             the file is not a snapshot or is damaged; nothing of
    │   │                           it was unpickled
    │   └── TruncatedSnapshot       the file ends early (a copy cut short)
    ├── SnapshotRejected            the file is intact but may not be trusted or read here;
    │   │                           nothing of it was unpickled
    │   ├── TamperedSnapshot        its signature does not match: modified after signing
    │   ├── HeaderMismatch          its header belongs to another snapshot's body
    │   ├── UnknownKey              signed with a key id this store does not have
    │   ├── RetiredKey              signed with a key that was retired
    │   └── PlaintextRefused        not encrypted, in a store that requires encryption
    ├── StoreFailure                the store itself failed (disk full, read-only, I/O
    │                               error): the job stays resumable (exit code 1)
    └── StoreError                  the store refused an operation; nothing changed
        ├── InvalidJobId            a job id outside the safe alphabet or too long (exit 2)
        ├── StoreDamaged            the catalog, keys or identity of a store is missing,
        │                           empty or corrupt next to existing snapshots; nothing
        │                           was re-created (`snaprun repair`, exit code 2)
        ├── JobFinished             the job is done: it never runs again (fork it)
        ├── JobNotFound             no job with that id
        ├── JobExists               a job with that id already exists
        ├── SnapshotNotFound        the job has no snapshot with that sequence number
        ├── LeaseHeld               another live runner holds the job (exit code 5)
        ├── ChunksMissing           a chunked snapshot's chunks were swept by a concurrent
        │                           prune before its commit (the writer retries)
        └── StaleWriter             this runner's lease epoch is no longer current (the
                                    job was taken over): its write was rejected

Every exception pickles (exceptions are stored inside snapshots) and keeps its
message across the round trip.
"""

from __future__ import annotations

__all__ = [
    "SnapstateError",
    "SnapshotError",
    "SnapshotWriteError",
    "RestoreError",
    "IncompatibleSnapshot",
    "CorruptSnapshot",
    "TruncatedSnapshot",
    "SnapshotRejected",
    "TamperedSnapshot",
    "HeaderMismatch",
    "UnknownKey",
    "RetiredKey",
    "PlaintextRefused",
    "StoreError",
    "JobNotFound",
    "JobExists",
    "SnapshotNotFound",
    "LeaseHeld",
    "StaleWriter",
    "ChunksMissing",
    "DivergenceError",
    "EffectRefused",
    "SecretUnavailable",
    "JobParked",
    "RateLimited",
    "ResourceReopenError",
    "EffectOutsideJob",
    "InvalidJobId",
    "StoreDamaged",
    "StoreFailure",
    "JobFinished",
    "ApprovalError",
    "ApprovalRejected",
    "ApprovalExpired",
    "ApprovalScopeError",
]


class SnapstateError(Exception):
    """Base class of all snapstate errors."""

    def __reduce__(
        self,
    ) -> tuple[type[SnapstateError], tuple[object, ...], dict[str, object] | None]:
        return (type(self), self.args, self.__dict__ or None)


class SnapshotError(SnapstateError):
    """snapshot() could not freeze the job.

    Raised into the agent at the snapshot() call, so agent code may catch it and
    carry on; the process continues and earlier snapshots stay valid. The message
    names the frame, its file:line, the construct that cannot be frozen and the fix.
    """


class RestoreError(SnapstateError):
    """A snapshot could not be restored. Earlier snapshots are untouched."""


class IncompatibleSnapshot(RestoreError):
    """The snapshot was taken under another interpreter, library versions or code.

    The message lists every difference; resume it with the original environment
    (same CPython minor version, same agent source) or start a new job.
    """


class CorruptSnapshot(SnapstateError):
    """The file is not a readable snapshot: wrong magic, truncated, or its checksum
    does not match. Nothing from it was unpickled; use an earlier snapshot."""


class TruncatedSnapshot(CorruptSnapshot):
    """The file ends before its trailer: a copy or write cut short."""


class SnapshotWriteError(SnapstateError):
    """A snapshot could not be written durably. Never retried (after a failed fsync the
    kernel may have dropped the data); the run stops and the job's previous snapshot
    stays the latest, so `snaprun resume JOB` continues from it once the cause is fixed."""


class SnapshotRejected(SnapstateError):
    """The snapshot is intact but is not trusted or not readable with this store's keys
    and settings. Nothing from it was unpickled."""


class TamperedSnapshot(SnapshotRejected):
    """The signature (HMAC-SHA256, or the AEAD tag) does not match: the file was
    modified after it was written, or signed by another key with the same id."""


class HeaderMismatch(SnapshotRejected):
    """The header does not belong to this body (headers swapped between snapshots, or
    an edited header)."""


class UnknownKey(SnapshotRejected):
    """Signed with a key id the store in use does not have (a file never brings its own
    key): `snaprun keys export ID -o key.json` in the store that wrote it, then
    `snaprun keys import key.json`, or set SNAPSTATE_KEY to that key."""


class RetiredKey(SnapshotRejected):
    """Signed with a key that was retired (`snaprun keys retire`): it is no longer
    trusted."""


class PlaintextRefused(SnapshotRejected):
    """Not encrypted, in a store that requires encryption."""


class StoreError(SnapstateError):
    """The store refused an operation; nothing was changed."""


class InvalidJobId(StoreError):
    """A job id outside the safe alphabet (letters, digits, '.', '_', '-', starting with
    a letter or digit, at most 128 characters): ids name files in the store, so
    anything else is refused before anything runs or is created."""


class StoreDamaged(StoreError):
    """The store's catalog, keys or identity is missing, empty or corrupt while
    snapshots exist. Nothing was re-created (that would orphan the snapshots or mint a
    key that verifies none of them): restore the file, or run `snaprun repair`."""


class JobFinished(StoreError):
    """The job is done: a done job never runs again, from any entry point (CLI,
    `resume FILE`, the Python API). `snaprun fork JOB@SEQ` starts a copy."""


class StoreFailure(SnapstateError):
    """The store itself failed (disk full, a read-only file system, an I/O error) while
    recording the job's progress. The agent did not fail: the job is left resumable,
    and `snaprun resume JOB` continues it once the store is writable again."""


class JobNotFound(StoreError):
    """No job with that id in this store (`snaprun ls` lists them)."""


class JobExists(StoreError):
    """A job with that id already exists; choose another id (`--job`, `--as`)."""


class SnapshotNotFound(StoreError):
    """The job has no snapshot with that sequence number (`snaprun log JOB`)."""


class LeaseHeld(StoreError):
    """Another live runner holds the job's lease; only one runner per job."""


class ChunksMissing(StoreError):
    """A chunked snapshot's commit found chunks it refers to gone from the catalog (a
    concurrent `snaprun prune` swept them after the writer saw them): nothing was
    committed; the writer stores them again and retries."""

    def __init__(self, *args: object, ids: frozenset[bytes] = frozenset()):
        super().__init__(*args)
        self.ids = ids  # kept by pickling (an exception's __dict__ is)


class StaleWriter(StoreError):
    """This runner's lease epoch is no longer current (another runner took the job
    over): the write was rejected and the catalog is unchanged."""


class DivergenceError(SnapstateError):
    """After a restore (or in a replay) the agent made a different effect call at a point
    where the ledger recorded another one: a different function or different arguments.
    Nothing was dispatched. Code between a snapshot and a crash must re-execute the same
    way; use snapstate.now()/random()/uuid4() for values that change between runs."""


class EffectRefused(SnapstateError):
    """In `snaprun debug` (a sandbox that sends nothing), the agent called an effect the
    job never recorded, or one whose outcome the ledger does not know: it was not sent.
    Raised into the agent at the call; the debug session goes on. Also raised (in
    `snaprun debug` and `snaprun replay`) at a request record_http would send
    unrecorded (from a thread the job did not start, or a foreign event loop)."""


class SecretUnavailable(SnapstateError):
    """A snapstate.Secret's value is never written into a snapshot; after a restore it
    must be obtained again (Secret.from_env re-reads its environment variable)."""


class JobParked(SnapstateError):
    """An effect was dispatched but its outcome is unknown and cannot be found out
    automatically (no idempotency key, no lookup). The job stopped, its state intact,
    until `snaprun reconcile JOB EFFECT --committed|--not-committed`."""


class JobWaiting(SnapstateError):
    """The job hibernated: it waits for a time (a long sleep, a rate limit's reset) or an
    outside event (an approval decided). Its state is in the snapshot taken at the wait;
    `snaprun worker` resumes it when it is due (or `snaprun resume JOB` at once, which
    hibernates it again if it is not)."""

    def __init__(self, *args: object, due: float | None = None, kind: str = "") -> None:
        super().__init__(*args)
        self.due = due
        self.kind = kind


class RateLimited(SnapstateError):
    """The provider refused a call for now (a rate limit, HTTP 429): the action did not
    happen. An effect function raises RateLimited(retry_after=seconds, message) (snapstate
    maps an HTTP 429 raised by httpx, requests, urllib, openai and anthropic to it); the
    job waits that long (in the process if short, hibernated if long: exit code 3) and
    sends the same action again, with the same idempotency key. A retry_after that is
    not a number of seconds (0 or more, finite), or None, means the provider named no
    wait: the default backoff applies. Outside an effect it is an ordinary exception."""

    def __init__(self, retry_after: float | None = None, message: str = "", *more: object) -> None:
        super().__init__(retry_after, message, *more)

    @property
    def retry_after(self) -> float | None:
        """Seconds to wait before sending again; None: not given (the default backoff)."""
        value = self.args[0] if self.args else None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        return float(value) if 0 <= value < float("inf") else None

    @property
    def message(self) -> str:
        """What the provider said (RateLimited("quota exceeded") is a message only)."""
        value = self.args[1] if len(self.args) > 1 else ""
        if not value and self.args and isinstance(self.args[0], str):
            return self.args[0]
        return value if isinstance(value, str) else repr(value)

    def __str__(self) -> str:
        if self.args and isinstance(self.args[0], str) and not any(self.args[1:]):
            return self.args[0]  # a message only
        seconds = self.retry_after
        text = "rate limited: " + (
            f"retry after {seconds:g}s" if seconds is not None else "no wait given"
        )
        return f"{text} ({self.message})" if self.message else text


class ResourceReopenError(SnapstateError):
    """A resource could not be reopened after a snapshot or a restore (the file is
    gone, the server is down, its factory raised). The snapshot is intact: fix the
    cause and resume the job again."""


class EffectOutsideJob(SnapstateError):
    """An effect was called, while a job runs, from a thread or greenlet the job did
    not start. It could not be recorded in the job's ledger (a restore would send it
    again), so it was not sent: call effects from the agent's own code."""


class ApprovalError(SnapstateError):
    """An approval could not be requested, decided or used as asked: request_approval()
    outside a job (nobody could be asked), an unknown approval id, an approval already
    decided, a person not among its approvers. Nothing was changed."""


class ApprovalRejected(ApprovalError):
    """The approval the agent asked for with request_approval() was rejected; raised into
    the agent at that call (it may catch it). `approval_id`, `name`, `by` and `note` say
    which, by whom and why."""

    def __init__(
        self,
        *args: object,
        approval_id: str = "",
        name: str = "",
        by: str | None = None,
        note: str | None = None,
    ) -> None:
        super().__init__(*args)
        self.approval_id = approval_id
        self.name = name
        self.by = by
        self.note = note


class ApprovalExpired(ApprovalError):
    """The approval expired before anyone decided it: raised into the agent at its
    request_approval() call, or by `snaprun approve/reject` deciding it too late."""

    def __init__(
        self, *args: object, approval_id: str = "", name: str = "", expires: float | None = None
    ) -> None:
        super().__init__(*args)
        self.approval_id = approval_id
        self.name = name
        self.expires = expires


class ApprovalScopeError(ApprovalError):
    """An effect declared with requires="name" was called while the job has no granted,
    unexpired approval of that name, or with arguments outside the scope recorded when
    it was granted (its within= predicate said no). Nothing was recorded or sent."""
