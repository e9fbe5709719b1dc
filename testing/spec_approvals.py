"""Spec: approvals (ApprovalCatalog): a pending row per request, kept as requested,
fenced by the lease, decided once (compare-and-swap)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from snapstate._errors import StaleWriter, StoreError
from snapstate.serializers._catalog import Catalog
from snapstate.serializers._store import ApprovalRow, Owner

from ._support import T0, Capability, FakeClock, Spec, live_owner, make_job, state

__all__ = ["ApprovalsSpec"]


def approval(approval_id: str = "a1", job_id: str = "job", **kw: Any) -> ApprovalRow:
    values: dict[str, Any] = {
        "name": "purchase",
        "scope": '{"amount":5,"item":"book"}',
        "digest": "d" * 64,
        "requested": T0,
        "expires": T0 + 3600,
        "approvers": ["alice", "bob"],
        "state": "pending",
        "site": "agent.py:7",
        **kw,
    }
    return ApprovalRow(job_id=job_id, approval_id=approval_id, **values)


class ApprovalsSpec(Spec):
    """The specs of ApprovalCatalog."""

    capability = Capability.APPROVALS

    def test_add_approval_round_trips_and_keeps_the_first_request(
        self, catalog: Catalog, live_pid: int
    ) -> None:
        """add_approval stores every field (approvers as a list, or None for anyone) and
        logs the request; adding the same id again returns the stored row unchanged
        (a re-executed request finds its own) and logs nothing."""
        make_job(catalog)
        epoch = catalog.acquire_lease("job", live_owner(live_pid), 30)
        first = approval()
        assert catalog.add_approval(first, epoch=epoch) == first
        assert catalog.get_approval("job", "a1") == first
        events = catalog.events("job")
        assert (events[-1].kind, events[-1].detail) == ("approval", "a1 requested: purchase")
        again = approval(name="other", scope="{}", requested=T0 + 9)
        assert catalog.add_approval(again, epoch=epoch) == first
        assert catalog.get_approval("job", "a1") == first
        assert catalog.events("job") == events
        anyone = approval("a2", approvers=None, expires=None)
        catalog.add_approval(anyone, epoch=epoch)
        assert catalog.get_approval("job", "a2") == anyone
        assert catalog.get_approval("job", "nope") is None
        assert catalog.get_approval("other", "a1") is None

    def test_add_approval_is_fenced(
        self, catalog: Catalog, clock: FakeClock, live_pid: int
    ) -> None:
        """With an epoch that lost the lease add_approval raises StaleWriter and records
        nothing; with epoch None it records without a lease."""
        make_job(catalog)
        old = catalog.acquire_lease("job", Owner("other-host", 1), 10)
        clock.advance(11)
        catalog.acquire_lease("job", live_owner(live_pid), 10)
        before = state(catalog)
        with pytest.raises(StaleWriter):
            catalog.add_approval(approval(), epoch=old)
        assert state(catalog) == before and catalog.approvals("job") == []
        catalog.add_approval(approval(), epoch=None)
        assert catalog.approvals("job") == [approval()]

    def test_a_decision_is_made_once(self, catalog: Catalog) -> None:
        """decide_approval turns a pending approval granted or rejected with who, when
        and the note, and logs it; deciding it again raises StoreError naming the
        decision already made, an unknown id raises StoreError, nothing changed."""
        make_job(catalog)
        catalog.add_approval(approval("a1"), epoch=None)
        catalog.add_approval(approval("a2"), epoch=None)
        granted = catalog.decide_approval("job", "a1", granted=True, by="bob", note="ok", at=T0 + 5)
        assert granted == dataclasses.replace(
            approval("a1"), state="granted", decided_by="bob", decided_at=T0 + 5, note="ok"
        )
        assert catalog.get_approval("job", "a1") == granted
        before = state(catalog), catalog.approvals("job")
        with pytest.raises(StoreError, match="already granted by bob"):
            catalog.decide_approval("job", "a1", granted=False, by="eve", note=None, at=T0 + 6)
        with pytest.raises(StoreError, match="no approval"):
            catalog.decide_approval("job", "a9", granted=True, by="bob", note=None, at=T0 + 6)
        assert (state(catalog), catalog.approvals("job")) == before
        rejected = catalog.decide_approval(
            "job", "a2", granted=False, by="alice", note=None, at=T0 + 7
        )
        assert (rejected.state, rejected.decided_by, rejected.note) == ("rejected", "alice", None)
        assert catalog.get_approval("job", "a2") == rejected
        assert [e.detail for e in catalog.events("job") if e.kind == "approval"][-2:] == [
            "a1 granted by bob",
            "a2 rejected by alice",
        ]

    def test_approvals_are_listed_oldest_first(self, catalog: Catalog) -> None:
        """approvals(job) lists one job's approvals by request time, then in the order
        they were added; approvals() lists every job's."""
        make_job(catalog)
        make_job(catalog, "other")
        rows = [
            approval("late", requested=T0 + 2),
            approval("early", "other", requested=T0),
            approval("b", requested=T0 + 1),
            approval("a", requested=T0 + 1),
        ]
        for r in rows:
            catalog.add_approval(r, epoch=None)
        assert catalog.approvals("job") == [rows[2], rows[3], rows[0]]
        assert catalog.approvals("other") == [rows[1]]
        assert catalog.approvals() == [rows[1], rows[2], rows[3], rows[0]]
        assert catalog.approvals("nobody") == []
