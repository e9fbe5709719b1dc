"""What an agent's greenlet and the hub pass each other when they switch.

The agent runs in a greenlet; the hub (the greenlet that started the job) runs the
runtime's side. The agent switches to the hub with a message — a freeze request at
snapshot(), a wait request at a wait (runtime/_waits.py), `Done` when its function
returned, `Stop` when the run must end here (a park, a stale lease, the end of a
replay) — and the hub switches back the call's outcome (`SnapshotInfo` for a
snapshot). The messages are plain frozen dataclasses; nothing here knows the job.

`SWITCH_CODES` are the functions a task is paused in when the hub freezes it
(snapshot(), wait_point(), the task join point: each adds its own), so the capture
starts from the agent's frame below them. `in_coroutine` and `await_in_task` are the
two primitives async jobs add: whether the caller is a coroutine body (its snapstate
call returns an await point instead of switching), and how the ledger's greenlet of an
async effect hands the effect's coroutine to the task that awaits it.
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass, field
from types import CodeType
from typing import TYPE_CHECKING, Any

import greenlet

if TYPE_CHECKING:
    from ._waits import Wait

__all__ = [
    "SnapshotInfo",
    "FreezeRequest",
    "Done",
    "Stop",
    "SWITCH_CODES",
    "PARKED_AGENTS",
    "in_coroutine",
    "awaited",
    "await_in_task",
]


@dataclass(frozen=True)
class SnapshotInfo:
    """What snapshot() returns.

    resumed:    True when execution just continued from this snapshot in a restore
    frozen_for: seconds between taking the snapshot and resuming it (0.0 when live)
    seq:        the snapshot's sequence number (None outside a job)
    label:      the label given to snapshot()
    meta:       the meta dict given to snapshot() (a JSON copy), or None
    pins:       the job's pinned values when the snapshot was taken (pin())
    """

    resumed: bool
    frozen_for: float
    seq: int | None
    label: str | None
    meta: dict[str, Any] | None = None
    pins: dict[str, Any] = field(default_factory=dict)


# A SnapshotInfo pickled before meta and pins existed (a local of a frozen frame) has
# neither in its __dict__: it reads these class-level defaults.
setattr(SnapshotInfo, "pins", {})  # noqa: B010 (never mutated: pins() returns copies)


@dataclass(frozen=True)
class FreezeRequest:
    """The agent asks for a snapshot here (snapshot(), or a wait that hibernates)."""

    label: str | None
    handled: BaseException | None
    wait: Wait | None = None  # a snapshot taken to hibernate at this wait
    meta: dict[str, Any] | None = None  # snapshot(meta=...), checked (runtime/_pins.py)
    async_state: dict[str, Any] | None = None  # an async job's tasks (runtime/_async.py)


@dataclass(frozen=True)
class Done:
    """The agent's function returned `value`."""

    value: object


@dataclass(frozen=True)
class Stop:
    """The agent asks the hub to stop the run here, leaving it paused: park or end
    of a replay."""

    error: BaseException | None
    reason: str


# The functions a task is paused in when the hub freezes it: snapshot() (runtime/_job.py),
# wait_point() (runtime/_waits.py) and the task join point (runtime/_tasks.py) add their
# code objects.
SWITCH_CODES: set[CodeType] = set()

# Agents whose run stopped on a fatal store error stay paused forever: letting them be
# garbage-collected would throw GreenletExit into agent code and run its finally
# blocks (side effects after the job stopped).
PARKED_AGENTS: list[greenlet.greenlet] = []


def in_coroutine(depth: int) -> bool:
    """The function `depth` frames up is a coroutine (or async generator) body."""
    flags = sys._getframe(depth + 1).f_code.co_flags
    return bool(flags & (inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR))


def awaited(outcome: tuple[str, Any]) -> Any:
    """("value", v) -> v; ("error", exc) raises exc."""
    if outcome[0] == "error":
        raise outcome[1]
    return outcome[1]


def await_in_task(coro: Any) -> Any:
    """Called by the ledger's greenlet where it sends an async effect (or looks one up):
    the awaiting task runs `coro`; its outcome comes back here."""
    parent = greenlet.getcurrent().parent
    assert parent is not None, "the ledger's greenlet runs under the task's"
    return awaited(parent.switch(("await", coro)))
