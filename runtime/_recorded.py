"""Recorded values: snapstate.now(), random() and uuid4().

Each value is recorded in the job's ledger (batched into its next durable write), so
code between a snapshot and a crash re-executes with the same values. Outside a job
they are plain values.
"""

from __future__ import annotations

import datetime as _datetime
import os
import random as _random
import uuid as _uuid
from collections.abc import Callable
from typing import (
    TypeVar,
)

from .._errors import (
    StoreDamaged,
    StoreFailure,
)
from ._clock import clock
from ._effect_spec import current_job, effect_call_site

__all__ = ["now", "random", "uuid4"]

T = TypeVar("T")


# ------------------------------------------------------------------------ values
def _value(kind: str, produce: Callable[[], T]) -> T:
    job = current_job()
    if job is None:
        return produce()
    try:
        return job.ledger.value(kind, produce, effect_call_site())
    except (StoreFailure, StoreDamaged) as exc:
        job.store_failed(exc)
        raise


def now() -> _datetime.datetime:
    """The current UTC time, recorded: a re-execution after a restore gets the same."""
    return _value("now", lambda: _datetime.datetime.fromtimestamp(clock().time(), _datetime.UTC))


# snapstate.random() draws from its own generator, never the global `random` state a
# snapshot saves: a value served from the ledger after a restore (not drawn again)
# leaves the agent's own random sequence as the uninterrupted run had it.
_VALUES = _random.Random()
# A forked process draws its own values, as `random`'s global generator does.
os.register_at_fork(after_in_child=_VALUES.seed)


def random() -> float:
    """A random float in [0, 1), recorded like now()."""
    return _value("random", _VALUES.random)


def uuid4() -> _uuid.UUID:
    """A random UUID, recorded like now()."""
    return _value("uuid4", _uuid.uuid4)
