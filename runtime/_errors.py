"""The exceptions snapstate raises.

Every error names the place (job, frame, file:line, file path) and the next step.

    SnapstateError                  base of everything below
    ├── SnapshotError               snapshot() could not freeze the job; raised into the
    │                               agent at the snapshot() call, the job keeps running
    │                               and every earlier snapshot stays valid
    ├── RestoreError                a snapshot could not be turned back into a running job
    │   └── IncompatibleSnapshot    the snapshot was taken under another Python or
    │                               library version, or the agent's code has changed
    └── CorruptSnapshot             the file is not a snapshot, is truncated or damaged;
                                    nothing of it was unpickled

Every exception pickles (exceptions are stored inside snapshots) and keeps its
message across the round trip.
"""

from __future__ import annotations

__all__ = [
    "SnapstateError",
    "SnapshotError",
    "RestoreError",
    "IncompatibleSnapshot",
    "CorruptSnapshot",
]


class SnapstateError(Exception):
    """Base class of all snapstate errors."""

    def __reduce__(self):
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
