"""Human approvals: a job asks a person, waits without a process, and keeps exactly what
was approved.

`request_approval(name, scope, expires_in=, approvers=)` records a pending approval in
the catalog (the scope as canonical JSON, the expiry, who may decide, the call site,
and a digest: the HMAC of the request under the store's key, see row_digest()) and waits (runtime/_waits.py): with nobody deciding it at once, the job
snapshots right at the call and hibernates (status waiting, exit 3). `snaprun approve`
/ `reject` (or `snapstate.Store.approve/reject`) call decide(), which needs no process;
when the job is resumed (`snaprun resume`, the worker), the poller below finds the
decision and the agent's call returns an `Approval` or raises `ApprovalRejected` /
`ApprovalExpired`.

Identity: an approval's id is `a<N>`, N the ledger ordinal of the snapstate.now() value
its request records (the request time), so code re-executed after a crash finds the
same row (and the same expiry), and the id tells nothing of the approval's name (which
an encrypted store seals). A re-executed request whose name, scope, expiry or approvers
differ from the row of that id is refused (DivergenceError): a revised agent cannot
reuse, or widen, an old grant. A fork (`snaprun fork`) restored at an approval wait
finds no row of its own: it records a new pending request (same scope and expiry) and
never inherits the parent's decision.

Effects declared with `requires="name", within=predicate` call check_scope() before
anything is recorded or sent: the job's latest granted approval of that name, its row
as recorded at grant time (the digest checked), unexpired, and predicate(scope, **the
call's arguments) true; otherwise ApprovalScopeError.

Trust: the catalog is a file anyone with write access to the store can edit; the key
(keys.json) verifies what the request fixed (row_digest covers job, id, name, scope,
expiry and approvers), and the job compares the row with the request its signed
snapshot holds. The decision columns are not signed: writing the catalog is as good
as `snaprun approve` (whose --by is recorded, not authenticated)."""

from __future__ import annotations

import datetime as _datetime
import getpass
import hashlib
import hmac
import inspect
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._errors import (
    ApprovalError,
    ApprovalExpired,
    ApprovalRejected,
    ApprovalScopeError,
    DivergenceError,
    StaleWriter,
    StoreDamaged,
    StoreFailure,
)
from ..serializers._ids import validate_job_id
from ..serializers._store import ApprovalRow
from . import _context, _waits
from ._clock import clock
from ._effect_args import args_repr
from ._faults import fault_point
from ._jsonvalue import check_json
from ._recorded import now
from ._waits import wait_api, wait_point

if TYPE_CHECKING:
    from ..serializers._home import Home
    from ..serializers._keys import Key
    from ._job import Job

__all__ = [
    "Approval",
    "request_approval",
    "decide",
    "pending",
    "check_scope",
    "canonical_scope",
    "scope_digest",
    "is_expired",
    "APPROVAL_ID",
]

APPROVAL_ID = re.compile(r"a[1-9][0-9]{0,17}")
# An approval due to expire within this many seconds is polled this often in process
# (a decision made meanwhile is seen at once, not only at the expiry).
_NEAR_POLL = 1.0
_MAX_TEXT = 4096  # longest name, approver or note accepted


@dataclass(frozen=True)
class Approval:
    """A granted approval, as request_approval() returns it.

    id:       the approval's id in the job (`snaprun approvals` shows it), e.g. "a3"
    name:     the name it was requested under, e.g. "purchase"
    decision: "granted"
    by:       who granted it
    at:       when it was granted (aware UTC datetime)
    scope:    the scope exactly as granted (the JSON value recorded at the request)
    note:     the approver's note, or None
    expires:  when the approval expires (aware UTC datetime), or None
    """

    id: str
    name: str
    decision: str
    by: str
    at: _datetime.datetime
    scope: dict[str, Any]
    note: str | None
    expires: _datetime.datetime | None


# ------------------------------------------------------------------------ scope
_MAX_DEPTH = 64  # deepest nesting of lists and dicts a scope may have


def canonical_scope(scope: object) -> str:
    """The scope as canonical JSON (sorted keys, no NaN); TypeError naming the key of a
    value that is not JSON."""
    if not isinstance(scope, dict):
        raise TypeError(
            f"request_approval()'s scope must be a dict (got {type(scope).__name__}), e.g. "
            '{"vendor": "acme", "max_usd": 5000}'
        )
    check_json(scope, "scope", max_depth=_MAX_DEPTH)
    return json.dumps(scope, sort_keys=True, separators=(",", ":"), allow_nan=False)


def scope_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _mac_key(key: Key) -> bytes:
    """A key of its own for approval rows, derived from the store key's MAC key."""
    return hmac.new(key.mac_key, b"snapstate approval row hmac-sha256", hashlib.sha256).digest()


def _message(
    job_id: str,
    approval_id: str,
    name: str,
    scope: str,
    expires: float | None,
    approvers: list[str] | None,
) -> bytes:
    return json.dumps(
        [job_id, approval_id, name, scope, expires, approvers], separators=(",", ":")
    ).encode()


def row_digest(
    home: Home,
    job_id: str,
    approval_id: str,
    name: str,
    scope: str,
    expires: float | None,
    approvers: list[str] | None,
) -> str:
    """The digest an approval row records: HMAC-SHA256 under the store's current key of
    everything the request fixed (job, id, name, scope, expiry, approvers). The catalog
    is writable by whoever can edit a file; the key is not in it, so a row whose scope,
    expiry or approvers were edited (or copied from another job) no longer verifies,
    whatever digest is written beside it."""
    message = _message(job_id, approval_id, name, scope, expires, approvers)
    return hmac.new(_mac_key(home.keys.current), message, hashlib.sha256).hexdigest()


def verified(home: Home, row: ApprovalRow) -> bool:
    """The row's digest is the store's HMAC of its request (under any of its keys: a
    rotation keeps older rows valid)."""
    message = _message(row.job_id, row.approval_id, row.name, row.scope, row.expires, row.approvers)
    digest = str(row.digest)
    return any(
        hmac.compare_digest(hmac.new(_mac_key(k), message, hashlib.sha256).hexdigest(), digest)
        for k in home.keys.keys()
        if not k.retired  # a retired key is no longer trusted
    )


def _decided(row: ApprovalRow) -> bool:
    """A decided row records who decided and when (`decide()` always does): a state
    flipped by hand in the catalog, without them, is not a decision."""
    return bool(row.decided_by) and row.decided_at is not None


def _text(value: object, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise TypeError(f"{what} must be a non-empty string (got {value!r})")
    if len(value) > _MAX_TEXT or any(
        ord(c) < 32 or ord(c) == 127 or 0xD800 <= ord(c) <= 0xDFFF for c in value
    ):
        raise ValueError(
            f"{what} must be at most {_MAX_TEXT} characters without control characters or "
            "lone surrogates "
            f"(got {value[:40]!r}...)"
        )
    return value


def _approvers(value: object) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or not value:
        raise TypeError(
            "approvers must be a non-empty list of names, e.g. ['alice', 'bob'] (or None: "
            "anyone may decide)"
        )
    return [_text(v, "each approver") for v in value]


def _seconds(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(
            f"expires_in must be a number of seconds or None, not {type(value).__name__}"
        )
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"expires_in must be a finite number of seconds above 0 (got {value!r})")
    return float(value)


def _utc(t: float | None) -> _datetime.datetime | None:
    return None if t is None else _datetime.datetime.fromtimestamp(t, _datetime.UTC)


def _describe_time(t: float) -> str:
    return _datetime.datetime.fromtimestamp(t, _datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _who(approvers: list[str] | None) -> str:
    return "any approver" if approvers is None else f"approvers {', '.join(approvers)}"


def is_expired(row: ApprovalRow, at: float) -> bool:
    """Undecided (or decided too late) at `at`, past its expiry."""
    return row.expires is not None and at >= row.expires


# ------------------------------------------------------------------------ requesting
@wait_api
def request_approval(
    name: str,
    scope: dict[str, Any],
    expires_in: float | None = None,
    approvers: list[str] | None = None,
) -> Approval:
    """Ask a person to approve `name` with exactly `scope` (JSON data); wait, without a
    process, until someone decides: returns the granted Approval, or raises
    ApprovalRejected / ApprovalExpired here.

    expires_in: seconds after the request after which it can no longer be granted (and
    a grant no longer authorizes effects); None: never expires. approvers: the names
    that may decide (`snaprun approve --by NAME`); None: anyone with access to the
    store. Outside a job (plain Python) there is nobody to ask: ApprovalError."""
    site = _waits.call_site()
    name = _text(name, "request_approval()'s name")
    text = canonical_scope(scope)
    expires_after = _seconds(expires_in)
    allowed = _approvers(approvers)
    job = _context.active_job()
    if job is None:
        raise ApprovalError(
            f"request_approval({name!r}) at {site} runs outside a job (plain Python): there "
            "is nobody to ask and nothing to wait with. Run the agent with `snaprun run`; "
            "snapstate never approves by itself."
        )
    requested = now().timestamp()  # recorded: re-executed code finds the same request
    approval_id = f"a{job.ledger.last_ordinal()}"  # the ordinal of that recorded value
    expires = None if expires_after is None else requested + expires_after
    digest = row_digest(job.home, job.job_id, approval_id, name, text, expires, allowed)
    row = ApprovalRow(
        job_id=job.job_id,
        approval_id=approval_id,
        name=name,
        scope=text,
        digest=digest,
        requested=requested,
        expires=expires,
        approvers=allowed,
        state="pending",
        site=site,
    )
    found = _record(job, row)
    if (found.name, found.scope, found.expires, found.approvers) != (
        name,
        text,
        expires,
        allowed,
    ):
        raise DivergenceError(
            f"request_approval({name!r}) at {site} diverged from approval {approval_id} the "
            f"job recorded at {found.site or '?'} (name {found.name!r}, scope {found.scope}, "
            f"expiry {_describe_time(found.expires) if found.expires else 'none'}, "
            f"{_who(found.approvers)}, {found.state}); the re-executed code now asks for "
            f"{name!r} with scope {text}. Nothing was requested: a revised agent cannot reuse "
            "or widen an approval requested earlier. Restore the original code to resume this "
            "job, or start a new job."
        )
    if not verified(job.home, found) or (found.state != "pending" and not _decided(found)):
        raise ApprovalScopeError(_altered(found, f"the request at {site}"))
    fault_point("approval-after-request", job.ledger.last_ordinal())
    wait = _waits.Wait(
        "approval",
        {
            "id": approval_id,
            "name": name,
            "scope": text,
            "digest": found.digest,
            "expires": expires,
            "approvers": allowed,
        },
        site,
    )
    return wait_point(wait)  # type: ignore[no-any-return]


def _altered(row: ApprovalRow, what: str) -> str:
    return (
        f"approval {row.approval_id} of job {row.job_id} in the catalog does not verify "
        f"against {what}: its name, scope, expiry, approvers or decision were edited outside "
        "snapstate (or it was copied from another job or store). It authorizes nothing; "
        "nothing was sent. Check who can write the store, then request a new approval."
    )


def _record(job: Job, row: ApprovalRow) -> ApprovalRow:
    """The pending row, durable before the job waits (or the row already there)."""
    catalog = job.home.catalog
    try:
        if job.ledger.replay:  # a replay writes nothing
            return catalog.get_approval(job.job_id, row.approval_id) or row
        job.ledger.flush()  # the request time is durable with the row
        return catalog.add_approval(row, epoch=job.epoch)
    except StaleWriter as exc:
        job.fenced(exc)
        raise
    except (StoreFailure, StoreDamaged) as exc:
        job.store_failed(exc)
        raise


# ------------------------------------------------------------------------ polling
def _poll(job: Job, wait: _waits.Wait) -> _waits.Ready | _waits.NotYet:
    args = wait.args
    approval_id, name = str(args["id"]), str(args["name"])
    catalog = job.home.catalog
    row = catalog.get_approval(job.job_id, approval_id)
    if row is None:
        # A fork (or a copy in another store): the parent's decision is not this job's.
        row = ApprovalRow(
            job_id=job.job_id,
            approval_id=approval_id,
            name=name,
            scope=str(args["scope"]),
            digest=row_digest(
                job.home,
                job.job_id,
                approval_id,
                name,
                str(args["scope"]),
                args.get("expires"),
                args.get("approvers"),
            ),
            requested=clock().time(),
            expires=args.get("expires"),
            approvers=args.get("approvers"),
            state="pending",
            site=wait.site,
        )
        if not job.ledger.replay:
            assert job.epoch is not None  # a restored job holds its lease
            row = catalog.add_approval(row, epoch=job.epoch)
            job.say(
                f"job {job.job_id} has no decision of its own on approval {approval_id} "
                f"({name!r}): a new request was recorded (`snaprun approvals`)"
            )
    request = (name, str(args["scope"]), args.get("expires"), args.get("approvers"))
    if (
        (row.name, row.scope, row.expires, row.approvers) != request
        or not verified(job.home, row)
        or (row.state != "pending" and not _decided(row))
    ):
        # The snapshot (signed) holds the request; the catalog row must be it, verified
        # by the store's key, and a decision must name who made it and when.
        return _waits.Ready(
            error=ApprovalScopeError(
                f"approval {approval_id} of job {job.job_id} in the catalog does not match the "
                f"request the job waits on at {wait.site} (name {name!r}, scope "
                f"{args['scope']}): the catalog row was altered. It cannot authorize "
                "anything; request a new approval."
            )
        )
    t = clock().time()
    if row.state == "granted" and not (
        row.expires is not None and (row.decided_at or t) >= row.expires
    ):
        return _waits.Ready(approval_of(row))
    if row.state == "rejected":
        why = f": {row.note}" if row.note else ""
        return _waits.Ready(
            error=ApprovalRejected(
                f"approval {approval_id} ({name!r}, scope {row.scope}) was rejected by "
                f"{row.decided_by} at {_describe_time(row.decided_at or t)}{why}",
                approval_id=approval_id,
                name=name,
                by=row.decided_by,
                note=row.note,
            )
        )
    if row.expires is not None and (row.state == "granted" or t >= row.expires):
        return _waits.Ready(
            error=ApprovalExpired(
                f"approval {approval_id} ({name!r}, scope {row.scope}) expired at "
                f"{_describe_time(row.expires)} before anyone decided it; request it again "
                "if it is still needed",
                approval_id=approval_id,
                name=name,
                expires=row.expires,
            )
        )
    reason = f"approval {approval_id} {name!r} pending ({_who(row.approvers)})"
    due = None
    if row.expires is not None:
        reason += f"; expires {_describe_time(row.expires)}"
        due = row.expires
        if row.expires - t <= _waits.hibernate_after():
            due = min(row.expires, t + _NEAR_POLL)
    return _waits.NotYet(due, reason, approval_id=approval_id)


def approval_of(row: ApprovalRow) -> Approval:
    """The public record of a granted row."""
    return Approval(
        id=row.approval_id,
        name=row.name,
        decision=row.state,
        by=row.decided_by or "",
        at=_datetime.datetime.fromtimestamp(row.decided_at or 0.0, _datetime.UTC),
        scope=json.loads(row.scope),
        note=row.note,
        expires=_utc(row.expires),
    )


_waits.register("approval", _poll)


# ------------------------------------------------------------------------ deciding
def _default_user() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        raise ApprovalError(
            "cannot tell who decides: the OS user name is unknown; give one with --by NAME"
        ) from None


def decide(
    home: Home,
    job_id: str,
    approval_id: str,
    *,
    granted: bool,
    by: str | None = None,
    note: str | None = None,
) -> ApprovalRow:
    """Grant or reject a pending approval of a job: no process of the job is needed (a
    waiting job continues on its next resume, by `snaprun resume` or the worker).
    Refuses an unknown job or approval, one already decided or expired, and a `by` not
    among its approvers (`by` defaults to the OS user name). Returns the decided row."""
    validate_job_id(job_id)
    if not isinstance(approval_id, str) or not APPROVAL_ID.fullmatch(approval_id):
        raise ApprovalError(
            f"{approval_id!r} is not an approval id (they look like a3); `snaprun approvals` "
            "lists them"
        )
    if not isinstance(granted, bool):
        raise TypeError("granted must be True or False")
    who = _text(by, "the approver's name (--by)") if by is not None else _default_user()
    if note is not None:
        note = _note(note)
    home.catalog.get_job(job_id)  # JobNotFound names it
    row = home.catalog.get_approval(job_id, approval_id)
    if row is None:
        raise ApprovalError(
            f"job {job_id} has no approval {approval_id}; `snaprun approvals --all` lists "
            "every approval"
        )
    if not verified(home, row):
        raise StoreDamaged(
            f"approval {approval_id} of job {job_id}: its recorded request (name, scope, "
            "expiry, approvers) does not verify against the store's key (the catalog was "
            "altered); nothing was decided"
        )
    if row.state != "pending":
        when = _describe_time(row.decided_at) if row.decided_at is not None else "?"
        raise ApprovalError(
            f"approval {approval_id} ({row.name!r}) of job {job_id} was already {row.state} "
            f"by {row.decided_by} at {when}; a decision is final (nothing changed)"
        )
    t = clock().time()
    if is_expired(row, t):
        assert row.expires is not None
        raise ApprovalExpired(
            f"approval {approval_id} ({row.name!r}) of job {job_id} expired at "
            f"{_describe_time(row.expires)}; it can no longer be decided (the job gets "
            "ApprovalExpired when it resumes)",
            approval_id=approval_id,
            name=row.name,
            expires=row.expires,
        )
    if row.approvers is not None and who not in row.approvers:
        raise ApprovalError(
            f"{who!r} may not decide approval {approval_id} ({row.name!r}) of job {job_id}: "
            f"its approvers are {', '.join(row.approvers)} (give one with --by NAME)"
        )
    return home.catalog.decide_approval(
        job_id, approval_id, granted=granted, by=who, note=note, at=t
    )


def _note(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"a note must be a string (got {type(value).__name__})")
    if len(value) > _MAX_TEXT or any(
        (ord(c) < 32 and c not in "\n\t") or 0xD800 <= ord(c) <= 0xDFFF for c in value
    ):
        raise ApprovalError(
            f"a note must be at most {_MAX_TEXT} characters without control characters"
        )
    return value


def pending(home: Home) -> list[ApprovalRow]:
    """The approvals someone may still decide (pending, unexpired), oldest first, and
    the rows the catalog refuses (shown as such: `approve` refuses them)."""
    t = clock().time()
    return [
        r
        for r in home.catalog.approvals()
        if r.damaged is not None or (r.state == "pending" and not is_expired(r, t))
    ]


# ------------------------------------------------------------------------ effects
def _recorded(job: Job, effect: str, key: str | None) -> bool:
    """The ledger already holds this call's row (the row the ledger will find for it:
    by its explicit key, else by the next ordinal along the job's path)."""
    row = job.ledger.next_row(key)  # in a spawned task too (runtime/_tasks.py)
    return row is not None and row.name == effect


def _arguments(
    fn: Callable[..., object], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call's arguments by parameter name (defaults applied), so that a predicate
    `lambda scope, amount, **_: ...` sees `amount` however it was passed."""
    try:
        bound = inspect.signature(fn).bind_partial(*args, **kwargs)
    except (TypeError, ValueError):
        return args, dict(kwargs)
    bound.apply_defaults()
    named: dict[str, Any] = {}
    for param in bound.signature.parameters.values():
        if param.name not in bound.arguments:
            continue
        value = bound.arguments[param.name]
        if param.kind is inspect.Parameter.VAR_KEYWORD:
            named.update(value)
        else:
            named[param.name] = value
    return (), named


def check_scope(
    effect: str,
    fn: Callable[..., object],
    requires: str,
    within: Callable[..., object] | None,
    job: Job | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    key: str | None = None,
) -> None:
    """Before an effect that requires an approval is recorded or sent: the job's latest
    granted approval named `requires` (its catalog row, the digest checked) is unexpired
    and within(scope, **arguments) is true; ApprovalScopeError otherwise.

    Expiry is not held against a call the ledger already recorded (code re-executed
    after a crash): it was checked before its row was written, and the ledger decides
    what happens to it (its recorded result served, or the same action completed)."""
    if job is None:
        raise ApprovalScopeError(
            f"effect {effect} requires approval {requires!r}, and outside a job (plain "
            "Python) there is none: nothing was sent. Run the agent with `snaprun run`."
        )
    try:
        recorded = job.home.catalog.approvals(job.job_id)
    except (StoreFailure, StoreDamaged) as exc:
        job.store_failed(exc)  # the run stops here; the agent never sees it
        raise
    rows = [r for r in recorded if r.name == requires and r.state == "granted"]
    # The latest along the job's path: by id (the ledger ordinal of its request), not by
    # the request's wall-clock time, which a clock stepped back would reorder.
    rows.sort(key=lambda r: int(r.approval_id[1:]) if APPROVAL_ID.fullmatch(r.approval_id) else -1)
    if not rows:
        raise ApprovalScopeError(
            f"effect {effect} requires approval {requires!r}, and job {job.job_id} has no "
            f"granted approval of that name: nothing was sent. Call "
            f"request_approval({requires!r}, scope=...) first."
        )
    row = rows[-1]
    label = f"approval {row.approval_id} ({requires!r}, granted by {row.decided_by})"
    if not verified(job.home, row) or not _decided(row):
        raise ApprovalScopeError(f"effect {effect}: " + _altered(row, "the store's key"))
    t = clock().time()
    if is_expired(row, t) and not _recorded(job, effect, key):
        assert row.expires is not None
        raise ApprovalScopeError(
            f"effect {effect}: {label} expired at {_describe_time(row.expires)}: nothing was "
            f"sent. Request a new approval with request_approval({requires!r}, ...)."
        )
    if within is None:
        return
    scope = json.loads(row.scope)  # a fresh copy: the predicate cannot change the grant
    call_args, call_kwargs = _arguments(fn, args, kwargs)
    try:
        ok = within(scope, *call_args, **call_kwargs)
    except Exception as exc:
        raise ApprovalScopeError(
            f"effect {effect}: its within= predicate raised {type(exc).__name__}: {exc} "
            f"checking the call against {label}, scope {row.scope}: nothing was sent"
        ) from None
    if not ok:
        raise ApprovalScopeError(
            f"effect {effect}({args_repr(args, kwargs)}) lies outside the scope of {label}: "
            f"{row.scope}. Nothing was sent. A wider scope needs a new approval."
        )
