"""The --json form of each object snaprun prints: one function per object (job,
snapshot, effect, approval, wait, event, worker), used by every command that prints
that object, so the same object has the same keys everywhere (docs/cli.md lists them).
Values are the stored ones, unescaped: JSON escapes what a terminal must not see.

Also the names people read for effects: a spawned task's effect is `TASK#N` (task 2's
first effect is `2#1`), the main task's its ordinal; `effect_ref()` turns either back
into the catalog's ordinal (`snaprun reconcile JOB 2#1`)."""

from __future__ import annotations

import re
from typing import Any

import click

from ...serializers._store import EventRow, effect_label
from .. import _api

__all__ = [
    "job_record",
    "snapshot_record",
    "effect_record",
    "approval_record",
    "wait_record",
    "event_record",
    "effect_id",
    "effect_site",
    "effect_ref",
    "INTERNAL_KINDS",
]

# Ledger rows snapstate writes for the agent's recorded values (now(), random(),
# uuid4(), and the clock reads of sleep()): listed with --all only.
INTERNAL_KINDS = frozenset({"value"})


def effect_id(view: _api.EffectView) -> str:
    """`TASK#N` for a spawned task's effect (its identity, from the row's call site),
    else the ordinal."""
    return effect_label(view.ordinal, view.call_site)[0]


def effect_site(view: _api.EffectView) -> str:
    """The call site without the task suffix effect_id() shows."""
    return effect_label(view.ordinal, view.call_site)[1]


def effect_ref(effects: list[_api.EffectView], ref: str) -> int:
    """The catalog ordinal of effect `ref` (an ordinal, or `TASK#N`) of these rows;
    click.BadParameter naming what is there when no row has it."""
    if re.fullmatch(r"[0-9]+", ref):
        return int(ref)
    if "#" in ref:
        for view in effects:
            if effect_id(view) == ref:
                return view.ordinal
        raise click.BadParameter(
            f"the job has no effect {ref} (`snaprun effects JOB --all` lists them)"
        )
    raise click.BadParameter(
        f"{ref!r}: name an effect as `snaprun effects` shows it: a number, or TASK#N "
        "(task 2's first effect is 2#1)"
    )


def wait_record(wait: _api.WaitInfo | None) -> dict[str, Any] | None:
    if wait is None:
        return None
    return {
        "kind": wait.kind,
        "reason": wait.reason,
        "due": wait.due,
        "since": wait.since,
        "seq": wait.seq,
        "approval": wait.approval_id,
    }


def snapshot_record(view: _api.SnapshotView | None) -> dict[str, Any] | None:
    if view is None:
        return None
    return {
        "seq": view.seq,
        "label": view.label,
        "created": view.created,
        "size": view.size,
        "epoch": view.epoch,
    }


def job_record(view: _api.JobView, crashes: dict[str, Any] | None) -> dict[str, Any]:
    latest = view.latest
    return {
        "job": view.job_id,
        "status": str(view.status),
        "snapshots": len(view.snapshots),
        "latest": latest.seq if latest else None,
        "label": latest.label if latest else None,
        "snapshot": snapshot_record(latest),
        "created": view.created,
        "updated": view.updated,
        "resumes": view.resumes,
        "entry": view.entry,
        "parent": view.parent,
        "error": view.error,
        "wait": wait_record(view.wait),
        "meta": view.meta,
        "pins": view.pins,
        "crashes": crashes,
    }


def effect_record(view: _api.EffectView) -> dict[str, Any]:
    return {
        "effect": view.ordinal,
        "id": effect_id(view),
        "state": view.state,
        "kind": view.kind,
        "internal": view.kind in INTERNAL_KINDS,
        "name": view.name,
        "args": view.args,
        "call_site": view.call_site,
        "key": view.key,
        "attempts": view.attempts,
        "note": view.note,
        "updated": view.updated,
        # a request recorded by record_http: its HTTP status; a model call's model and
        # token counts (None for every other effect)
        "status": view.status,
        "model": view.model,
        "input_tokens": view.input_tokens,
        "output_tokens": view.output_tokens,
    }


def approval_record(view: _api.ApprovalView, digest: str, damaged: str | None) -> dict[str, Any]:
    return {
        "job": view.job_id,
        "id": view.approval_id,
        "name": view.name,
        "state": view.state,
        "scope": view.scope,
        "digest": digest,
        "requested": view.requested,
        "expires": view.expires,
        "approvers": None if view.approvers is None else list(view.approvers),
        "decided_by": view.decided_by,
        "decided_at": view.decided_at,
        "note": view.note,
        "site": view.site,
        "altered": view.altered,  # `approve` refuses such a row
        "damaged": damaged,  # why the catalog refuses the row (None: it doesn't)
    }


def event_record(event: EventRow) -> dict[str, Any]:
    return {"at": event.at, "kind": event.kind, "detail": event.detail}
