"""snapstate: durable long-running Python agents.

Agent code runs as a greenlet task; at each snapshot() the runtime freezes the whole
call stack into a self-contained snapshot file, and `snaprun resume` continues it in
a new process right after that snapshot().

Layout: this facade holds only the public API. The engine lives in
snapstate.runtime (jobs, snapshot(), frame capture and restore, the CLI),
snapstate.serializers (the pickler and the snapshot file format) and
snapstate.resources (handles closed before a snapshot and reopened after).
"""

from snapstate._errors import ApprovalError as ApprovalError
from snapstate._errors import ApprovalExpired as ApprovalExpired
from snapstate._errors import ApprovalRejected as ApprovalRejected
from snapstate._errors import ApprovalScopeError as ApprovalScopeError
from snapstate._errors import ChunksMissing as ChunksMissing
from snapstate._errors import CorruptSnapshot as CorruptSnapshot
from snapstate._errors import DivergenceError as DivergenceError
from snapstate._errors import EffectOutsideJob as EffectOutsideJob
from snapstate._errors import EffectRefused as EffectRefused
from snapstate._errors import HeaderMismatch as HeaderMismatch
from snapstate._errors import IncompatibleSnapshot as IncompatibleSnapshot
from snapstate._errors import InvalidJobId as InvalidJobId
from snapstate._errors import JobExists as JobExists
from snapstate._errors import JobFinished as JobFinished
from snapstate._errors import JobNotFound as JobNotFound
from snapstate._errors import JobParked as JobParked
from snapstate._errors import JobWaiting as JobWaiting
from snapstate._errors import LeaseHeld as LeaseHeld
from snapstate._errors import PlaintextRefused as PlaintextRefused
from snapstate._errors import RateLimited as RateLimited
from snapstate._errors import ResourceReopenError as ResourceReopenError
from snapstate._errors import RestoreError as RestoreError
from snapstate._errors import RetiredKey as RetiredKey
from snapstate._errors import SecretUnavailable as SecretUnavailable
from snapstate._errors import SnapshotError as SnapshotError
from snapstate._errors import SnapshotNotFound as SnapshotNotFound
from snapstate._errors import SnapshotRejected as SnapshotRejected
from snapstate._errors import SnapshotWriteError as SnapshotWriteError
from snapstate._errors import SnapstateError as SnapstateError
from snapstate._errors import StaleWriter as StaleWriter
from snapstate._errors import StoreDamaged as StoreDamaged
from snapstate._errors import StoreError as StoreError
from snapstate._errors import StoreFailure as StoreFailure
from snapstate._errors import TamperedSnapshot as TamperedSnapshot
from snapstate._errors import TruncatedSnapshot as TruncatedSnapshot
from snapstate._errors import UnknownKey as UnknownKey
from snapstate._version import __version__ as __version__
from snapstate.resources._adapters import register_adapter as register_adapter
from snapstate.resources._registry import resource as resource
from snapstate.resources._secrets import credential as credential
from snapstate.runtime._api import ApprovalView as ApprovalView
from snapstate.runtime._api import EffectView as EffectView
from snapstate.runtime._api import JobResult as JobResult
from snapstate.runtime._api import JobStatus as JobStatus
from snapstate.runtime._api import JobView as JobView
from snapstate.runtime._api import SnapshotView as SnapshotView
from snapstate.runtime._api import Store as Store
from snapstate.runtime._api import WaitInfo as WaitInfo
from snapstate.runtime._approvals import Approval as Approval
from snapstate.runtime._approvals import request_approval as request_approval
from snapstate.runtime._effect_args import Secret as Secret
from snapstate.runtime._effect_spec import Retry as Retry
from snapstate.runtime._effect_spec import effect_time_left as effect_time_left
from snapstate.runtime._effects import call_effect as call_effect
from snapstate.runtime._effects import effect as effect
from snapstate.runtime._http_record import record_http as record_http
from snapstate.runtime._job import snapshot as snapshot
from snapstate.runtime._pins import pin as pin
from snapstate.runtime._pins import pins as pins
from snapstate.runtime._recorded import now as now
from snapstate.runtime._recorded import random as random
from snapstate.runtime._recorded import uuid4 as uuid4
from snapstate.runtime._switch import SnapshotInfo as SnapshotInfo
from snapstate.runtime._tasks import Task as Task
from snapstate.runtime._tasks import gather as gather
from snapstate.runtime._tasks import spawn as spawn
from snapstate.runtime._timers import sleep as sleep
from snapstate.runtime._timers import sleep_until as sleep_until

__all__ = [
    # the agent's API
    "snapshot",
    "SnapshotInfo",
    "effect",
    "call_effect",
    "Retry",
    "Secret",
    "now",
    "random",
    "uuid4",
    "effect_time_left",
    "record_http",
    "sleep",
    "sleep_until",
    "request_approval",
    "Approval",
    "spawn",
    "gather",
    "Task",
    "resource",
    "register_adapter",
    "credential",
    "pin",
    "pins",
    # embedding: the Python API (runtime/_api.py)
    "Store",
    "JobResult",
    "JobStatus",
    "JobView",
    "WaitInfo",
    "SnapshotView",
    "EffectView",
    "ApprovalView",
    # errors (snapstate/_errors.py draws the tree)
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
    "JobWaiting",
    "RateLimited",
    "ResourceReopenError",
    "EffectOutsideJob",
    "StoreFailure",
    "InvalidJobId",
    "StoreDamaged",
    "JobFinished",
    "ApprovalError",
    "ApprovalRejected",
    "ApprovalExpired",
    "ApprovalScopeError",
]


def _fixup_module_metadata() -> None:
    # Snapshots store class paths: the public path is the promise (cf. trio).
    for name in __all__:
        obj = globals()[name]
        if isinstance(obj, type) or callable(obj):
            try:
                obj.__module__ = __name__
            except (AttributeError, TypeError):
                pass


_fixup_module_metadata()
del _fixup_module_metadata
