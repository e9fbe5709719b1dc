"""Effects: @effect and call_effect, at most once across crashes, restores and forks.

Every outbound call goes through @effect (or call_effect): this module builds the
call's spec (runtime/_effect_spec.py), checks a required approval, and sends it through
the job's ledger (runtime/_ledger.py: identities, the two durable writes, recovery of an
unknown outcome, fencing at the moment of sending). In plain Python there is no ledger:
the function is simply called.

A provider's "not now" (RateLimited, an HTTP 429 with Retry-After: resources/_ratelimit.py)
means the action did not happen: the ledger records the attempt not-committed and the
task waits here (the "rate-limit" wait kind; long waits hibernate the job), then calls
the same action again: same ordinal, same key, same arguments (see "rate limits" below).
Async effects are in runtime/_effects_async.py, recorded values (now(), random(),
uuid4()) in runtime/_recorded.py.
"""

from __future__ import annotations

import functools
import inspect
import uuid as _uuid
from collections.abc import Callable
from typing import (
    TYPE_CHECKING,
    Any,
    Literal,
    ParamSpec,
    TypeVar,
    cast,
    overload,
)

from .._errors import (
    RestoreError,
    SnapshotError,
    StoreDamaged,
    StoreFailure,
)
from . import _waits
from ._approvals import check_scope
from ._clock import clock
from ._effect_spec import (
    Refused,
    Retry,
    Spec,
    current_job,
    effect_call_site,
    invoke,
    make_spec,
    rate_limit,
    spec_options,
    wait_seconds,
)
from ._effects_async import call_async, mark_coroutine_function
from ._waits import wait_api, wait_point

if TYPE_CHECKING:
    from ._job import Job

__all__ = ["effect", "call_effect", "rate_limit_wait"]

P = ParamSpec("P")
R = TypeVar("R")


# Typing: an effect is typed as its function (a wrong call is a type error) unless the
# runtime passes it keywords its callers do not (idempotency_key, fencing_token, the
# timeout): a type checker cannot take those out of a signature, so such an effect is
# typed by its result only.
@overload
def effect(fn: Callable[P, R]) -> Callable[P, R]: ...
@overload
def effect(
    fn: None = None,
    *,
    idempotency: None = None,
    lookup: None = None,
    kind: Literal["write", "read"] = "write",
    retry: Retry | None = None,
    timeout_param: None = None,
    fencing_token: Literal[False] = False,
    requires: str | None = None,
    within: Callable[..., object] | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...
@overload
def effect(
    fn: None = None,
    *,
    idempotency: Literal["key"] | None = None,
    lookup: Callable[..., object] | None = None,
    kind: Literal["write", "read"] = "write",
    retry: Retry | None = None,
    timeout_param: str | None = None,
    fencing_token: bool = False,
    requires: str | None = None,
    within: Callable[..., object] | None = None,
) -> Callable[[Callable[..., R]], Callable[..., R]]: ...
def effect(
    fn: Callable[P, R] | None = None,
    *,
    idempotency: str | None = None,
    lookup: Callable[..., object] | None = None,
    kind: str = "write",
    retry: Retry | None = None,
    timeout_param: str | None = None,
    fencing_token: bool = False,
    requires: str | None = None,
    within: Callable[..., object] | None = None,
) -> Callable[P, R] | Callable[[Callable[P, R]], Callable[P, R]]:
    """Declare an outbound call: recorded in the ledger, dispatched at most once.

    idempotency="key": the function receives `idempotency_key` (stable across restores)
    and passes it to the provider. lookup=fn: fn(idempotency_key) returns the provider's
    result if the action happened, None if not. kind="read": safe to repeat (the result
    is still recorded). retry=Retry(...): transient errors are retried with the same key.
    timeout_param="timeout": the function receives timeout=<seconds> (the smaller of the
    caller's value, if any, and effect_time_left()), the time its request must end
    within. fencing_token=True: the function (and its lookup) receives
    fencing_token=<int>, the runner's lease epoch (None in plain Python), which grows
    with every takeover: a provider that keeps the highest token seen per key can
    refuse a stale runner's late request. requires="purchase": sent only while the job
    holds a granted, unexpired approval of that name (request_approval()), and, with
    within=fn, only when fn(scope, **arguments) is true for the scope recorded when it
    was granted; otherwise ApprovalScopeError, and nothing is recorded or sent.
    """

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        spec = make_spec(
            function,
            idempotency,
            lookup,
            kind,
            retry,
            timeout_param,
            fencing_token,
            requires,
            within,
        )

        if inspect.iscoroutinefunction(function):  # awaited: runtime/_async.py

            @functools.wraps(function)
            def async_wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
                return cast(R, call_async(spec, args, kwargs, None, async_wrapper))

            async_wrapper.__snapstate_effect__ = spec  # type: ignore[attr-defined]
            return mark_coroutine_function(async_wrapper)

        @functools.wraps(function)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            return _call(spec, args, kwargs, None, wrapper)

        wrapper.__snapstate_effect__ = spec  # type: ignore[attr-defined]  # a marker
        return wrapper

    return decorate(fn) if fn is not None else decorate


# Typing: PEP 612 allows no keyword parameter between *args: P.args and **kwargs:
# P.kwargs, so fn's arguments are checked when no option is given (the first overload);
# a call with an option (each overload below requires one) is typed by its result. A
# type checker sees that the first overload's **kwargs could take the options too, and
# says the others never match ([overload-cannot-match]); they do match where fn takes
# no such keyword, which is what they are for.
@overload
def call_effect(fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R: ...
@overload
def call_effect(  # type: ignore[overload-cannot-match]
    fn: Callable[..., R],
    /,
    *args: Any,
    key: str,
    idempotency: Literal["key"] | None = None,
    lookup: Callable[..., object] | None = None,
    kind: Literal["write", "read"] = "write",
    retry: Retry | None = None,
    timeout_param: str | None = None,
    fencing_token: bool = False,
    **kwargs: Any,
) -> R: ...
@overload
def call_effect(  # type: ignore[overload-cannot-match]
    fn: Callable[..., R],
    /,
    *args: Any,
    key: str | None = None,
    idempotency: Literal["key"],
    lookup: Callable[..., object] | None = None,
    kind: Literal["write", "read"] = "write",
    retry: Retry | None = None,
    timeout_param: str | None = None,
    fencing_token: bool = False,
    **kwargs: Any,
) -> R: ...
@overload
def call_effect(  # type: ignore[overload-cannot-match]
    fn: Callable[..., R],
    /,
    *args: Any,
    key: str | None = None,
    idempotency: Literal["key"] | None = None,
    lookup: Callable[..., object],
    kind: Literal["write", "read"] = "write",
    retry: Retry | None = None,
    timeout_param: str | None = None,
    fencing_token: bool = False,
    **kwargs: Any,
) -> R: ...
@overload
def call_effect(  # type: ignore[overload-cannot-match]
    fn: Callable[..., R],
    /,
    *args: Any,
    key: str | None = None,
    idempotency: Literal["key"] | None = None,
    lookup: Callable[..., object] | None = None,
    kind: Literal["write", "read"],
    retry: Retry | None = None,
    timeout_param: str | None = None,
    fencing_token: bool = False,
    **kwargs: Any,
) -> R: ...
@overload
def call_effect(  # type: ignore[overload-cannot-match]
    fn: Callable[..., R],
    /,
    *args: Any,
    key: str | None = None,
    idempotency: Literal["key"] | None = None,
    lookup: Callable[..., object] | None = None,
    kind: Literal["write", "read"] = "write",
    retry: Retry,
    timeout_param: str | None = None,
    fencing_token: bool = False,
    **kwargs: Any,
) -> R: ...
@overload
def call_effect(  # type: ignore[overload-cannot-match]
    fn: Callable[..., R],
    /,
    *args: Any,
    key: str | None = None,
    idempotency: Literal["key"] | None = None,
    lookup: Callable[..., object] | None = None,
    kind: Literal["write", "read"] = "write",
    retry: Retry | None = None,
    timeout_param: str,
    fencing_token: bool = False,
    **kwargs: Any,
) -> R: ...
@overload
def call_effect(  # type: ignore[overload-cannot-match]
    fn: Callable[..., R],
    /,
    *args: Any,
    key: str | None = None,
    idempotency: Literal["key"] | None = None,
    lookup: Callable[..., object] | None = None,
    kind: Literal["write", "read"] = "write",
    retry: Retry | None = None,
    timeout_param: str | None = None,
    fencing_token: bool,
    **kwargs: Any,
) -> R: ...
@overload
def call_effect(  # type: ignore[overload-cannot-match]
    fn: Callable[..., R],
    /,
    *args: Any,
    key: str | None = None,
    idempotency: Literal["key"] | None = None,
    lookup: Callable[..., object] | None = None,
    kind: Literal["write", "read"] = "write",
    retry: Retry | None = None,
    timeout_param: str | None = None,
    fencing_token: bool = False,
    requires: str,
    within: Callable[..., object] | None = None,
    **kwargs: Any,
) -> R: ...
def call_effect(  # type: ignore[misc]  # (fn's own keywords could be named `key`, ...)
    fn: Callable[..., R],
    /,
    *args: Any,
    key: str | None = None,
    idempotency: str | None = None,
    lookup: Callable[..., object] | None = None,
    kind: str = "write",
    retry: Retry | None = None,
    timeout_param: str | None = None,
    fencing_token: bool = False,
    requires: str | None = None,
    within: Callable[..., object] | None = None,
    **kwargs: Any,
) -> R:
    """Run fn(*args, **kwargs) as an effect, for functions you do not own. `key` names
    the logical action explicitly (its idempotency key derives from it); e.g.
    call_effect(requests.post, url, json=body, timeout_param="timeout")."""
    spec = make_spec(
        fn, idempotency, lookup, kind, retry, timeout_param, fencing_token, requires, within
    )
    if inspect.iscoroutinefunction(fn):  # to be awaited: runtime/_async.py
        return cast(R, call_async(spec, args, kwargs, key, None))
    return _call(spec, args, kwargs, key)


def _call(
    spec: Spec[R],
    args: tuple[Any, ...],  # the caller's arguments: anything
    kwargs: dict[str, Any],
    explicit_key: str | None,
    declared: Callable[..., R] | None = None,  # the @effect function (None: call_effect)
) -> R:
    job = current_job()
    if spec.requires is not None:  # before anything is recorded or sent
        check_scope(spec.name, spec.fn, spec.requires, spec.within, job, args, kwargs, explicit_key)
    if job is None:  # plain Python: no ledger
        return _call_plain(spec, args, kwargs)
    site = effect_call_site()
    call = {
        "effect": declared if declared is not None else spec.fn,
        "options": None if declared is not None else spec_options(spec),
        "args": args,
        "kwargs": kwargs,
        "key": explicit_key,
        "refusals": 0,
    }
    return _attempt(job, spec, call, site)


def _call_plain(spec: Spec[R], args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
    """Plain Python: no ledger; a rate limit is slept through (the clock) and the call
    sent again with the same key."""
    key, refusals = f"adhoc-{_uuid.uuid4().hex}", 0
    while True:
        try:
            return invoke(spec, args, kwargs, key)
        except Exception as exc:
            seconds = rate_limit(exc)
            if seconds is None:
                raise
        refusals += 1
        clock().sleep(wait_seconds(seconds, refusals))


def _attempt(job: Job, spec: Spec[R], call: dict[str, Any], site: str) -> R:
    """Send the call through the ledger; while the provider refuses it for now, wait
    (wait_point) and send the same action again. Returns the effect's result."""
    args, kwargs, key = call["args"], call["kwargs"], call["key"]
    while True:
        before = job.ledger.actions()
        try:
            return job.ledger.call(spec, args, kwargs, key, site)
        except (StoreFailure, StoreDamaged) as exc:
            job.store_failed(exc)  # the run stops here; the agent never sees it
            raise
        except Refused as refused:
            job.ledger.set_actions(before)  # the same action is called again: same identity
            seconds = refused.seconds

        refusals = call["refusals"] + 1
        call = dict(call, refusals=refusals)
        wait = wait_seconds(seconds, refusals)
        if job._async is not None:  # a plain effect called by an async agent: it holds
            clock().sleep(wait)  # the loop while it runs, and while it waits
            continue
        try:
            wait_point(rate_limit_wait(spec.name, call, wait, seconds is None, site))
        except SnapshotError as exc:  # could not hibernate: the call fails, its row kept
            job.ledger.set_actions(before + 1)  # the refused call keeps its identity
            raise SnapshotError(
                f"effect {spec.name} at {site} was rate limited (to be sent again in "
                f"{wait:g}s) and the job could not hibernate: {exc}"
            ) from None


def _resend(call: dict[str, Any], site: str) -> Any:  # the effect's result
    """After a restore at a rate-limit wait: call the same action again, in the agent's
    task (Job._deliver runs the poller's Then)."""
    job = current_job()
    assert job is not None, "a restored wait is delivered in its job"
    effect_fn, options = call["effect"], call["options"]
    if options is None:
        spec = getattr(effect_fn, "__snapstate_effect__", None)
        if not isinstance(spec, Spec):
            raise RestoreError(
                f"the job waited at {site} to send {effect_fn!r} again after a rate limit, "
                "but it is no longer an @effect in the agent's code; restore the original "
                "source to resume this job"
            )
    else:
        spec = make_spec(effect_fn, **options)
    return _attempt(job, spec, call, site)


def _noop() -> None:
    return None


# ------------------------------------------------------------------------ rate limits
def rate_limit_wait(
    name: str, call: dict[str, Any], seconds: float, default: bool, site: str
) -> _waits.Wait:
    """The wait of effect `name` refused at `site`: due `seconds` from now (the clock);
    `call` (below) is what is sent again. `default`: the provider named no
    wait, so the default backoff is used."""
    due = clock().time() + seconds
    args = {"due": due, "seconds": seconds, "default": default, "effect": name, "call": call}
    return _waits.Wait("rate-limit", args, site)


def _poll_rate_limit(job: object, wait: _waits.Wait) -> _waits.Ready | _waits.NotYet:
    due = float(wait.args["due"])
    if clock().time() >= due:
        resend = functools.partial(_resend, wait.args["call"], wait.site)
        return _waits.Ready(_waits.Then(resend))
    asked = (
        f"no Retry-After given, backing off {wait.args['seconds']:g}s"
        if wait.args.get("default")
        else f"retry after {wait.args['seconds']:g}s"
    )
    return _waits.NotYet(due, f"rate limited: {wait.args['effect']} at {wait.site} ({asked})")


_waits.register("rate-limit", _poll_rate_limit)
for _fn in (effect(_noop), call_effect, _call, _attempt, _resend):  # between the agent's
    wait_api(_fn)  # call and wait_point(): not captured
