"""The effect ledger: at-most-once side effects across crashes, restores, retries and
forks.

Every outbound call goes through @effect (or call_effect). Its logical identity is
the job id plus the effect's ordinal along the job's path; the ordinal counter is
part of the frozen state, so code re-executed after a restore produces the same
identities and the n-th effect finds its own ledger row. The idempotency key given
to the provider is derived from that identity (a fork has a new job id, so new keys).

Two durable writes per effect: the row, in state "dispatched", is committed before the
call is sent (it says: this action may have happened); the outcome (confirmed with
the signed result, or failed with the error) right after the response. On
re-execution a confirmed row returns its recorded result and nothing is sent; a
dispatched row means the outcome is unknown and is reconciled: retried with the same
key when the provider honours keys, asked for with lookup(key) when it can be
queried, otherwise marked ambiguous and the job parks until `snaprun reconcile`.

Fencing at the moment of sending: the transaction that records an attempt as
dispatched also requires the runner's lease epoch to be current and its deadline to
be more than dispatch_margin(ttl) away, and renews it; right before the call the
deadline (less send_guard(ttl)) is checked again in-process, and what is left is the
request's timeout (timeout_param=, effect_time_left()). A runner that fails either
check sends nothing and stops (StaleWriter). fencing_token=True passes the lease epoch.

A provider's "not now" (RateLimited, an HTTP 429 with Retry-After: resources/_ratelimit.py)
means the action did not happen: the attempt is recorded not-committed and the task
waits (runtime/_timers.py, kind "rate-limit"; long waits hibernate the job), then calls
the same action again: same ordinal, same key, same arguments (see "rate limits" below).

snapstate.now(), random() and uuid4() are recorded in the same ledger, so code
between a snapshot and a crash re-executes identically; their rows are batched into
the next durable write.
"""

from __future__ import annotations

import datetime as _datetime
import enum
import functools
import hashlib
import hmac
import inspect
import os
import pickle
import random as _random
import reprlib
import sys
import threading
import time
import types
import uuid as _uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import (
    TYPE_CHECKING,
    Any,
    Final,
    Generic,
    Literal,
    NoReturn,
    ParamSpec,
    TypeVar,
    cast,
    overload,
)

import greenlet

from .._abi import pinned
from .._errors import (
    DivergenceError,
    EffectOutsideJob,
    RestoreError,
    SecretUnavailable,
    SnapshotError,
    StaleWriter,
    StoreFailure,
    TamperedSnapshot,
)
from ..serializers._catalog import Catalog
from ..serializers._store import EffectKind, EffectRow, EffectState
from . import _context
from ._clock import clock
from ._faults import fault_point
from ._lease import dispatch_margin, send_guard

if TYPE_CHECKING:
    from ..serializers._keys import KeyRing
    from ._async import _TaskInfo
    from ._job import Job
    from ._tasks import _TaskState

__all__ = ["effect", "call_effect", "Retry", "Secret", "now", "random", "uuid4", "effect_time_left"]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


# ------------------------------------------------------------------------ secrets
class Secret(Generic[T]):
    """A value that must never be written down: not in a snapshot, not in the ledger.

    Secret(value, name="api key") is recorded as its name only; after a restore its
    value is gone (SecretUnavailable). Secret.from_env("API_KEY") is recorded as the
    variable's name and re-read from the environment after a restore."""

    __slots__ = ("name", "_value", "_env")

    def __init__(self, value: T, *, name: str = "secret") -> None:
        self.name: str = name
        self._value: T = value
        self._env: str | None = None

    @classmethod
    def from_env(cls, variable: str) -> Secret[str]:
        """A secret read from the environment variable `variable` (an unset one is an
        error naming it)."""
        try:
            value = os.environ[variable]
        except KeyError:
            raise SecretUnavailable(f"environment variable {variable} is not set") from None
        secret = Secret(value, name=variable)  # restored as a Secret too (__reduce__)
        secret._env = variable
        return secret

    def reveal(self) -> T:
        """The value; raises SecretUnavailable after a restore (secrets are never saved)."""
        if self._value is _GONE:
            raise SecretUnavailable(
                f"secret {self.name!r} was not saved in the snapshot (secrets never are); "
                "obtain it again after a restore, e.g. with Secret.from_env(...)"
            )
        return self._value

    def __repr__(self) -> str:
        return f"Secret({self.name!r})"

    def __reduce__(self) -> tuple[Callable[[str], Secret[Any]], tuple[str]]:
        if self._env is not None:
            return (Secret.from_env, (self._env,))
        return (_redacted, (self.name,))


_GONE: Final = object()


@pinned("redacted_secret")
def _redacted(name: str) -> Secret[object]:
    secret = Secret[object](None, name=name)
    secret._value = _GONE
    return secret


def _reveal(value: object) -> object:
    if isinstance(value, Secret):
        return value.reveal()
    return value


# ------------------------------------------------------------------------ digests
def _canonical(
    value: object, out: list[str], path: str = "value", _seen: set[int] | None = None
) -> None:
    """A representation of the arguments that is the same in every process (set and
    dict orders depend on the hash seed; secrets count by name only; objects by type
    and attributes, never by which equal objects happen to be shared)."""
    if isinstance(value, Secret):
        out.append(f"secret:{value.name}")
    elif value is None or isinstance(value, (bool, int, float, str, bytes)):
        out.append(f"{type(value).__name__}:{value!r}")
    elif isinstance(value, (list, tuple)):
        out.append(f"{type(value).__name__}[")
        for i, item in enumerate(value):
            _canonical(item, out, f"{path}[{i}]", _seen)
        out.append("]")
    elif isinstance(value, dict):
        out.append("dict{")
        for k in sorted(value, key=repr):
            _canonical(k, out, path, _seen)
            _canonical(value[k], out, f"{path}[{k!r}]", _seen)
        out.append("}")
    elif isinstance(value, (set, frozenset)):
        parts = []
        for item in value:
            sub: list[str] = []
            _canonical(item, sub, path, _seen)
            parts.append("".join(sub))
        out.append(f"{type(value).__name__}{{{','.join(sorted(parts))}}}")
    else:
        _canonical_object(value, out, path, set() if _seen is None else _seen)


def _canonical_object(value: object, out: list[str], path: str, seen: set[int]) -> None:
    """An object: its type, then
    - a function, class or method: its qualified name;
    - an object snapstate saves through an adapter (an SDK or HTTP client, a file):
      what its adapter saves (its configuration), credentials as a fixed marker;
    - an object with attributes (a dataclass, a plain class): its attributes;
    - anything else: its bytes through snapstate's pickler, which refuses what a
      snapshot could not save either (UnpicklableError: the argument is named)."""
    from ..resources import _secrets
    from ..resources._adapters import reducer_for
    from ..serializers import _pickler

    kind = type(value)
    out.append(f"{kind.__module__}.{kind.__qualname__}:")
    if isinstance(value, _secrets.Credential):
        out.append("<credential>")
        return
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, types.MethodType, type)):
        owner = getattr(value, "__self__", None)
        out.append(f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', '')}")
        if isinstance(value, types.MethodType):
            _canonical(owner, out, path, seen)
        return
    if id(value) in seen:
        out.append("<cycle>")
        return
    adapter = reducer_for(kind)
    if adapter is not None:
        seen.add(id(value))
        try:
            reduced = adapter(value)
        except pickle.PicklingError as exc:
            raise _pickler.UnpicklableError(path, value, exc) from None
        if reduced is not NotImplemented:  # NotImplemented: pickled as usual (below)
            _canonical(list(reduced[1:3]), out, path, seen)
            seen.discard(id(value))
            return
        seen.discard(id(value))
    attrs = getattr(value, "__dict__", None)
    if (
        isinstance(attrs, dict)
        and kind.__reduce_ex__ is object.__reduce_ex__
        and getattr(kind, "__getstate__", object.__getstate__) is object.__getstate__
    ):
        seen.add(id(value))
        state = dict(attrs)
        for cls in kind.__mro__:
            for name in getattr(cls, "__slots__", ()) or ():
                if (
                    isinstance(name, str)
                    and name not in ("__dict__", "__weakref__")
                    and hasattr(value, name)
                ):
                    state[name] = getattr(value, name)
        _canonical(state, out, path, seen)
        seen.discard(id(value))
        return
    with _secrets.digesting():
        out.append(
            hashlib.sha256(
                _pickler.dumps(value, roots=lambda: [(path, value)], digest=True)
            ).hexdigest()
        )


def args_digest(name: str, args: tuple[object, ...], kwargs: Mapping[str, object]) -> str:
    """The digest the ledger matches a re-executed call by. An argument snapstate cannot
    save cannot be digested either: refused naming it and the fix."""
    out = [name, "list["]  # the layout digests always had: list, then dict
    for i, value in enumerate(args):
        _digest_argument(name, f"argument {i + 1}", value, out)
    out.append("]")
    out.append("dict{")
    for k in sorted(kwargs, key=repr):
        _canonical(k, out)
        _digest_argument(name, f"argument {k!r}", kwargs[k], out)
    out.append("}")
    return hashlib.sha256("\x00".join(out).encode()).hexdigest()


def _digest_argument(name: str, label: str, value: object, out: list[str]) -> None:
    from ..serializers._pickler import UnpicklableError

    try:
        _canonical(value, out, label)
    except UnpicklableError as exc:
        fix = f" {exc.fix}" if exc.fix else ""
        raise TypeError(
            f"effect {name}: its {label} cannot be recorded in the ledger, which identifies "
            f"a call by its arguments: {exc}.{fix} Or do not pass it as an argument: let "
            "the effect function use it from a global or a closure."
        ) from None


_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 40


def args_repr(args: tuple[object, ...], kwargs: Mapping[str, object]) -> str:
    parts = [_SHORT.repr(a) for a in args] + [f"{k}={_SHORT.repr(v)}" for k, v in kwargs.items()]
    return ", ".join(parts)


# ------------------------------------------------------------------------ results
def seal(keys: KeyRing, value: object) -> bytes:
    """A result stored by value: pickled as a snapshot pickles it (through the resource
    adapters: an HTTP response's credentials sealed with the store's keys, never in
    clear), signed like a snapshot (HMAC-SHA256)."""
    from ..resources import _secrets
    from ..serializers import _pickler

    _secrets.bind(keys)
    data = _pickler.dumps(value)
    key = keys.current
    kid = key.key_id.encode()
    return bytes([len(kid)]) + kid + hmac.new(key.mac_key, data, hashlib.sha256).digest() + data


def unseal(keys: KeyRing, blob: bytes, where: str) -> Any:  # whatever was sealed
    n = blob[0]
    kid, mac, data = blob[1 : 1 + n].decode(), blob[1 + n : 33 + n], blob[33 + n :]
    key = keys.get(kid)
    if not hmac.compare_digest(hmac.new(key.mac_key, data, hashlib.sha256).digest(), mac):
        raise TamperedSnapshot(f"the recorded result of {where} fails its signature check")
    from ..resources import _secrets
    from ..serializers import _pickler

    _secrets.bind(keys)
    return _pickler.loads(data)


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
class _Spec(Generic[R]):
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


def _spec(
    fn: Callable[..., R],
    idempotency: str | None,
    lookup: Callable[..., object] | None,
    kind: str,
    retry: Retry | None,
    timeout_param: str | None = None,
    fencing_token: bool = False,
    requires: str | None = None,
    within: Callable[..., object] | None = None,
) -> _Spec[R]:
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
    return _Spec(
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
        spec = _spec(
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
                return cast(R, _call_async(spec, args, kwargs, None, async_wrapper))

            async_wrapper.__snapstate_effect__ = spec  # type: ignore[attr-defined]
            return _mark_coroutine_function(async_wrapper)

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
    spec = _spec(
        fn, idempotency, lookup, kind, retry, timeout_param, fencing_token, requires, within
    )
    if inspect.iscoroutinefunction(fn):  # to be awaited: runtime/_async.py
        return cast(R, _call_async(spec, args, kwargs, key, None))
    return _call(spec, args, kwargs, key)


# ------------------------------------------------------------------------ async effects
# An `async def` effect is awaited: its wrapper returns an await point
# (runtime/_async.py's EffectPoint). In a job, the point runs ledger_call() below in a
# greenlet of its own: Ledger.call records, sends and confirms exactly as for a plain
# effect, and where it sends it calls the spec's function, here a shim that hands the
# effect's coroutine to the awaiting task (await_in_task) and returns its outcome.
def _mark_coroutine_function(fn: Callable[P, R]) -> Callable[P, R]:
    mark = getattr(inspect, "markcoroutinefunction", None)  # 3.12+
    if mark is not None:
        return mark(fn)  # type: ignore[no-any-return]
    import asyncio.coroutines

    fn._is_coroutine = asyncio.coroutines._is_coroutine  # type: ignore[attr-defined]
    return fn


def _awaiting(fn: Callable[..., Any]) -> Callable[..., Any]:
    """fn (an async def) as a plain function the ledger calls: its coroutine runs in
    the awaiting task, and the call returns (or raises) its outcome."""
    from ._async import await_in_task

    @functools.wraps(fn)
    def shim(*args: Any, **kwargs: Any) -> Any:
        return await_in_task(fn(*args, **kwargs))

    return shim


def async_spec(spec: _Spec[R]) -> _Spec[R]:
    """The spec the ledger runs for an async effect (the same name and options)."""
    lookup = spec.lookup
    if lookup is not None and inspect.iscoroutinefunction(lookup):
        lookup = _awaiting(lookup)
    return replace(spec, fn=_awaiting(spec.fn), lookup=lookup)


def async_spec_of(
    effect_fn: Callable[..., Any], options: dict[str, Any] | None, site: str
) -> _Spec[Any]:
    """After a restore: the spec of an async effect a snapshot held unsent."""
    if options is not None:
        return _spec(effect_fn, **options)
    spec = getattr(effect_fn, "__snapstate_effect__", None)
    if not isinstance(spec, _Spec):
        raise RestoreError(
            f"the job was frozen before sending {effect_fn!r} at {site}, but it is no longer "
            "an @effect in the agent's code; restore the original source to resume this job"
        )
    return spec


def _call_async(
    spec: _Spec[R],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    explicit_key: str | None,
    declared: Callable[..., Any] | None,
) -> Any:  # an awaitable of the effect's result
    from ._async import EffectPoint

    frame = sys._getframe(2)
    site = f"{frame.f_code.co_filename}:{frame.f_lineno}"
    options = None if declared is not None else _options(spec)
    return EffectPoint(spec, args, kwargs, explicit_key, site, declared, options)


def ledger_call(
    job: Job,
    spec: _Spec[R],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    key: str | None,
    site: str,
) -> tuple[str, Any]:
    """In the await point's greenlet: the ledger's call of an async effect. ("done",
    result), or ("refused", seconds) when the provider refused it for now (the point
    waits, then calls the same action again)."""
    if spec.requires is not None:  # before anything is recorded or sent
        from ._approvals import check_scope

        check_scope(spec.name, spec.fn, spec.requires, spec.within, job, args, kwargs, key)
    before = job.ledger.actions()
    try:
        return ("done", job.ledger.call(async_spec(spec), args, kwargs, key, site))
    except StoreFailure as exc:
        job.store_failed(exc)  # the run stops here; the agent never sees it
        raise
    except _Refused as refused:
        job.ledger.set_actions(before)  # the same action is called again: same identity
        return ("refused", refused.seconds)


async def call_plain_async(spec: _Spec[R], args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
    """Plain Python (asyncio.run without a job): no ledger; a rate limit is waited out
    and the call sent again with the same key."""
    import asyncio

    if spec.requires is not None:
        from ._approvals import check_scope

        check_scope(spec.name, spec.fn, spec.requires, spec.within, None, args, kwargs, None)
    key, refusals = f"adhoc-{_uuid.uuid4().hex}", 0
    while True:
        try:
            pending: Any = _invoke(spec, args, kwargs, key)  # the effect's coroutine
            result: R = await pending
            return result
        except Exception as exc:
            seconds = _rate_limit(exc)
            if seconds is None:
                raise
        refusals += 1
        await asyncio.sleep(_wait_seconds(seconds, refusals))


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


def _current_job() -> Job | None:
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


def _call_site() -> str:
    frame = sys._getframe(3)
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


def _invoke(
    spec: _Spec[R],
    args: tuple[Any, ...],  # the caller's arguments: anything
    kwargs: dict[str, Any],
    key: str,
    *,
    timeout: float | None = None,
    token: int | None = None,
) -> R:
    args = tuple(_reveal(a) for a in args)
    kwargs = {k: _reveal(v) for k, v in kwargs.items()}
    if spec.idempotency == "key" or spec.lookup is not None:
        kwargs["idempotency_key"] = key
    if spec.timeout_param is not None and timeout is not None:
        given = kwargs.get(spec.timeout_param)
        kwargs[spec.timeout_param] = timeout if given is None else min(given, timeout)
    if spec.fencing_token:
        kwargs["fencing_token"] = token
    return spec.fn(*args, **kwargs)


def _lookup(spec: _Spec[R], key: str, token: int | None) -> Any:  # the provider's result
    assert spec.lookup is not None, "only an effect with a lookup is looked up"
    if spec.fencing_token:
        return spec.lookup(key, fencing_token=token)
    return spec.lookup(key)


def _call(
    spec: _Spec[R],
    args: tuple[Any, ...],  # the caller's arguments: anything
    kwargs: dict[str, Any],
    explicit_key: str | None,
    declared: Callable[..., R] | None = None,  # the @effect function (None: call_effect)
) -> R:
    job = _current_job()
    if spec.requires is not None:  # before anything is recorded or sent
        from ._approvals import check_scope

        check_scope(spec.name, spec.fn, spec.requires, spec.within, job, args, kwargs, explicit_key)
    if job is None:  # plain Python: no ledger
        return _call_plain(spec, args, kwargs)
    site = _call_site()
    call = {
        "effect": declared if declared is not None else spec.fn,
        "options": None if declared is not None else _options(spec),
        "args": args,
        "kwargs": kwargs,
        "key": explicit_key,
        "refusals": 0,
    }
    return _attempt(job, spec, call, site)


# ------------------------------------------------------------------------ rate limits
# An effect the provider refused for now (RateLimited, an HTTP 429) did not happen: its
# row is recorded not-committed (not counted as an attempt), and the task waits (a Wait
# of kind "rate-limit", runtime/_timers.py) with the call, as plain data: the effect
# (pickled by reference), its arguments and explicit key. Short waits are slept through
# in the process, long ones hibernate the job. Then the same logical action is called
# again: the ledger's ordinal was rolled back to before the refused call, so it finds
# its own row (same identity, same idempotency key; other arguments are a
# DivergenceError) and sends it again. After a restore at that wait, the poller's
# Ready(Then(...)) calls _resend() in the agent's task (Job._deliver). The functions
# between the agent's call and wait_point() are wait_api (not captured): the agent's
# call receives the effect's result either way.
class _Refused(BaseException):
    """The provider refused the call (a rate limit): raised from the ledger to _attempt."""

    def __init__(self, seconds: float | None, error: BaseException) -> None:
        super().__init__(seconds, error)
        self.seconds = seconds  # None: the provider named no wait
        self.error = error


def _rate_limit(exc: BaseException) -> float | None:
    """Seconds to wait when exc is a rate limit (resources/_ratelimit.py; NOT_GIVEN when
    the provider named none), else None."""
    from ..resources._ratelimit import retry_after

    return retry_after(exc, clock().time())


def _wait_seconds(seconds: float | None, refusals: int) -> float:
    """The wait asked for, or the default doubled at each refusal in a row."""
    from ..resources._ratelimit import DEFAULT_RETRY_AFTER, MAX_DEFAULT_RETRY_AFTER, NOT_GIVEN

    if seconds is not None and seconds != NOT_GIVEN:
        return seconds
    return min(DEFAULT_RETRY_AFTER * 2.0 ** min(refusals - 1, 30), MAX_DEFAULT_RETRY_AFTER)


def _options(spec: _Spec[Any]) -> dict[str, Any]:
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


def _call_plain(spec: _Spec[R], args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
    """Plain Python: no ledger; a rate limit is slept through (the clock) and the call
    sent again with the same key."""
    key, refusals = f"adhoc-{_uuid.uuid4().hex}", 0
    while True:
        try:
            return _invoke(spec, args, kwargs, key)
        except Exception as exc:
            seconds = _rate_limit(exc)
            if seconds is None:
                raise
        refusals += 1
        clock().sleep(_wait_seconds(seconds, refusals))


def _attempt(job: Job, spec: _Spec[R], call: dict[str, Any], site: str) -> R:
    """Send the call through the ledger; while the provider refuses it for now, wait
    (wait_point) and send the same action again. Returns the effect's result."""
    args, kwargs, key = call["args"], call["kwargs"], call["key"]
    while True:
        before = job.ledger.actions()
        try:
            return job.ledger.call(spec, args, kwargs, key, site)
        except StoreFailure as exc:
            job.store_failed(exc)  # the run stops here; the agent never sees it
            raise
        except _Refused as refused:
            job.ledger.set_actions(before)  # the same action is called again: same identity
            seconds = refused.seconds
        from . import _timers  # registers the "rate-limit" poller and these wait_api codes
        from ._job import wait_point

        refusals = call["refusals"] + 1
        call = dict(call, refusals=refusals)
        wait = _wait_seconds(seconds, refusals)
        if job._async is not None:  # a plain effect called by an async agent: it holds
            clock().sleep(wait)  # the loop while it runs, and while it waits
            continue
        try:
            wait_point(_timers.rate_limit_wait(spec.name, call, wait, seconds is None, site))
        except SnapshotError as exc:  # could not hibernate: the call fails, its row kept
            job.ledger.set_actions(before + 1)  # the refused call keeps its identity
            raise SnapshotError(
                f"effect {spec.name} at {site} was rate limited (to be sent again in "
                f"{wait:g}s) and the job could not hibernate: {exc}"
            ) from None


def _resend(call: dict[str, Any], site: str) -> Any:  # the effect's result
    """After a restore at a rate-limit wait: call the same action again, in the agent's
    task (Job._deliver runs the poller's Then)."""
    job = _current_job()
    assert job is not None, "a restored wait is delivered in its job"
    effect_fn, options = call["effect"], call["options"]
    if options is None:
        spec = getattr(effect_fn, "__snapstate_effect__", None)
        if not isinstance(spec, _Spec):
            raise RestoreError(
                f"the job waited at {site} to send {effect_fn!r} again after a rate limit, "
                "but it is no longer an @effect in the agent's code; restore the original "
                "source to resume this job"
            )
    else:
        spec = _spec(effect_fn, **options)
    return _attempt(job, spec, call, site)


def wait_api_functions() -> tuple[Callable[..., Any], ...]:
    """The functions between the agent's effect call and wait_point() at a rate-limit
    wait (runtime/_timers.py marks them wait_api)."""
    return (effect(_noop), call_effect, _call, _attempt, _resend)


def _noop() -> None:
    return None


# ------------------------------------------------------------------------ values
def _value(kind: str, produce: Callable[[], T]) -> T:
    job = _current_job()
    if job is None:
        return produce()
    try:
        return job.ledger.value(kind, produce, _call_site())
    except StoreFailure as exc:
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


# ------------------------------------------------------------------------ recovery
class Action(enum.Enum):
    """What re-executed code does with the ledger row it finds for an effect."""

    SERVE = "return the recorded result, or raise the recorded error; send nothing"
    SEND = "send again, the new attempt recorded first (the row's note kept)"
    RETRY = "send again with the same key: 'retried with the same idempotency key'"
    RETRY_FAILED = "send again with the same key: 'retried ... after a failure'"
    LOOKUP = "ask lookup(key), counted as reconciled: found -> confirmed; else send again"
    LOOKUP_FAILED = "ask lookup(key): found -> confirmed; not found -> send again"
    AMBIGUOUS = "record it ambiguous, count it; the job parks until `snaprun reconcile`"
    PARK = "the job parks until `snaprun reconcile`"
    END_REPLAY = "a replay sends nothing: it ends here"


_A, _S = Action, EffectState
# fmt: off
_GRID = {  # one row per state, one column per Recovery, in its order
    #                 REPLAY         REPEAT    KEY              LOOKUP            NONE
    _S.CONFIRMED:     (_A.SERVE,      _A.SERVE, _A.SERVE,        _A.SERVE,         _A.SERVE),
    _S.FAILED:        (_A.SERVE,      _A.SEND,  _A.RETRY_FAILED, _A.LOOKUP_FAILED, _A.SERVE),
    _S.DISPATCHED:    (_A.END_REPLAY, _A.SEND,  _A.RETRY,        _A.LOOKUP,        _A.AMBIGUOUS),
    _S.AMBIGUOUS:     (_A.END_REPLAY, _A.SEND,  _A.PARK,         _A.PARK,          _A.PARK),
    _S.NOT_COMMITTED: (_A.END_REPLAY, _A.SEND,  _A.SEND,         _A.SEND,          _A.SEND),
}
# fmt: on
RECOVERY: Final[Mapping[tuple[EffectState, Recovery], Action]] = {
    (state, recovery): action
    for state, actions in _GRID.items()
    for recovery, action in zip(Recovery, actions, strict=True)
}
"""What re-executed code does with the ledger row it finds for an effect, by the row's
state and the effect's recovery: the grid above is the whole state machine. Every state
is persisted before the next step:

    dispatched --response--> confirmed (result) | failed (error)
        | crash / timeout / lost response: found dispatched on re-execution
        v
        REPEAT (kind="read")                  --> sent again
        KEY (the provider honours keys)       --> sent again with the same key
        LOOKUP (the provider can be queried)  --> confirmed if found, else sent again
        NONE (neither)                        --> ambiguous: the job parks until
                                                  `snaprun reconcile` makes it confirmed
                                                  or not-committed (then sent again)

A confirmed effect is never sent again: re-executed code gets the recorded result. A
failure is no proof that nothing happened (a connection can drop after the provider
acted): it is sent again only where the provider makes that safe; otherwise the
recorded error is raised again (`snaprun reconcile --not-committed` allows a new
attempt). A replay sends nothing.

Not-committed means: the action did not happen, so it is sent again whatever the effect
declares. A row gets there by `snaprun reconcile --not-committed`, or by a rate limit
(RateLimited, an HTTP 429): the provider refused the attempt, which is recorded
not-committed (note "rate limited ...", the attempt not counted) before the task waits;
after the wait (or a crash during it) the same call finds this row and sends it again
with the same key."""


# ------------------------------------------------------------------------ the ledger
class Ledger:
    """A job's view of its effect ledger while it runs."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.ordinal = 0  # restored from the snapshot
        self.pending: list[EffectRow] = []  # value records not yet durable
        self.replay = False
        self.restored = False  # served calls count as "served after restore"
        self._incarnation: str | None = None
        self.deadline: float | None = None  # the lease deadline of the last dispatch
        self.sending: float | None = None  # while an effect is sent: its request's deadline
        # Spawned tasks (runtime/_tasks.py): key -> "<task>#<n>" (fault points), and the
        # last catalog ordinal allocated to their rows.
        self._labels: dict[str, str] = {}
        self._task_next: int | None = None
        self._last: dict[str, int] = {}  # task id -> catalog ordinal of its latest row

    @property
    def catalog(self) -> Catalog:
        return self.job.home.catalog

    def identity_key(self, ordinal: int, explicit: str | None) -> str:
        """Derived from the job (its id and creation time: an id reused after a prune is
        another job) and the action's identity (its ordinal, or the explicit key)."""
        action = f"key:{explicit}" if explicit is not None else f"ordinal:{ordinal}"
        return self._key(action)

    def task_key(self, identity: str) -> str:
        """The key of a spawned task's n-th action, identity "<task id>#<n>"."""
        return self._key(f"task:{identity}")

    def _key(self, action: str) -> str:
        if self._incarnation is None:
            self._incarnation = repr(self.catalog.get_job(self.job.job_id).created)
        ident = f"{self.job.job_id}\x00{self._incarnation}\x00{action}"
        return "ss-" + hashlib.sha256(ident.encode()).hexdigest()[:40]

    def flush(self) -> None:
        """Make buffered value records durable (before any effect or snapshot)."""
        if self.pending and not self.replay:
            rows, self.pending = self.pending, []
            self.catalog.record_effects(rows, epoch=self.job.epoch)

    # -------------------------------------------------------------- tasks
    def _spawned(self) -> _TaskState | _TaskInfo | None:
        """The spawned task calling (None for the main task: ordinals as before)."""
        runner = self.job._async
        if runner is not None:  # an async job: the asyncio task calling
            return runner.ledger_task()
        scheduler = self.job._scheduler
        return scheduler.spawned_task() if scheduler is not None and scheduler.active else None

    def _task_ordinal(self) -> int:
        """A catalog ordinal for a new row of a spawned task: max+1 above the base (this
        runner holds the lease, so no other process allocates meanwhile)."""
        if self._task_next is None:
            rows = self.catalog.effects(self.job.job_id)
            self._task_next = max(
                [r.ordinal for r in [*rows, *self.pending] if r.ordinal >= TASK_ORDINAL_BASE],
                default=TASK_ORDINAL_BASE - 1,
            )
        self._task_next += 1
        return self._task_next

    def actions(self) -> int:
        """How many actions the calling task has taken (main: the job's ordinal counter;
        a spawned task: its own): put back to call the same action again."""
        task = self._spawned()
        return self.ordinal if task is None else task.effects

    def set_actions(self, count: int) -> None:
        task = self._spawned()
        if task is None:
            self.ordinal = count
        else:
            task.effects = count

    def last_ordinal(self) -> int:
        """The catalog ordinal of the calling task's latest value or effect row (in main,
        the job's counter): stable when the code is re-executed (runtime/_approvals.py
        names an approval by it)."""
        task = self._spawned()
        return self.ordinal if task is None else self._last.get(task.id, 0)

    def next_row(self, explicit: str | None) -> EffectRow | None:
        """The row the calling task's next effect call will find (by its explicit key,
        else by its identity), if the ledger holds it."""
        task = self._spawned()
        if task is None:
            ordinal = self.ordinal + 1
            if explicit is not None:
                return self.catalog.effect_by_key(
                    self.job.job_id, self.identity_key(ordinal, explicit)
                )
            return self.catalog.effect(self.job.job_id, ordinal)
        key = (
            self.identity_key(0, explicit)
            if explicit is not None
            else self.task_key(f"{task.id}#{task.effects + 1}")
        )
        return self.catalog.effect_by_key(self.job.job_id, key)

    def _point(self, row: EffectRow) -> int | str:
        """How fault points name an effect: its ordinal, or "<task>#<n>" in a task."""
        return self._labels.get(row.key, row.ordinal)

    # -------------------------------------------------------------- values
    def value(self, kind: str, produce: Callable[[], T], call_site: str) -> T:
        task = self._spawned()
        key = ""
        if task is None:
            self.ordinal += 1
            ordinal = self.ordinal
            row = self.catalog.effect(self.job.job_id, ordinal)
            if row is None:
                row = next((r for r in self.pending if r.ordinal == ordinal), None)
        else:  # a spawned task's n-th action: looked up by its key
            task.effects += 1
            key = self.task_key(f"{task.id}#{task.effects}")
            call_site = f"{call_site} (task {task.id}#{task.effects})"  # `snaprun effects`
            row = self.catalog.effect_by_key(self.job.job_id, key)
            if row is None:
                row = next((r for r in self.pending if r.key == key), None)
            ordinal = row.ordinal if row is not None else 0
        if task is not None:
            self._last[task.id] = ordinal  # 0 until allocated below
        if row is not None:
            self._check(row, f"snapstate.{kind}", "", "", call_site)
            assert row.result is not None, "a value row always holds its sealed value"
            recorded: T = unseal(self.job.home.keys, row.result, call_site)
            return recorded
        if self.replay:
            self.job.end_replay(
                f"the recorded history ends before snapstate.{kind}() at {call_site}"
            )
        value = produce()
        t = time.time()
        if task is not None:
            ordinal = self._last[task.id] = self._task_ordinal()
        self.pending.append(
            EffectRow(
                job_id=self.job.job_id,
                ordinal=ordinal,
                key=key,
                name=f"snapstate.{kind}",
                call_site=call_site,
                args_digest=args_digest(f"snapstate.{kind}", (), {}),
                args_repr="",
                kind=EffectKind.VALUE,
                state=EffectState.CONFIRMED,
                result=seal(self.job.home.keys, value),
                attempts=1,
                created=t,
                updated=t,
            )
        )
        return value

    # -------------------------------------------------------------- effects
    def _check(self, row: EffectRow, name: str, digest: str, shown: str, call_site: str) -> None:
        expected = args_digest(name, (), {}) if row.kind == EffectKind.VALUE else digest
        if (
            row.name != name
            or (digest and row.args_digest != expected)
            or (row.kind == EffectKind.VALUE and row.args_digest != expected)
        ):
            raise DivergenceError(
                f"effect {row.ordinal} at {call_site} diverged from the ledger: it recorded "
                f"{row.name}({row.args_repr}) at {row.call_site}, and the re-executed code "
                f"now calls {name}({shown}). Nothing was dispatched. Code between a snapshot "
                "and a crash must make the same calls; use snapstate.now()/random()/uuid4() "
                "for values that change between runs."
            )

    def call(
        self,
        spec: _Spec[R],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        explicit: str | None,
        call_site: str,
    ) -> R:
        task = self._spawned()
        point: int | str
        if task is None:
            self.ordinal += 1
            ordinal = point = self.ordinal
            key = self.identity_key(ordinal, explicit)
        else:  # a spawned task's n-th action: its own counter, looked up by key
            task.effects += 1
            point = f"{task.id}#{task.effects}"
            key = self.identity_key(0, explicit) if explicit is not None else self.task_key(point)
            self._labels[key] = point
            call_site = f"{call_site} (task {point})"  # shown by `snaprun effects`
            ordinal = 0  # allocated when the row is first recorded
        self._bind_agent_modules()
        digest = args_digest(spec.name, args, kwargs)
        shown = args_repr(args, kwargs)
        # An explicit key names one logical action wherever it is called from.
        if task is not None:
            row = self.catalog.effect_by_key(self.job.job_id, key)
            if row is not None:
                self._last[task.id] = row.ordinal
        else:
            row = (
                self.catalog.effect_by_key(self.job.job_id, key) if explicit is not None else None
            ) or self.catalog.effect(self.job.job_id, ordinal)
        if row is not None:
            self._check(row, spec.name, digest, shown, call_site)
            return self._recover(spec, row, args, kwargs, call_site)
        if self.replay:
            self.job.end_replay(
                f"the recorded history ends before effect {point} ({spec.name} at {call_site})"
            )
        if task is not None:
            ordinal = self._last[task.id] = self._task_ordinal()
        t = time.time()
        row = EffectRow(
            job_id=self.job.job_id,
            ordinal=ordinal,
            key=key,
            name=spec.name,
            call_site=call_site,
            args_digest=digest,
            args_repr=shown,
            kind=spec.kind,
            state=EffectState.DISPATCHED,
            attempts=1,
            created=t,
            updated=t,
        )
        fault_point("effect-before-prepare", point)
        try:
            self.flush()
        except StaleWriter as exc:
            self.job.fenced(exc)
        self._fence(row, replace=False)
        self.job.progressed()
        fault_point("effect-after-prepare", point)
        return self._dispatch(spec, row, args, kwargs)

    def _bind_agent_modules(self) -> None:
        """Arguments are digested (and results pickled) as a snapshot pickles them: the
        agent's module objects by value, other modules' by reference. Bound here too, as
        a resumed process has taken no snapshot yet when it re-executes a call."""
        from ..serializers import _refs
        from . import _agent

        _refs.bind(_agent.agent_modules(self.job.entry))

    def _redispatch(
        self, spec: _Spec[R], row: EffectRow, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> R:
        """Send again after a restart: the new attempt is durable before it is sent."""
        self._fence(row, replace=True)
        self.job.progressed()
        return self._dispatch(spec, row, args, kwargs)

    # -------------------------------------------------------------- fencing
    def _fence(self, row: EffectRow, *, replace: bool) -> None:
        """The dispatch transaction: records the row (state dispatched) only while this
        runner's epoch holds the lease and its deadline is more than dispatch_margin
        away, renewing it; otherwise the run stops here (StaleWriter), nothing sent."""
        assert self.job.lease is not None, "a running job holds its lease"
        ttl = self.job.lease.ttl
        try:
            self.deadline = self.catalog.record_effects(
                [row], epoch=self.job.epoch, replace=replace, ttl=ttl, margin=dispatch_margin(ttl)
            )
        except StaleWriter as exc:
            self.job.fenced(exc)

    def _send(
        self, spec: _Spec[R], row: EffectRow, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> R:
        """One attempt. Checked in-process right before the call: the deadline recorded
        by the dispatch transaction (minus send_guard) has not passed, e.g. because the
        process was paused since; otherwise nothing is sent and the run stops. The
        request gets what is left as its timeout (timeout_param, effect_time_left())."""
        fault_point("effect-before-send", self._point(row))
        assert self.deadline is not None and self.job.lease is not None, "sent unfenced"
        ends = self.deadline - send_guard(self.job.lease.ttl)
        left = ends - time.time()
        if left <= 0:
            self.job.fenced(
                StaleWriter(
                    f"job {self.job.job_id}: effect {row.ordinal} ({row.name}) was not sent: the "
                    f"lease deadline recorded when it was dispatched passed {-left:.1f}s ago (the "
                    "runner was paused between recording and sending it), so another runner may "
                    "have taken the job over. This runner stops; nothing was sent."
                )
            )
        scheduler = self.job._scheduler
        if scheduler is not None and scheduler.active:  # several tasks: on the pool
            key, token = row.key, self.job.epoch
            return scheduler.run_effect(
                ends, lambda: _invoke(spec, args, kwargs, key, timeout=left, token=token)
            )
        self.sending = ends
        try:
            return _invoke(spec, args, kwargs, row.key, timeout=left, token=self.job.epoch)
        finally:
            self.sending = None

    def _dispatch(
        self, spec: _Spec[R], row: EffectRow, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> R:
        attempt, delay = row.attempts, spec.retry.backoff if spec.retry else 0.0
        while True:
            try:
                result = self._send(spec, row, args, kwargs)
            except Exception as exc:
                limit = _rate_limit(exc)  # the provider refused: nothing happened
                if limit is not None:
                    self._refused(row, attempt, limit, exc)
                retry = spec.retry
                retryable = (
                    retry is not None
                    and isinstance(exc, retry.on)
                    and (
                        spec.idempotency == "key"
                        or spec.lookup is not None
                        or spec.kind == EffectKind.READ
                    )
                )
                if retry is not None and retryable and attempt < retry.attempts:
                    attempt += 1
                    self._backoff(min(delay, retry.max_backoff))
                    delay *= 2
                    if spec.lookup is not None and spec.idempotency != "key":
                        found: R | None = _lookup(spec, row.key, self.job.epoch)
                        if found is not None:
                            return self._confirm(
                                row, found, attempt, f"found by lookup after {type(exc).__name__}"
                            )
                    row = _again(row)  # each attempt is fenced and recorded first
                    self._fence(row, replace=True)
                    continue
                self._record(row, EffectState.FAILED, exc, attempt, f"{type(exc).__name__}: {exc}")
                raise
            fault_point("effect-after-send", self._point(row))
            return self._confirm(row, result, attempt, row.note)

    def _backoff(self, seconds: float) -> None:
        """Wait before a retry: in an async effect's greenlet, an asyncio.sleep() run by
        the awaiting task (the job's other tasks go on); otherwise a plain sleep."""
        runner = self.job._async
        if runner is not None and greenlet.getcurrent() in runner.effect_glets:
            import asyncio

            from ._async import await_in_task

            await_in_task(asyncio.sleep(seconds))
            return
        time.sleep(seconds)

    def _refused(self, row: EffectRow, attempt: int, seconds: float, exc: Exception) -> NoReturn:
        """The provider refused the call for now (a rate limit): the action did not
        happen. The row is recorded not-committed, the refused attempt not counted (a
        Retry policy's budget is kept); _attempt waits, then calls the same action again,
        which RECOVERY sends again with the same key."""
        from ..resources._ratelimit import NOT_GIVEN

        asked = "no Retry-After" if seconds == NOT_GIVEN else f"retry after {seconds:g}s"
        note = f"rate limited ({type(exc).__name__}, {asked}): not performed; sent again after the wait"
        self._record(row, EffectState.NOT_COMMITTED, None, attempt - 1, note)
        fault_point("effect-rate-limited", row.ordinal)
        raise _Refused(None if seconds == NOT_GIVEN else seconds, exc)

    def _confirm(self, row: EffectRow, result: R, attempts: int, note: str) -> R:
        self._record(row, EffectState.CONFIRMED, result, attempts, note)
        fault_point("effect-after-confirm", self._point(row))
        return result

    def _record(
        self, row: EffectRow, state: EffectState, value: object, attempts: int, note: str
    ) -> None:
        sealed: bytes | None
        try:
            sealed = seal(self.job.home.keys, value)
        except Exception as exc:  # an unpicklable result: keep the fact, not the value
            sealed, note = None, f"result not stored ({type(exc).__name__}: {exc})"
        outcome = replace(
            row, state=state, result=sealed, attempts=attempts, updated=time.time(), note=note
        )
        try:
            self.catalog.record_effects([outcome], epoch=self.job.epoch, replace=True)
        except StaleWriter as exc:
            # Taken over while the call was out: the outcome is the new runner's to find
            # out; this runner stops here, no agent code runs after it.
            self.job.fenced(exc)

    def _served(self, row: EffectRow, call_site: str) -> Any:  # the recorded result
        if self.restored and not self.replay:
            self.catalog.bump_metric(self.job.job_id, "served_from_ledger")
        if row.result is None:
            raise RestoreError(
                f"effect {row.ordinal} at {call_site} happened but its result "
                f"could not be stored ({row.note}); it cannot be replayed"
            )
        value = unseal(self.job.home.keys, row.result, f"effect {row.ordinal}")
        if row.state == EffectState.FAILED:
            raise value
        return value

    def _recover(
        self,
        spec: _Spec[R],
        row: EffectRow,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        call_site: str,
    ) -> R:
        """Re-executed code found this effect's row: RECOVERY says what happens."""
        action = RECOVERY[row.state, Recovery.REPLAY if self.replay else spec.recovery]
        match action:
            case Action.SERVE:
                served: R = self._served(row, call_site)
                return served
            case Action.SEND:
                return self._redispatch(spec, _again(row), args, kwargs)
            case Action.RETRY:
                note = "retried with the same idempotency key"
                return self._redispatch(spec, _again(row, note), args, kwargs)
            case Action.RETRY_FAILED:
                note = "retried with the same key after a failure"
                return self._redispatch(spec, _again(row, note), args, kwargs)
            case Action.LOOKUP | Action.LOOKUP_FAILED:
                found: R | None = _lookup(spec, row.key, self.job.epoch)
                if action is Action.LOOKUP:
                    self.catalog.bump_metric(self.job.job_id, "reconciled")
                if found is not None:
                    after = "a restart" if action is Action.LOOKUP else "a failure"
                    return self._confirm(row, found, row.attempts, f"found by lookup after {after}")
                note = "lookup: not found; dispatched again"
                return self._redispatch(spec, _again(row, note), args, kwargs)
            case Action.AMBIGUOUS:
                note = "outcome unknown after a restart"
                self._record(row, EffectState.AMBIGUOUS, None, row.attempts, note)
                self.catalog.bump_metric(self.job.job_id, "ambiguous")
                self.job.park(row, call_site)
            case Action.PARK:
                self.job.park(row, call_site)
            case Action.END_REPLAY:
                self.job.end_replay(
                    f"effect {row.ordinal} ({row.name} at {call_site}) has no "
                    f"recorded outcome (state {row.state})"
                )
        raise AssertionError("not reached: the job stopped this run")


def _again(row: EffectRow, note: str = "") -> EffectRow:
    """The row of one more attempt, in state dispatched: recorded before it is sent,
    so a crash during a second attempt is seen as an unknown outcome again."""
    return replace(
        row,
        state=EffectState.DISPATCHED,
        result=None,
        attempts=row.attempts + 1,
        updated=time.time(),
        note=note or row.note,
    )


def explain_ambiguous(job_id: str, row: EffectRow) -> str:
    return (
        f"job {job_id} parked: effect {row.ordinal} ({row.name}({row.args_repr}) at "
        f"{row.call_site}, idempotency key {row.key}) was dispatched but its outcome is "
        "unknown: the process stopped before the response was recorded, and the provider "
        "honours no idempotency key and offers no lookup. Check with the provider whether "
        f"it happened, then run `snaprun reconcile {job_id} {row.ordinal} --committed "
        f"[--result JSON]` or `snaprun reconcile {job_id} {row.ordinal} --not-committed`, "
        f"and `snaprun resume {job_id}`."
    )
