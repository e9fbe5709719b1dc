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
waits (the "rate-limit" wait kind, runtime/_effects.py), then calls the same action
again: same ordinal, same key, same arguments.

snapstate.now(), random() and uuid4() are recorded in the same ledger, so code
between a snapshot and a crash re-executes identically; their rows are batched into
the next durable write.

This module holds the ledger itself: the (state, recovery) table `RECOVERY` that is the
whole state machine, and `Ledger`, a job's view of its rows while it runs (record,
send, confirm; settle a row found on re-execution). The effect decorators that call it
are in runtime/_effects.py, the arguments' canonical form in runtime/_effect_args.py.
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import hmac
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import (
    TYPE_CHECKING,
    Any,
    Final,
    NoReturn,
    TypeVar,
)

import greenlet

from .._errors import (
    DivergenceError,
    EffectRefused,
    RestoreError,
    StaleWriter,
    TamperedSnapshot,
)
from ..resources import _secrets
from ..resources._ratelimit import NOT_GIVEN
from ..serializers import _pickler, _refs
from ..serializers._catalog import Catalog
from ..serializers._store import EffectKind, EffectRow, EffectState, effect_label
from . import _agent
from ._effect_args import args_digest, args_repr
from ._effect_spec import (
    TASK_ORDINAL_BASE,
    Recovery,
    Refused,
    Spec,
    call_lookup,
    invoke,
    rate_limit,
)
from ._faults import fault_point, recorded_value
from ._lease import dispatch_margin, send_guard
from ._switch import await_in_task

if TYPE_CHECKING:
    from ..serializers._keys import KeyRing
    from ._async_loop import TaskInfo
    from ._job import Job
    from ._scheduler import _TaskState

__all__ = [
    "Ledger",
    "Action",
    "RECOVERY",
    "seal",
    "unseal",
    "verify_sealed",
    "explain_ambiguous",
]

R = TypeVar("R")
T = TypeVar("T")


# ------------------------------------------------------------------------ results
def seal(keys: KeyRing, value: object) -> bytes:
    """A result stored by value: pickled as a snapshot pickles it (through the resource
    adapters: an HTTP response's credentials sealed with the store's keys, never in
    clear), signed like a snapshot (HMAC-SHA256)."""

    _secrets.bind(keys)
    data = _pickler.dumps(value)
    key = keys.current
    kid = key.key_id.encode()
    return bytes([len(kid)]) + kid + hmac.new(key.mac_key, data, hashlib.sha256).digest() + data


def verify_sealed(keys: KeyRing, blob: bytes, where: str) -> bytes:
    """The pickle of a stored result once its signature checks out with `keys`
    (nothing unpickled); TamperedSnapshot naming `where` otherwise."""
    try:
        n = blob[0]
        kid, mac, data = blob[1 : 1 + n].decode(), blob[1 + n : 33 + n], blob[33 + n :]
    except (IndexError, UnicodeDecodeError):
        raise TamperedSnapshot(f"the recorded result of {where} is malformed") from None
    key = keys.get(kid)
    if not hmac.compare_digest(hmac.new(key.mac_key, data, hashlib.sha256).digest(), mac):
        raise TamperedSnapshot(f"the recorded result of {where} fails its signature check")
    return data


def unseal(keys: KeyRing, blob: bytes, where: str) -> Any:  # whatever was sealed
    data = verify_sealed(keys, blob, where)
    _secrets.bind(keys)
    return _pickler.loads(data)


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
    def _spawned(self) -> _TaskState | TaskInfo | None:
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
        if self.replay and self.job.debugger is None:  # a debug session computes it afresh
            self.job.end_replay(
                f"the recorded history ends before snapstate.{kind}() at {call_site}"
            )
        where = str(ordinal) if task is None else f"{task.id}#{task.effects}"
        sealed = recorded_value(where, f"snapstate.{kind}")  # None unless crashtest's
        if sealed is not None:
            value: T = unseal(self.job.home.keys, sealed, call_site)
        else:
            value = produce()
            sealed = seal(self.job.home.keys, value)
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
                result=sealed,
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
            error = DivergenceError(
                f"effect {effect_label(row.ordinal, row.call_site)[0]} at {call_site} diverged "
                f"from the ledger: it recorded "
                f"{row.name}({row.args_repr}) at {row.call_site}, and the re-executed code "
                f"now calls {name}({shown}). Nothing was dispatched. Code between a snapshot "
                "and a crash must make the same calls; use snapstate.now()/random()/uuid4() "
                "for values that change between runs."
            )
            if self.replay and self.job.debugger is not None:
                self.job.refuse(error)  # a debug session ends at a divergence
            raise error

    def call(
        self,
        spec: Spec[R],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        explicit: str | None,
        call_site: str,
        *,
        shown: str | None = None,
        provider_key: str | None = None,
    ) -> R:
        """Call an effect through the ledger. `shown` replaces the arguments' display
        and `provider_key` is the key the provider is sent (kept in the row's
        external_id, sent again on a retry): both given by recorded HTTP only
        (runtime/_http_record.py: the request's own Idempotency-Key)."""
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
        if shown is None:
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
            self._unrecorded(
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
            external_id=provider_key,
            attempts=1,
            created=t,
            updated=t,
        )
        fault_point("effect-before-prepare", point)
        self._fence(row, replace=False, pending=True)  # buffered value records with it
        self.job.progressed()
        fault_point("effect-after-prepare", point)
        return self._dispatch(spec, row, args, kwargs)

    def _bind_agent_modules(self) -> None:
        """Arguments are digested (and results pickled) as a snapshot pickles them: the
        agent's module objects by value, other modules' by reference. Bound here too, as
        a resumed process has taken no snapshot yet when it re-executes a call. Per call
        this costs O(the agent's modules), not O(sys.modules): `agent_modules` rescans
        only when sys.modules changed (its docstring: what `exact=False` can miss), and
        `bind` only compares names."""

        _refs.bind(_agent.agent_modules(self.job.entry, exact=False))

    def _redispatch(
        self, spec: Spec[R], row: EffectRow, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> R:
        """Send again after a restart: the new attempt is durable before it is sent."""
        self._fence(row, replace=True)
        self.job.progressed()
        return self._dispatch(spec, row, args, kwargs)

    # -------------------------------------------------------------- fencing
    def _fence(self, row: EffectRow, *, replace: bool, pending: bool = False) -> None:
        """The dispatch transaction: records the row (state dispatched) only while this
        runner's epoch holds the lease and its deadline is more than dispatch_margin
        away, renewing it; otherwise the run stops here (StaleWriter), nothing sent.
        `pending`: the buffered value records (now(), random()...) are made durable in
        the same transaction, before the row (one commit per dispatch, not two)."""
        assert self.job.lease is not None, "a running job holds its lease"
        ttl = self.job.lease.ttl
        rows = [row]
        if pending and self.pending and not self.replay:
            rows, self.pending = [*self.pending, row], []
        try:
            self.deadline = self.catalog.record_effects(
                rows, epoch=self.job.epoch, replace=replace, ttl=ttl, margin=dispatch_margin(ttl)
            )
        except StaleWriter as exc:
            self.job.fenced(exc)

    def _send(
        self, spec: Spec[R], row: EffectRow, args: tuple[Any, ...], kwargs: dict[str, Any]
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
                    f"job {self.job.job_id}: effect {effect_label(row.ordinal, row.call_site)[0]} "
                    f"({row.name}) was not sent: the "
                    f"lease deadline recorded when it was dispatched passed {-left:.1f}s ago (the "
                    "runner was paused between recording and sending it), so another runner may "
                    "have taken the job over. This runner stops; nothing was sent."
                )
            )
        scheduler = self.job._scheduler
        key = row.external_id or row.key  # the provider's own key (recorded HTTP), or ours
        if scheduler is not None and scheduler.active:  # several tasks: on the pool
            token = self.job.epoch
            return scheduler.run_effect(
                ends, lambda: invoke(spec, args, kwargs, key, timeout=left, token=token)
            )
        self.sending = ends
        try:
            return invoke(spec, args, kwargs, key, timeout=left, token=self.job.epoch)
        finally:
            self.sending = None

    def _dispatch(
        self, spec: Spec[R], row: EffectRow, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> R:
        attempt, delay = row.attempts, spec.retry.backoff if spec.retry else 0.0
        while True:
            try:
                result = self._send(spec, row, args, kwargs)
            except Exception as exc:
                limit = rate_limit(exc)  # the provider refused: nothing happened
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
                        found: R | None = call_lookup(spec, row.key, self.job.epoch)
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
            await_in_task(asyncio.sleep(seconds))
            return
        time.sleep(seconds)

    def _refused(self, row: EffectRow, attempt: int, seconds: float, exc: Exception) -> NoReturn:
        """The provider refused the call for now (a rate limit): the action did not
        happen. The row is recorded not-committed, the refused attempt not counted (a
        Retry policy's budget is kept); _attempt waits, then calls the same action again,
        which RECOVERY sends again with the same key."""

        asked = "no Retry-After" if seconds == NOT_GIVEN else f"retry after {seconds:g}s"
        note = f"rate limited ({type(exc).__name__}, {asked}): not performed; sent again after the wait"
        self._record(row, EffectState.NOT_COMMITTED, None, attempt - 1, note)
        fault_point("effect-rate-limited", row.ordinal)
        raise Refused(None if seconds == NOT_GIVEN else seconds, exc)

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
            # Ordered, not synced: the next durable commit (a dispatch, a snapshot) makes
            # it durable; lost only with the machine, the row stays as dispatched, whose
            # recovery is that of a crash between the call and this line.
            self.catalog.record_effects([outcome], epoch=self.job.epoch, replace=True, ordered=True)
        except StaleWriter as exc:
            # Taken over while the call was out: the outcome is the new runner's to find
            # out; this runner stops here, no agent code runs after it.
            self.job.fenced(exc)

    def _served(self, row: EffectRow, call_site: str) -> Any:  # the recorded result
        if self.restored and not self.replay:
            self.catalog.bump_metric(self.job.job_id, "served_from_ledger")
        if row.result is None:
            raise RestoreError(
                f"effect {effect_label(row.ordinal, row.call_site)[0]} at {call_site} happened "
                "but its result "
                f"could not be stored ({row.note}); it cannot be replayed"
            )
        value = unseal(self.job.home.keys, row.result, f"effect {row.ordinal}")
        if row.state == EffectState.FAILED:
            raise value
        return value

    def _recover(
        self,
        spec: Spec[R],
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
                found: R | None = call_lookup(spec, row.key, self.job.epoch)
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
                self._unrecorded(
                    f"effect {effect_label(row.ordinal, row.call_site)[0]} ({row.name} at "
                    f"{call_site}) has no "
                    f"recorded outcome (state {row.state})"
                )
        raise AssertionError("not reached: the job stopped this run")

    def _unrecorded(self, reason: str) -> NoReturn:
        """A replay reached an effect the ledger cannot answer: the replay ends here; a
        debug session (`snaprun debug`) refuses the call instead, raising EffectRefused
        into the agent at it. The call did not happen, so its ordinal is given back: the
        same call made again is refused again, never taken for the next recorded one."""
        if self.job.debugger is None:
            self.job.end_replay(reason)
            raise AssertionError("not reached: the replay stopped here")
        task = self._spawned()
        if task is None:
            self.ordinal -= 1
        else:
            task.effects -= 1
        raise EffectRefused(
            f"{reason}: not sent. `snaprun debug` sends nothing; it answers only the "
            f"effects job {self.job.job_id} recorded. Run the job itself (`snaprun resume`, "
            "`snaprun fork`) to send it"
        )


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
    name = effect_label(row.ordinal, row.call_site)[0]
    return (
        f"job {job_id} parked: effect {name} ({row.name}({row.args_repr}) at "
        f"{row.call_site}, idempotency key {row.key}) was dispatched but its outcome is "
        "unknown: the process stopped before the response was recorded, and the provider "
        "honours no idempotency key and offers no lookup. Check with the provider whether "
        f"it happened, then run `snaprun reconcile {job_id} {name} --committed "
        f"[--result JSON]` or `snaprun reconcile {job_id} {name} --not-committed`, "
        f"and `snaprun resume {job_id}`."
    )
