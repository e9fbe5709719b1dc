"""The Python API's public types (runtime/_api.py, exported from `snapstate`): what
Store returns is plain data of public classes (frozen dataclasses, a JobStatus enum),
never a catalog row; one status -> exit-code table answers for the API and the CLI;
and a status or an approval state no snapstate writes is refused as a damaged store
rather than handed out. Jobs run in this process on a real store (real SQLite, real
snapshot files); the CLI comparisons run real `snaprun` processes."""

from __future__ import annotations

import dataclasses
import json
import pickle
import sqlite3
import sys

import pytest
from helpers import clean_refusal, snaprun

import snapstate
from snapstate import (
    ApprovalView,
    EffectView,
    JobResult,
    JobStatus,
    JobView,
    SnapshotView,
    WaitInfo,
)
from snapstate.runtime._api import STATUS_EXIT_CODES, exit_code

BUYER = """\
import snapstate
from snapstate import effect, request_approval

@effect
def order(vendor, amount):
    return f"PO-{vendor}-{amount}"

def main():
    snapstate.snapshot("asked")
    ok = request_approval(
        "purchase", scope={"vendor": "acme", "max_usd": 500}, expires_in=86400,
        approvers=["alice"],
    )
    return [ok.by, order("acme", 420)]
"""

OUTCOMES = {  # agent source -> the status its run ends with
    "done": "def main():\n    return 1\n",
    "failed": "def main():\n    raise ValueError('no')\n",
    "waiting": "import snapstate\ndef main():\n    snapstate.sleep(86400)\n",
}


@pytest.fixture
def buyer(tmp_path, monkeypatch):
    folder = tmp_path / "agentdir"
    folder.mkdir()
    (folder / "types_buyer.py").write_text(BUYER)
    monkeypatch.chdir(tmp_path)
    yield snapstate.Store(tmp_path / "store"), folder / "types_buyer.py"
    sys.modules.pop("types_buyer", None)


FIELDS = {
    WaitInfo: ["kind", "reason", "due", "since", "seq", "approval_id"],
    SnapshotView: ["seq", "label", "created", "size", "epoch"],
    EffectView: [
        "ordinal",
        "name",
        "state",
        "kind",
        "key",
        "args",
        "call_site",
        "attempts",
        "note",
        "updated",
        "status",
        "model",
        "input_tokens",
        "output_tokens",
    ],
    ApprovalView: [
        "job_id",
        "approval_id",
        "name",
        "state",
        "scope",
        "requested",
        "expires",
        "approvers",
        "decided_by",
        "decided_at",
        "note",
        "site",
        "altered",
    ],
    JobResult: ["job_id", "status", "result", "error", "wait", "seq"],
    JobView: [
        "job_id",
        "status",
        "entry",
        "argv",
        "created",
        "updated",
        "resumes",
        "parent",
        "error",
        "snapshots",
        "effects",
        "wait",
        "meta",
        "pins",
    ],
}


@pytest.mark.parametrize("cls", list(FIELDS), ids=lambda c: c.__name__)
def test_records_are_frozen_dataclasses_of_plain_fields(cls):
    """Each public record is a frozen dataclass with exactly its documented fields, in
    order: no digest, no catalog row, no file path of the store."""
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen
    names = [f.name for f in dataclasses.fields(cls)]
    assert names == FIELDS[cls]
    assert not any("digest" in n or n in ("file", "row", "origin") for n in names)


def test_job_status_is_a_string_enum_with_one_exit_code_each():
    """JobStatus has the six statuses of the CLI contract; each member equals its string
    and prints, formats and dumps to JSON as it; every status has one exit code, the one
    JobResult.exit_code reports."""
    assert [s.value for s in JobStatus] == [
        "running",
        "waiting",
        "interrupted",
        "parked",
        "done",
        "failed",
    ]
    assert JobStatus.WAITING == "waiting" and f"{JobStatus.DONE}" == "done"
    assert json.dumps([JobStatus.PARKED]) == '["parked"]'
    assert set(STATUS_EXIT_CODES) == set(JobStatus)
    assert {s.value: JobResult("j", s).exit_code for s in JobStatus} == {
        "running": 5,
        "waiting": 3,
        "interrupted": 1,
        "parked": 4,
        "done": 0,
        "failed": 1,
    }
    assert pickle.loads(pickle.dumps(JobStatus.DONE)) is JobStatus.DONE


def test_an_approval_is_handed_out_as_plain_data(buyer):
    """start() waits at the approval: JobResult.wait is a WaitInfo naming it;
    store.approvals() lists an ApprovalView (its scope a dict, its approvers a tuple, no
    digest); approve() returns the decided view; with include_decided the granted one
    is still listed, without it nothing is pending; resume() ends done. Every record
    pickles by the public path."""
    store, script = buyer
    outcome = store.start(script, job_id="buy")
    assert outcome.status is JobStatus.WAITING and outcome.exit_code == 3
    assert type(outcome.wait) is WaitInfo
    assert (outcome.wait.kind, outcome.wait.approval_id, outcome.wait.seq) == ("approval", "a1", 2)
    (pending,) = store.approvals()
    assert type(pending) is ApprovalView
    assert (pending.job_id, pending.approval_id, pending.name, pending.state) == (
        "buy",
        "a1",
        "purchase",
        "pending",
    )
    assert pending.scope == {"vendor": "acme", "max_usd": 500}
    assert pending.approvers == ("alice",) and pending.altered is False
    assert pending.decided_by is None and pending.expires is not None
    assert not hasattr(pending, "digest")
    data = pickle.dumps(pending)
    assert b"snapstate.runtime" not in data and pickle.loads(data) == pending

    granted = store.approve("buy", "a1", by="alice", note="ok")
    assert type(granted) is ApprovalView
    assert (granted.state, granted.decided_by, granted.note) == ("granted", "alice", "ok")
    assert granted.scope == pending.scope and granted.decided_at is not None
    assert store.approvals() == []
    assert store.approvals(include_decided=True) == [granted]
    done = store.resume("buy")
    assert (done.status, done.result) == (JobStatus.DONE, ["alice", "PO-acme-420"])
    view = store.job("buy")
    assert view.status is JobStatus.DONE and view.wait is None


def test_snapshot_and_effect_listings(buyer):
    """store.snapshots() and store.effects() list SnapshotView and EffectView records
    equal to those of store.job(); an unknown job is JobNotFound, a bad id
    InvalidJobId."""
    store, script = buyer
    store.start(script, job_id="buy")
    store.approve("buy", "a1", by="alice")
    store.resume("buy")
    snapshots, effects = store.snapshots("buy"), store.effects("buy")
    assert all(type(s) is SnapshotView for s in snapshots)
    assert [s.seq for s in snapshots] == [1, 2]
    assert [s.label for s in snapshots][0] == "asked"
    assert tuple(snapshots) == store.job("buy").snapshots
    assert all(type(e) is EffectView for e in effects)
    assert tuple(effects) == store.job("buy").effects
    (order,) = [e for e in effects if e.name.endswith("order")]
    assert (order.state, order.kind, order.attempts) == ("confirmed", "write", 1)
    with pytest.raises(snapstate.JobNotFound):
        store.effects("nobody")
    with pytest.raises(snapstate.InvalidJobId):
        store.snapshots("../x")


def test_an_altered_approval_is_flagged_and_refused(buyer):
    """An approval whose request was edited in the catalog (its scope widened) is
    listed with altered=True (the edited scope shown as it now reads) and approve()
    refuses it as a damaged store; nothing is decided."""
    store, script = buyer
    store.start(script, job_id="buy")
    with sqlite3.connect(f"{store.path}/catalog.db") as db:
        db.execute("UPDATE approvals SET scope = ? WHERE job_id = 'buy'", ('{"max_usd":99999}',))
    db.close()
    (edited,) = store.approvals()
    assert edited.altered is True and edited.scope == {"max_usd": 99999}
    with pytest.raises(snapstate.StoreDamaged, match="altered"):
        store.approve("buy", "a1", by="alice")
    assert store.approvals()[0].state == "pending"


def test_a_status_no_snapstate_writes_is_a_damaged_store(buyer):
    """A job whose catalog row was edited to a status outside JobStatus is never handed
    out as a view: store.jobs() raises StoreDamaged naming the job and the value, and
    `snaprun ls` refuses with exit 2 and one error line."""
    store, script = buyer
    store.start(script, job_id="buy")
    with sqlite3.connect(f"{store.path}/catalog.db") as db:
        db.execute("UPDATE jobs SET status = 'paused' WHERE job_id = 'buy'")
    db.close()
    with pytest.raises(snapstate.StoreDamaged, match="buy.*'paused'"):
        store.jobs()
    listed = snaprun("ls", "--store", store.path, cwd=script.parent)
    clean_refusal(listed, "'paused'", "buy")


@pytest.mark.parametrize("status", list(OUTCOMES))
def test_the_cli_ends_with_the_exit_code_the_api_reports(tmp_path, monkeypatch, status):
    """The same agent run by Store.start() and by `snaprun run` ends with the same
    status and exit code: the CLI's code is the API's table's."""
    folder = tmp_path / "agentdir"
    folder.mkdir()
    script = folder / f"types_{status}.py"
    script.write_text(OUTCOMES[status])
    monkeypatch.chdir(tmp_path)
    try:
        outcome = snapstate.Store(tmp_path / "api").start(script, job_id="j")
    finally:
        sys.modules.pop(script.stem, None)
    assert outcome.status == status
    run = snaprun("run", "--store", tmp_path / "cli", "--job", "j", script, cwd=tmp_path)
    assert run.returncode == outcome.exit_code == STATUS_EXIT_CODES[JobStatus(status)]
    assert "Traceback" not in run.stderr or status == "failed"
    listed = json.loads(snaprun("ls", "--store", tmp_path / "cli", "--json", cwd=tmp_path).stdout)
    assert [r["status"] for r in listed] == [status]


def test_error_exit_codes_come_from_one_table():
    """The CLI's exit code of an error is the API's: the package re-exports the same
    table and function, and the classes the API raises map as documented."""
    from snapstate.runtime import _cli

    assert _cli.EXIT_CODES is snapstate.runtime._api.EXIT_CODES
    assert _cli.exit_code is exit_code
    assert exit_code(snapstate.LeaseHeld("x")) == 5
    assert exit_code(snapstate.StoreDamaged("x")) == 2
    assert exit_code(snapstate.StoreFailure("x")) == 1
    assert exit_code(ValueError("x")) == 1
