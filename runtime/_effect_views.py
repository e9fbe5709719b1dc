"""A job's effect ledger as `snaprun effects` and `Store.effects()` show it: one
EffectView per logical action, with what record_http recorded of an HTTP request (its
status, and a model call's model and tokens) read without running anything from the
store. Re-exported by runtime/_api.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, cast

from ..serializers._home import Home
from ..serializers._store import EffectRow
from . import _http_record

__all__ = ["EffectView", "effect_view", "effect_views"]


@dataclass(frozen=True)
class EffectView:
    """One logical action of a job's effect ledger, as `snaprun effects` lists it.

    state: "dispatched" (recorded before it was sent: it may have happened),
    "confirmed", "failed" (the call raised), "ambiguous" (outcome unknown: the job
    parks), "not-committed" (reconciled by hand); kind: "write", "read" or "value"
    (now(), random(), uuid4()). args is redacted and truncated, for people; key is the
    idempotency key given to the provider. A request recorded by record_http (name
    "http.<METHOD>") has its response's HTTP status, and for an OpenAI- or
    Anthropic-shaped answer the model and input/output tokens (None otherwise)."""

    ordinal: int
    name: str
    state: Literal["dispatched", "confirmed", "failed", "ambiguous", "not-committed"]
    kind: Literal["write", "read", "value"]
    key: str
    args: str
    call_site: str
    attempts: int
    note: str
    updated: float
    status: int | None = None
    model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None


def effect_view(row: EffectRow, home: Home | None = None) -> EffectView:
    # The row's state and kind are members of EffectState / EffectKind (checked when the
    # row is built), whose values are exactly these literals.
    state = cast(
        Literal["dispatched", "confirmed", "failed", "ambiguous", "not-committed"],
        str(row.state),
    )
    kind = cast(Literal["write", "read", "value"], str(row.kind))
    return EffectView(
        row.ordinal,
        row.name,
        state,
        kind,
        row.key,
        row.args_repr,
        row.call_site,
        row.attempts,
        row.note,
        row.updated,
        *(_http_record.summary(home.keys, row) if home is not None else (None,) * 4),
    )


def effect_views(home: Home, job_id: str) -> list[EffectView]:
    """A job's effect ledger in order (`snaprun effects`); JobNotFound names the job."""
    home.catalog.get_job(job_id)
    return [effect_view(e, home) for e in home.catalog.effects(job_id)]
