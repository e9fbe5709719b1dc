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

snapstate.now(), random() and uuid4() are recorded in the same ledger, so code
between a snapshot and a crash re-executes identically; their rows are batched into
the next durable write.
"""

from __future__ import annotations

import datetime as _datetime
import functools
import hashlib
import hmac
import os
import pickle
import random as _random
import reprlib
import sys
import threading
import time
import types
import uuid as _uuid
from dataclasses import dataclass

import greenlet

from ..serializers._store import EffectRow
from ._errors import (
    DivergenceError,
    EffectOutsideJob,
    RestoreError,
    SecretUnavailable,
    StaleWriter,
    StoreFailure,
    TamperedSnapshot,
)
from ._faults import fault_point
from ._lease import dispatch_margin, send_guard

__all__ = ["effect", "call_effect", "Retry", "Secret", "now", "random", "uuid4", "effect_time_left"]

DISPATCHED, CONFIRMED, FAILED, AMBIGUOUS, NOT_COMMITTED = (
    "dispatched",
    "confirmed",
    "failed",
    "ambiguous",
    "not-committed",
)


# ------------------------------------------------------------------------ secrets
class Secret:
    """A value that must never be written down: not in a snapshot, not in the ledger.

    Secret(value, name="api key") is recorded as its name only; after a restore its
    value is gone (SecretUnavailable). Secret.from_env("API_KEY") is recorded as the
    variable's name and re-read from the environment after a restore."""

    __slots__ = ("name", "_value", "_env")

    def __init__(self, value, *, name: str = "secret"):
        self.name, self._value, self._env = name, value, None

    @classmethod
    def from_env(cls, variable: str) -> Secret:
        try:
            value = os.environ[variable]
        except KeyError:
            raise SecretUnavailable(f"environment variable {variable} is not set") from None
        secret = cls(value, name=variable)
        secret._env = variable
        return secret

    def reveal(self):
        if self._value is _GONE:
            raise SecretUnavailable(
                f"secret {self.name!r} was not saved in the snapshot (secrets never are); "
                "obtain it again after a restore, e.g. with Secret.from_env(...)"
            )
        return self._value

    def __repr__(self) -> str:
        return f"Secret({self.name!r})"

    def __reduce__(self):
        if self._env is not None:
            return (Secret.from_env, (self._env,))
        return (_redacted, (self.name,))


_GONE = object()


def _redacted(name: str) -> Secret:
    secret = Secret(None, name=name)
    secret._value = _GONE
    return secret


def _reveal(value):
    if isinstance(value, Secret):
        return value.reveal()
    return value


# ------------------------------------------------------------------------ digests
def _canonical(value, out: list, path: str = "value", _seen: set | None = None) -> None:
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
            sub: list = []
            _canonical(item, sub, path, _seen)
            parts.append("".join(sub))
        out.append(f"{type(value).__name__}{{{','.join(sorted(parts))}}}")
    else:
        _canonical_object(value, out, path, set() if _seen is None else _seen)


def _canonical_object(value, out: list, path: str, seen: set) -> None:
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
        _canonical(list(reduced[1:3]), out, path, seen)
        seen.discard(id(value))
        return
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


def args_digest(name: str, args: tuple, kwargs: dict) -> str:
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


def _digest_argument(name: str, label: str, value, out: list) -> None:
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


def args_repr(args: tuple, kwargs: dict) -> str:
    parts = [_SHORT.repr(a) for a in args] + [f"{k}={_SHORT.repr(v)}" for k, v in kwargs.items()]
    return ", ".join(parts)


# ------------------------------------------------------------------------ results
def seal(keys, value) -> bytes:
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


def unseal(keys, blob: bytes, where: str):
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
    on: tuple = (ConnectionError, TimeoutError)


@dataclass(frozen=True)
class _Spec:
    fn: object
    name: str
    idempotency: str | None
    lookup: object
    kind: str
    retry: Retry | None
    timeout_param: str | None = None
    fencing_token: bool = False


def _spec(fn, idempotency, lookup, kind, retry, timeout_param=None, fencing_token=False) -> _Spec:
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
    name = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
    return _Spec(fn, name, idempotency, lookup, kind, retry, timeout_param, fencing_token)


def effect(
    fn=None,
    *,
    idempotency: str | None = None,
    lookup=None,
    kind: str = "write",
    retry: Retry | None = None,
    timeout_param: str | None = None,
    fencing_token: bool = False,
):
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
    refuse a stale runner's late request.
    """

    def decorate(function):
        spec = _spec(function, idempotency, lookup, kind, retry, timeout_param, fencing_token)

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            return _call(spec, args, kwargs, None)

        wrapper.__snapstate_effect__ = spec
        return wrapper

    return decorate(fn) if fn is not None else decorate


def call_effect(
    fn,
    *args,
    key: str | None = None,
    idempotency: str | None = None,
    lookup=None,
    kind: str = "write",
    retry: Retry | None = None,
    timeout_param: str | None = None,
    fencing_token: bool = False,
    **kwargs,
):
    """Run fn(*args, **kwargs) as an effect, for functions you do not own. `key` names
    the logical action explicitly (its idempotency key derives from it); e.g.
    call_effect(requests.post, url, json=body, timeout_param="timeout")."""
    return _call(
        _spec(fn, idempotency, lookup, kind, retry, timeout_param, fencing_token), args, kwargs, key
    )


def effect_time_left() -> float | None:
    """Seconds the request of the effect being sent may still take: it must end before
    the lease deadline recorded when the effect was dispatched (after it, another
    runner may take the job over and send it again). Pass it as the request's timeout.
    None outside an effect sent by a job (plain Python, or between effects)."""
    from . import _job

    job = _job._ACTIVE
    if job is None or job.ledger.sending is None:
        return None
    return max(0.0, job.ledger.sending - time.time())


def _current_job():
    """The job whose agent is running here; None in plain Python. While a job runs,
    a call from another thread or greenlet is refused: the ledger could not record it,
    and a restore would send it again."""
    from . import _job

    job = _job._ACTIVE
    if job is None:
        return None
    if greenlet.getcurrent() is not job._agent:
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
    spec: _Spec, args, kwargs, key: str, *, timeout: float | None = None, token: int | None = None
):
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


def _lookup(spec: _Spec, key: str, token: int | None):
    if spec.fencing_token:
        return spec.lookup(key, fencing_token=token)
    return spec.lookup(key)


def _call(spec: _Spec, args: tuple, kwargs: dict, explicit_key: str | None):
    job = _current_job()
    if job is None:  # plain Python: no ledger
        return _invoke(spec, args, kwargs, f"adhoc-{_uuid.uuid4().hex}")
    try:
        return job.ledger.call(spec, args, kwargs, explicit_key, _call_site())
    except StoreFailure as exc:
        job.store_failed(exc)  # the run stops here; the agent never sees it
        raise


# ------------------------------------------------------------------------ values
def _value(kind: str, produce):
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
    return _value("now", lambda: _datetime.datetime.now(_datetime.UTC))


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


# ------------------------------------------------------------------------ the ledger
class Ledger:
    """A job's view of its effect ledger while it runs."""

    def __init__(self, job):
        self.job = job
        self.ordinal = 0  # restored from the snapshot
        self.pending: list[EffectRow] = []  # value records not yet durable
        self.replay = False
        self.restored = False  # served calls count as "served after restore"
        self._incarnation: str | None = None
        self.deadline: float | None = None  # the lease deadline of the last dispatch
        self.sending: float | None = None  # while an effect is sent: its request's deadline

    @property
    def catalog(self):
        return self.job.home.catalog

    def identity_key(self, ordinal: int, explicit: str | None) -> str:
        """Derived from the job (its id and creation time: an id reused after a prune is
        another job) and the action's identity (its ordinal, or the explicit key)."""
        if self._incarnation is None:
            self._incarnation = repr(self.catalog.get_job(self.job.job_id).created)
        action = f"key:{explicit}" if explicit is not None else f"ordinal:{ordinal}"
        ident = f"{self.job.job_id}\x00{self._incarnation}\x00{action}"
        return "ss-" + hashlib.sha256(ident.encode()).hexdigest()[:40]

    def flush(self) -> None:
        """Make buffered value records durable (before any effect or snapshot)."""
        if self.pending and not self.replay:
            rows, self.pending = self.pending, []
            self.catalog.record_effects(rows, epoch=self.job.epoch)

    # -------------------------------------------------------------- values
    def value(self, kind: str, produce, call_site: str):
        self.ordinal += 1
        ordinal = self.ordinal
        row = self.catalog.effect(self.job.job_id, ordinal)
        if row is None:
            row = next((r for r in self.pending if r.ordinal == ordinal), None)
        if row is not None:
            self._check(row, f"snapstate.{kind}", "", "", call_site)
            return unseal(self.job.home.keys, row.result, call_site)
        if self.replay:
            self.job.end_replay(
                f"the recorded history ends before snapstate.{kind}() at {call_site}"
            )
        value = produce()
        t = time.time()
        self.pending.append(
            EffectRow(
                self.job.job_id,
                ordinal,
                "",
                f"snapstate.{kind}",
                call_site,
                args_digest(f"snapstate.{kind}", (), {}),
                "",
                "value",
                CONFIRMED,
                seal(self.job.home.keys, value),
                None,
                1,
                t,
                t,
                "",
            )
        )
        return value

    # -------------------------------------------------------------- effects
    def _check(self, row: EffectRow, name: str, digest: str, shown: str, call_site: str):
        expected = args_digest(name, (), {}) if row.kind == "value" else digest
        if (
            row.name != name
            or (digest and row.args_digest != expected)
            or (row.kind == "value" and row.args_digest != expected)
        ):
            raise DivergenceError(
                f"effect {row.ordinal} at {call_site} diverged from the ledger: it recorded "
                f"{row.name}({row.args_repr}) at {row.call_site}, and the re-executed code "
                f"now calls {name}({shown}). Nothing was dispatched. Code between a snapshot "
                "and a crash must make the same calls; use snapstate.now()/random()/uuid4() "
                "for values that change between runs."
            )

    def call(self, spec: _Spec, args: tuple, kwargs: dict, explicit: str | None, call_site: str):
        self.ordinal += 1
        ordinal = self.ordinal
        key = self.identity_key(ordinal, explicit)
        self._bind_agent_modules()
        digest = args_digest(spec.name, args, kwargs)
        shown = args_repr(args, kwargs)
        # An explicit key names one logical action wherever it is called from.
        row = (
            self.catalog.effect_by_key(self.job.job_id, key) if explicit is not None else None
        ) or self.catalog.effect(self.job.job_id, ordinal)
        if row is not None:
            self._check(row, spec.name, digest, shown, call_site)
            return self._recover(spec, row, args, kwargs, call_site)
        if self.replay:
            self.job.end_replay(
                f"the recorded history ends before effect {ordinal} ({spec.name} at {call_site})"
            )
        t = time.time()
        row = EffectRow(
            self.job.job_id,
            ordinal,
            key,
            spec.name,
            call_site,
            digest,
            shown,
            spec.kind,
            DISPATCHED,
            None,
            None,
            1,
            t,
            t,
            "",
        )
        fault_point("effect-before-prepare", ordinal)
        try:
            self.flush()
        except StaleWriter as exc:
            self.job.fenced(exc)
        self._fence(row, replace=False)
        self.job.progressed()
        fault_point("effect-after-prepare", ordinal)
        return self._dispatch(spec, row, args, kwargs)

    def _bind_agent_modules(self) -> None:
        """Arguments are digested (and results pickled) as a snapshot pickles them: the
        agent's module objects by value, other modules' by reference. Bound here too, as
        a resumed process has taken no snapshot yet when it re-executes a call."""
        from ..serializers import _refs
        from . import _agent

        _refs.bind(_agent.agent_modules(self.job.entry))

    def _redispatch(self, spec: _Spec, row: EffectRow, args, kwargs):
        """Send again after a restart: the new attempt is durable before it is sent."""
        self._fence(row, replace=True)
        self.job.progressed()
        return self._dispatch(spec, row, args, kwargs)

    # -------------------------------------------------------------- fencing
    def _fence(self, row: EffectRow, *, replace: bool) -> None:
        """The dispatch transaction: records the row (state dispatched) only while this
        runner's epoch holds the lease and its deadline is more than dispatch_margin
        away, renewing it; otherwise the run stops here (StaleWriter), nothing sent."""
        ttl = self.job.lease.ttl
        try:
            self.deadline = self.catalog.record_effects(
                [row], epoch=self.job.epoch, replace=replace, ttl=ttl, margin=dispatch_margin(ttl)
            )
        except StaleWriter as exc:
            self.job.fenced(exc)

    def _send(self, spec: _Spec, row: EffectRow, args, kwargs):
        """One attempt. Checked in-process right before the call: the deadline recorded
        by the dispatch transaction (minus send_guard) has not passed, e.g. because the
        process was paused since; otherwise nothing is sent and the run stops. The
        request gets what is left as its timeout (timeout_param, effect_time_left())."""
        fault_point("effect-before-send", row.ordinal)
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
        self.sending = ends
        try:
            return _invoke(spec, args, kwargs, row.key, timeout=left, token=self.job.epoch)
        finally:
            self.sending = None

    def _dispatch(self, spec: _Spec, row: EffectRow, args, kwargs):
        attempt, delay = row.attempts, spec.retry.backoff if spec.retry else 0.0
        while True:
            try:
                result = self._send(spec, row, args, kwargs)
            except Exception as exc:
                retryable = (
                    spec.retry is not None
                    and isinstance(exc, spec.retry.on)
                    and (
                        spec.idempotency == "key" or spec.lookup is not None or spec.kind == "read"
                    )
                )
                if retryable and attempt < spec.retry.attempts:
                    attempt += 1
                    time.sleep(min(delay, spec.retry.max_backoff))
                    delay *= 2
                    if spec.lookup is not None and spec.idempotency != "key":
                        found = _lookup(spec, row.key, self.job.epoch)
                        if found is not None:
                            return self._confirm(
                                row, found, attempt, f"found by lookup after {type(exc).__name__}"
                            )
                    row = _again(row)  # each attempt is fenced and recorded first
                    self._fence(row, replace=True)
                    continue
                self._record(row, FAILED, exc, attempt, f"{type(exc).__name__}: {exc}")
                raise
            fault_point("effect-after-send", row.ordinal)
            return self._confirm(row, result, attempt, row.note)

    def _confirm(self, row: EffectRow, result, attempts: int, note: str):
        self._record(row, CONFIRMED, result, attempts, note)
        fault_point("effect-after-confirm", row.ordinal)
        return result

    def _record(self, row: EffectRow, state: str, value, attempts: int, note: str) -> None:
        try:
            sealed = seal(self.job.home.keys, value)
        except Exception as exc:  # an unpicklable result: keep the fact, not the value
            sealed, note = None, f"result not stored ({type(exc).__name__}: {exc})"
        t = time.time()
        try:
            self.catalog.record_effects(
                [
                    EffectRow(
                        row.job_id,
                        row.ordinal,
                        row.key,
                        row.name,
                        row.call_site,
                        row.args_digest,
                        row.args_repr,
                        row.kind,
                        state,
                        sealed,
                        row.external_id,
                        attempts,
                        row.created,
                        t,
                        note,
                    )
                ],
                epoch=self.job.epoch,
                replace=True,
            )
        except StaleWriter as exc:
            # Taken over while the call was out: the outcome is the new runner's to find
            # out; this runner stops here, no agent code runs after it.
            self.job.fenced(exc)

    def _served(self, row: EffectRow, call_site: str):
        if self.restored and not self.replay:
            self.catalog.bump_metric(self.job.job_id, "served_from_ledger")
        if row.result is None:
            raise RestoreError(
                f"effect {row.ordinal} at {call_site} happened but its result "
                f"could not be stored ({row.note}); it cannot be replayed"
            )
        value = unseal(self.job.home.keys, row.result, f"effect {row.ordinal}")
        if row.state == FAILED:
            raise value
        return value

    def _recover(self, spec: _Spec, row: EffectRow, args, kwargs, call_site: str):
        if row.state == CONFIRMED:
            return self._served(row, call_site)
        if self.replay:
            if row.state == FAILED:
                return self._served(row, call_site)
            self.job.end_replay(
                f"effect {row.ordinal} ({row.name} at {call_site}) has no "
                f"recorded outcome (state {row.state})"
            )
        if row.state == NOT_COMMITTED or spec.kind == "read":
            # Reconciled as not having happened, or harmless to repeat: dispatch again.
            return self._redispatch(spec, _again(row), args, kwargs)
        if row.state == FAILED:
            # A failure is no proof that nothing happened (a connection can drop after
            # the provider acted). Retry only where the provider makes that safe;
            # otherwise the re-executed code sees the recorded failure again
            # (`snaprun reconcile --not-committed` allows a new attempt).
            if spec.idempotency == "key":
                return self._redispatch(
                    spec, _again(row, "retried with the same key after a failure"), args, kwargs
                )
            if spec.lookup is not None:
                found = _lookup(spec, row.key, self.job.epoch)
                if found is not None:
                    return self._confirm(
                        row, found, row.attempts, "found by lookup after a failure"
                    )
                return self._redispatch(
                    spec, _again(row, "lookup: not found; dispatched again"), args, kwargs
                )
            return self._served(row, call_site)
        if row.state == DISPATCHED and spec.idempotency == "key":
            return self._redispatch(
                spec, _again(row, "retried with the same idempotency key"), args, kwargs
            )
        if row.state == DISPATCHED and spec.lookup is not None:
            found = _lookup(spec, row.key, self.job.epoch)
            self.catalog.bump_metric(self.job.job_id, "reconciled")
            if found is not None:
                return self._confirm(row, found, row.attempts, "found by lookup after a restart")
            return self._redispatch(
                spec, _again(row, "lookup: not found; dispatched again"), args, kwargs
            )
        if row.state == DISPATCHED:
            self._record(row, AMBIGUOUS, None, row.attempts, "outcome unknown after a restart")
            self.catalog.bump_metric(self.job.job_id, "ambiguous")
        self.job.park(row, call_site)


def _again(row: EffectRow, note: str = "") -> EffectRow:
    """The row of one more attempt, in state dispatched: recorded before it is sent,
    so a crash during a second attempt is seen as an unknown outcome again."""
    return EffectRow(
        row.job_id,
        row.ordinal,
        row.key,
        row.name,
        row.call_site,
        row.args_digest,
        row.args_repr,
        row.kind,
        DISPATCHED,
        None,
        row.external_id,
        row.attempts + 1,
        row.created,
        time.time(),
        note or row.note,
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
