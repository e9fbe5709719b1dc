"""Static typing test of snapstate's public API (not collected by pytest: no test_
prefix). scripts/checks runs `mypy --strict` on it against the installed package: the
correct uses must type-check, and each wrong use must stay an error (its
`# type: ignore[code]` is reported as unused, failing the check, if the error goes
away)."""

from __future__ import annotations

import datetime
from typing import Any, Literal, assert_type

import snapstate
from snapstate import SnapshotInfo, snapshot

# ---------------------------------------------------------------- snapshot()
info = snapshot()
assert_type(info, SnapshotInfo)
assert_type(snapshot("checkpoint"), SnapshotInfo)
assert_type(snapshot(label="checkpoint"), SnapshotInfo)
assert_type(snapshot(None), SnapshotInfo)
assert_type(snapstate.snapshot("x"), SnapshotInfo)

snapshot(1)  # type: ignore[arg-type]
snapshot(b"label")  # type: ignore[arg-type]
snapshot("a", "b")  # type: ignore[arg-type]
snapshot("a", {}, 3)  # type: ignore[call-arg]
assert_type(snapshot("a", meta={"step": 1}), SnapshotInfo)
assert_type(snapshot("a", {"k": [1, "x"]}), SnapshotInfo)
snapshot(name="a")  # type: ignore[call-arg]
snapshot().label.upper()  # type: ignore[union-attr]

# ---------------------------------------------------------------- SnapshotInfo
assert_type(info.resumed, bool)
assert_type(info.frozen_for, float)
assert_type(info.seq, int | None)
assert_type(info.label, str | None)
assert_type(info.meta, dict[str, Any] | None)
assert_type(info.pins, dict[str, Any])
if info.seq is not None:
    assert_type(info.seq + 1, int)
made = SnapshotInfo(resumed=True, frozen_for=1.5, seq=3, label=None)
assert_type(made, SnapshotInfo)

next_seq = info.seq + 1  # type: ignore[operator]
seconds: int = info.frozen_for  # type: ignore[assignment]
info.seq = 4  # type: ignore[misc]
SnapshotInfo(True, 1.5)  # type: ignore[call-arg]
SnapshotInfo("yes", 1.5, 3, None)  # type: ignore[arg-type]
info.when  # type: ignore[attr-defined]  # noqa: B018


# ---------------------------------------------------------------- pins
snapstate.pin(model="gpt-4o", prompt_version="3", plan=7, strict=True, temperature=0.2)
snapstate.pin(model=None)
assert_type(snapstate.pins(), dict[str, Any])
snapstate.pin("gpt-4o")  # type: ignore[call-arg]
snapstate.pin(model=["a"])  # type: ignore[arg-type]


# ---------------------------------------------------------------- the Python API
def embed(store: snapstate.Store) -> None:
    outcome = store.start("agent.py", "--fast", job_id="j")
    assert_type(outcome, snapstate.JobResult)
    assert_type(outcome.status, snapstate.JobStatus)
    assert_type(outcome.exit_code, int)
    assert_type(store.resume("j"), snapstate.JobResult)
    assert_type(store.job("j"), snapstate.JobView)
    assert_type(store.jobs(), list[snapstate.JobView])
    assert_type(store.job("j").pins, dict[str, Any])
    assert_type(store.job("j").status, snapstate.JobStatus)
    store.start("agent.py", 3)  # type: ignore[arg-type]
    store.resume()  # type: ignore[call-arg]


snapstate.Store()
snapstate.Store("/tmp/store")
snapstate.Store(3)  # type: ignore[arg-type]


# ---------------------------------------------------------------- the API's records
store = snapstate.Store()
outcome = store.start("agent.py")
waiting: bool = outcome.status == "waiting"  # a JobStatus compares with its string
done: bool = outcome.status is snapstate.JobStatus.DONE
status: str = outcome.status  # a JobStatus is a str
late: snapstate.JobStatus = "late"  # type: ignore[assignment]
outcome.status = snapstate.JobStatus.DONE  # type: ignore[misc]

# why a job waits
wait = outcome.wait
assert_type(wait, snapstate.WaitInfo | None)
if wait is not None:
    assert_type(wait.kind, str)
    assert_type(wait.due, float | None)
    assert_type(wait.approval_id, str | None)
    wait.due = 0.0  # type: ignore[misc]
outcome.wait.reason  # type: ignore[union-attr]  # noqa: B018

# approvals: plain data, the scope a dict, no digest
pending = store.approvals()
assert_type(pending, list[snapstate.ApprovalView])
assert_type(store.approvals(include_decided=True), list[snapstate.ApprovalView])
view = pending[0]
assert_type(view.scope, dict[str, Any])
assert_type(view.approvers, tuple[str, ...] | None)
assert_type(view.altered, bool)
assert_type(view.expires, float | None)
view.digest  # type: ignore[attr-defined]  # noqa: B018
view.scope = {}  # type: ignore[misc]
state: Literal["pending", "granted", "rejected", "expired"] = view.state
assert_type(store.approve("j", "a1", by="alice"), snapstate.ApprovalView)
assert_type(store.reject("j", "a1", reason="no"), snapstate.ApprovalView)
store.approve("j")  # type: ignore[call-arg]
store.approvals(True)  # type: ignore[call-arg]

# snapshots and effects
snaps = store.snapshots("j")
assert_type(snaps, list[snapstate.SnapshotView])
assert_type(snaps[0].seq, int)
assert_type(snaps[0].label, str | None)
assert_type(store.job("j").snapshots, tuple[snapstate.SnapshotView, ...])
effects = store.effects("j")
assert_type(effects, list[snapstate.EffectView])
assert_type(effects[0].attempts, int)
effect_state: Literal["dispatched", "confirmed", "failed", "ambiguous", "not-committed"] = effects[
    0
].state
effect_kind: Literal["write", "read", "value"] = effects[0].kind
bad_state: Literal["confirmed"] = effects[0].state  # type: ignore[assignment]
effects[0].digest  # type: ignore[attr-defined]  # noqa: B018
store.effects(3)  # type: ignore[arg-type]


# ---------------------------------------------------------------- errors
def handle(exc: snapstate.SnapstateError) -> str:
    return str(exc)


handle(snapstate.JobParked("effect 3 is ambiguous"))
handle(snapstate.IncompatibleSnapshot("code changed"))
handle(snapstate.TruncatedSnapshot("cut short"))
handle(snapstate.StaleWriter("taken over"))
handle(ValueError("not ours"))  # type: ignore[arg-type]

restore_error: snapstate.RestoreError = snapstate.IncompatibleSnapshot("x")
rejected: snapstate.SnapshotRejected = snapstate.TamperedSnapshot("x")
store_error: snapstate.StoreError = snapstate.LeaseHeld("x")
corrupt: snapstate.CorruptSnapshot = snapstate.TamperedSnapshot("x")  # type: ignore[assignment]
not_store: snapstate.StoreError = snapstate.StoreFailure("x")  # type: ignore[assignment]

try:
    snapshot("guarded")
except snapstate.SnapshotError as exc:
    assert_type(exc, snapstate.SnapshotError)

# ---------------------------------------------------------------- the package
assert_type(snapstate.__all__, list[str])
assert_type(snapstate.__version__, str)

# ---------------------------------------------------------------- approvals
approval = snapstate.request_approval("purchase", {"max_usd": 5}, expires_in=60.0)
assert_type(approval, snapstate.Approval)
assert_type(approval.scope, dict[str, Any])
assert_type(approval.expires, datetime.datetime | None)
try:
    snapstate.request_approval("purchase", {}, approvers=["alice"])
except snapstate.ApprovalRejected as refusal:
    assert_type(refusal.by, str | None)
approval_errors: list[type[snapstate.ApprovalError]] = [
    snapstate.ApprovalRejected,
    snapstate.ApprovalExpired,
    snapstate.ApprovalScopeError,
]

# ---------------------------------------------------------------- tasks
task = snapstate.spawn(lambda x: x + 1, 1)
assert_type(task, snapstate.Task)
assert_type(task.id, str)
assert_type(task.done(), bool)
assert_type(snapstate.gather(task, snapstate.spawn(print)), list[Any])
snapstate.gather(1)  # type: ignore[arg-type]

# ---------------------------------------------------------------- RateLimited
limited = snapstate.RateLimited(30.0, "quota")
assert_type(limited.retry_after, float | None)
assert_type(limited.message, str)
assert_type(snapstate.RateLimited(retry_after=5), snapstate.RateLimited)
assert isinstance(limited, snapstate.SnapstateError)
limited.retry_after = 3.0  # type: ignore[misc]
