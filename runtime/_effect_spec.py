"""What an effect is and how it is called: the declared policy (`Retry`, `Recovery`, the
spec built by @effect and call_effect), the call itself (`invoke`, `lookup`: the
idempotency key, the timeout, the fencing token passed as declared), the rate-limit
policy (a provider's "not now" is `Refused`; how long to wait), and the job an effect
is called in (`current_job`: the agent's own task, or none in plain Python).
"""

from __future__ import annotations

import enum
import math
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING,
    Any,
    Final,
    Generic,
    TypeVar,
)

import greenlet

from .._errors import (
    EffectOutsideJob,
    SnapstateError,
)
from ..resources._ratelimit import (
    DEFAULT_RETRY_AFTER,
    MAX_DEFAULT_RETRY_AFTER,
    MAX_RETRY_AFTER,
    NOT_GIVEN,
    retry_after,
)
from ..serializers._store import EffectKind
from . import _context
from ._clock import clock
from ._effect_args import reveal
from ._settings import env_seconds

if TYPE_CHECKING:
    from ._job import Job

__all__ = [
    "Retry",
    "Recovery",
    "Spec",
    "make_spec",
    "spec_options",
    "invoke",
    "call_lookup",
    "current_job",
    "effect_call_site",
    "Refused",
    "rate_limit",
    "wait_seconds",
    "TASK_ORDINAL_BASE",
    "on_pool",
    "effect_time_left",
]

R = TypeVar("R")
T = TypeVar("T")


# ------------------------------------------------------------------------ the policy
@dataclass(frozen=True)
class Retry:
    """Retry transient errors, reusing the same idempotency key. Only for effects
    whose repetition is safe: idempotency="key", a lookup, or kind="read"."""

    attempts: int = 3
    backoff: float = 0.2
    max_backoff: float = 5.0
    on: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError)


class Recovery(enum.StrEnum):
    """How an effect row found on re-execution, whose outcome is not confirmed, is
    settled: what the effect declared, or a replay (which sends nothing)."""

    REPLAY = "replay"  # `snaprun replay`: every effect served from the ledger, none sent
    REPEAT = "repeat"  # kind="read": harmless to send again
    KEY = "key"  # idempotency="key": the provider honours keys, send again with the same
    LOOKUP = "lookup"  # lookup=fn: ask the provider whether it happened
    NONE = "none"  # neither: the outcome cannot be found out


@dataclass(frozen=True)
class Spec(Generic[R]):
    fn: Callable[..., R]
    name: str
    idempotency: str | None
    lookup: Callable[..., object] | None
    kind: EffectKind
    retry: Retry | None
    timeout_param: str | None = None
    fencing_token: bool = False
    requires: str | None = None  # the name of the approval it needs (runtime/_approvals.py)
    within: Callable[..., object] | None = None  # within(scope, **arguments) -> bool

    @property
    def recovery(self) -> Recovery:
        if self.kind == EffectKind.READ:
            return Recovery.REPEAT
        if self.idempotency == "key":
            return Recovery.KEY
        return Recovery.NONE if self.lookup is None else Recovery.LOOKUP


def make_spec(
    fn: Callable[..., R],
    idempotency: str | None,
    lookup: Callable[..., object] | None,
    kind: str,
    retry: Retry | None,
    timeout_param: str | None = None,
    fencing_token: bool = False,
    requires: str | None = None,
    within: Callable[..., object] | None = None,
) -> Spec[R]:
    if idempotency not in (None, "key"):
        raise ValueError('idempotency must be None or "key"')
    if kind not in ("write", "read"):
        raise ValueError('kind must be "write" or "read"')
    if timeout_param is not None and not (
        isinstance(timeout_param, str) and timeout_param.isidentifier()
    ):
        raise ValueError('timeout_param must be the name of a keyword parameter, e.g. "timeout"')
    if not isinstance(fencing_token, bool):
        raise ValueError("fencing_token must be True or False")
    if requires is not None and not (isinstance(requires, str) and requires.strip()):
        raise ValueError('requires must name an approval, e.g. requires="purchase"')
    if within is not None and (requires is None or not callable(within)):
        raise ValueError(
            'within= is a predicate within(scope, **arguments) and goes with requires="name"'
        )
    name = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
    return Spec(
        fn,
        name,
        idempotency,
        lookup,
        EffectKind(kind),
        retry,
        timeout_param,
        fencing_token,
        requires=requires,
        within=within,
    )


# Catalog ordinals of the rows of spawned tasks (runtime/_tasks.py) start here: a main
# task never counts this far, so the two never collide.
TASK_ORDINAL_BASE: Final = 1 << 40

# On an effect pool thread (a job with several tasks): the deadline of the request sent.
_POOL_SENDING = threading.local()


def on_pool(ends: float, call: Callable[[], T]) -> T:
    """Run an effect's call on a pool thread, effect_time_left() answering for it."""
    _POOL_SENDING.ends = ends
    try:
        return call()
    finally:
        _POOL_SENDING.ends = None


def effect_time_left() -> float | None:
    """Seconds the request of the effect being sent may still take: it must end before
    the lease deadline recorded when the effect was dispatched (after it, another
    runner may take the job over and send it again). Pass it as the request's timeout.
    None outside an effect sent by a job (plain Python, or between effects)."""
    ends: float | None = getattr(_POOL_SENDING, "ends", None)
    if ends is not None:
        return max(0.0, ends - time.time())
    job = _context.active_job()
    if job is None or job.ledger.sending is None:
        return None
    return max(0.0, job.ledger.sending - time.time())


def current_job() -> Job | None:
    """The job whose agent is running here; None in plain Python. While a job runs,
    a call from another thread or greenlet is refused: the ledger could not record it,
    and a restore would send it again."""
    job = _context.active_job()
    if job is None:
        return None
    if not job._is_task(greenlet.getcurrent()):
        raise EffectOutsideJob(
            f"an effect was called from {threading.current_thread().name!r} (not the job's "
            f"task) while job {job.job_id} runs: it cannot be recorded in the ledger, so it "
            "was not sent. Call effects from the agent's own code, not from threads or "
            "greenlets it starts."
        )
    return job


def effect_call_site() -> str:
    frame = sys._getframe(3)
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


def invoke(
    spec: Spec[R],
    args: tuple[Any, ...],  # the caller's arguments: anything
    kwargs: dict[str, Any],
    key: str,
    *,
    timeout: float | None = None,
    token: int | None = None,
) -> R:
    args = tuple(reveal(a) for a in args)
    kwargs = {k: reveal(v) for k, v in kwargs.items()}
    if spec.idempotency == "key" or spec.lookup is not None:
        kwargs["idempotency_key"] = key
    if spec.timeout_param is not None and timeout is not None:
        given = kwargs.get(spec.timeout_param)
        kwargs[spec.timeout_param] = timeout if given is None else min(given, timeout)
    if spec.fencing_token:
        kwargs["fencing_token"] = token
    return spec.fn(*args, **kwargs)


def call_lookup(spec: Spec[R], key: str, token: int | None) -> Any:  # the provider's result
    assert spec.lookup is not None, "only an effect with a lookup is looked up"
    if spec.fencing_token:
        return spec.lookup(key, fencing_token=token)
    return spec.lookup(key)


# ------------------------------------------------------------------------ rate limits
# An effect the provider refused for now (RateLimited, an HTTP 429) did not happen: its
# row is recorded not-committed (not counted as an attempt), and the task waits (a Wait
# of kind "rate-limit", runtime/_effects.py) with the call, as plain data: the effect
# (pickled by reference), its arguments and explicit key. Short waits are slept through
# in the process, long ones hibernate the job. Then the same logical action is called
# again: the ledger's ordinal was rolled back to before the refused call, so it finds
# its own row (same identity, same idempotency key; other arguments are a
# DivergenceError) and sends it again. After a restore at that wait, the poller's
# Ready(Then(...)) calls _effects._resend() in the agent's task (Job._deliver). The functions
# between the agent's call and wait_point() are wait_api (not captured): the agent's
# call receives the effect's result either way.
class Refused(BaseException):
    """The provider refused the call (a rate limit): raised from the ledger to _attempt."""

    def __init__(self, seconds: float | None, error: BaseException) -> None:
        super().__init__(seconds, error)
        self.seconds = seconds  # None: the provider named no wait
        self.error = error


MAX_RETRY_AFTER_VARIABLE = "SNAPSTATE_MAX_RETRY_AFTER"
_RETRY_AFTER_RANGE = (1.0, 366 * 86400.0)  # a second to a year


def max_retry_after() -> float:
    """The longest wait a provider may name (SNAPSTATE_MAX_RETRY_AFTER seconds, from 1
    to a year; default MAX_RETRY_AFTER, a day); a SnapstateError names a bad value."""
    low, high = _RETRY_AFTER_RANGE
    return env_seconds(MAX_RETRY_AFTER_VARIABLE, MAX_RETRY_AFTER, high, low)


def rate_limit(exc: BaseException) -> float | None:
    """Seconds to wait when exc is a rate limit (resources/_ratelimit.py; NOT_GIVEN when
    the provider named none), else None. A wait longer than max_retry_after() is
    clamped to it and said so (the job's timeline, a warning on stderr): never an
    error, so no provider can end or bury a job through its Retry-After."""
    asked = retry_after(exc, clock().time(), math.inf)
    if asked is None or asked == NOT_GIVEN:
        return asked
    try:
        cap = max_retry_after()
    except SnapstateError:  # refused before any job runs (check_settings); set since
        cap = MAX_RETRY_AFTER
    if asked <= cap:
        return asked
    _clamped(exc, asked, cap)
    return cap


def _clamped(exc: BaseException, asked: float, cap: float) -> None:
    message = (
        f"the provider asked to wait {asked:.6g}s before sending again ({type(exc).__name__}); "
        f"waiting {cap:g}s instead, the most {MAX_RETRY_AFTER_VARIABLE} allows"
    )
    job = _context.active_job()
    if job is None:  # plain Python: no job, no timeline
        sys.stderr.write(f"snapstate: warning: {message}\n")
        return
    job.say(f"warning: job {job.job_id}: {message}")
    try:
        job.home.catalog.log_event(job.job_id, "rate-limit-clamped", message)
    except (SnapstateError, OSError, sqlite3.Error):
        pass  # a note only: the wait goes on; a failing store is found by the next write


def wait_seconds(seconds: float | None, refusals: int) -> float:
    """The wait asked for, or the default doubled at each refusal in a row."""

    if seconds is not None and seconds != NOT_GIVEN:
        return seconds
    return min(DEFAULT_RETRY_AFTER * 2.0 ** min(refusals - 1, 30), MAX_DEFAULT_RETRY_AFTER)


def spec_options(spec: Spec[Any]) -> dict[str, Any]:
    """call_effect()'s options, as plain data (a wait keeps them to call it again)."""
    return {
        "idempotency": spec.idempotency,
        "lookup": spec.lookup,
        "kind": spec.kind.value,
        "retry": spec.retry,
        "timeout_param": spec.timeout_param,
        "fencing_token": spec.fencing_token,
        "requires": spec.requires,  # checked before the row was written (_approvals)
        "within": spec.within,
    }
