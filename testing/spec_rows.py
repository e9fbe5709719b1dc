"""Spec: catalog rows are data, never code (serializers/_sql/_rows.py). The rows that
decide what code runs or what value the agent receives (a job's entry point and argv,
effect rows, approval rows with their decision, wait rows) are signed with the store's
key by the catalog that writes them and checked by the catalog that reads them: a row
written without the store's key (here: by a catalog holding another store's key, or
none) is refused with StoreDamaged naming the row, on every backend; a listing of the
whole store marks it damaged and goes on. Each spec runs under its capability."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from snapstate._errors import LeaseHeld, StoreDamaged
from snapstate.serializers._catalog import Catalog
from snapstate.serializers._sealing import PLAIN, Sealer
from snapstate.serializers._store import ApprovalRow, WaitRow

from ._support import (
    ENTRY,
    T0,
    Capability,
    Spec,
    effect,
    keyed,
    live_owner,
    make_job,
    requires,
)

__all__ = ["SignedRowsSpec"]


def _approval(job_id: str, approval_id: str = "a1", **kw: object) -> ApprovalRow:
    values: dict[str, object] = {
        "name": "purchase",
        "scope": '{"max_usd":5}',
        "digest": "d" * 64,
        "requested": T0,
        "expires": T0 + 3600,
        "approvers": ["alice"],
        "state": "pending",
        "site": "agent.py:7",
        **kw,
    }
    return ApprovalRow(job_id=job_id, approval_id=approval_id, **values)  # type: ignore[arg-type]


class SignedRowsSpec(Spec):
    """Signed rows, one spec per capability whose rows are signed."""

    capability = Capability.JOBS

    def test_a_job_row_without_the_store_key_is_refused(
        self, catalog: Catalog, tmp_path: Path, live_pid: int
    ) -> None:
        """A jobs row written under another key, or with none, is refused by get_job
        naming the job; list_jobs marks it damaged and lists the others as they are;
        a catalog that accepts unsigned rows (a store not signed yet) reads the
        unsigned one. set_entry re-signs a sound row, refuses a refused one and a job
        a live runner holds."""
        mine = keyed(catalog, tmp_path / "mine")
        make_job(catalog, "good")
        keyed(catalog, tmp_path / "theirs")
        catalog.create_job("forged", dict(ENTRY, module="evil"), ["--x", "1"])
        catalog.sealer = PLAIN  # type: ignore[attr-defined]
        make_job(catalog, "unsigned")
        catalog.sealer = mine  # type: ignore[attr-defined]
        with pytest.raises(StoreDamaged, match=r"jobs \(job forged"):
            catalog.get_job("forged")
        with pytest.raises(StoreDamaged, match=r"jobs \(job unsigned.*no signature"):
            catalog.get_job("unsigned")
        assert catalog.get_job("good").entry == ENTRY
        listed = {j.job_id: j for j in catalog.list_jobs()}
        assert listed["good"].damaged is None and listed["good"].entry == ENTRY
        for job_id in ("forged", "unsigned"):
            assert f"jobs (job {job_id}" in str(listed[job_id].damaged)
        catalog.sealer = Sealer(mine.keys, False, signed=False)  # type: ignore[attr-defined]
        assert catalog.get_job("unsigned").entry == ENTRY
        catalog.sealer = mine  # type: ignore[attr-defined]
        moved = dict(ENTRY, path="/agents/moved/agent.py")
        assert catalog.set_entry("good", moved).entry == ENTRY
        assert catalog.get_job("good").entry == moved
        with pytest.raises(StoreDamaged, match=r"jobs \(job forged"):
            catalog.set_entry("forged", moved)
        epoch = catalog.acquire_lease("good", live_owner(live_pid), 30)
        with pytest.raises(LeaseHeld):
            catalog.set_entry("good", ENTRY)
        catalog.release_lease("good", epoch)
        assert catalog.get_job("good").entry == moved

    @requires(Capability.LEDGER)
    def test_an_effect_row_without_the_store_key_is_refused(
        self, catalog: Catalog, tmp_path: Path
    ) -> None:
        """An effect row written under another key is refused by effect(), effect_by_key()
        and effects() naming the job and ordinal; the job's other rows read as they are."""
        mine = keyed(catalog, tmp_path / "mine")
        make_job(catalog)
        catalog.record_effects([effect(1)], epoch=None)
        keyed(catalog, tmp_path / "theirs")
        catalog.record_effects([effect(2, state="confirmed", result=b"theirs")], epoch=None)
        catalog.sealer = mine  # type: ignore[attr-defined]
        assert catalog.effect("job", 1) == effect(1)
        for read in (
            lambda: catalog.effect("job", 2),
            lambda: catalog.effect_by_key("job", "key-2"),
            lambda: catalog.effects("job"),
        ):
            with pytest.raises(StoreDamaged, match=r"effects \(job job, ordinal 2\)"):
                read()

    @requires(Capability.APPROVALS)
    def test_an_approval_row_without_the_store_key_is_refused_and_confined(
        self, catalog: Catalog, tmp_path: Path
    ) -> None:
        """An approval row (a forged decision) written under another key is refused by
        get_approval, the job's approvals() and decide_approval, naming the job and
        id; the whole store's approvals() marks it damaged and lists the others. A
        decision made through the catalog is signed with the store's key."""
        mine = keyed(catalog, tmp_path / "mine")
        make_job(catalog, "good")
        make_job(catalog, "victim")
        catalog.add_approval(_approval("good"), epoch=None)
        keyed(catalog, tmp_path / "theirs")
        forged = _approval("victim", state="granted", decided_by="alice", decided_at=T0)
        catalog.add_approval(forged, epoch=None)
        catalog.sealer = mine  # type: ignore[attr-defined]
        where = r"approvals \(job victim, approval a1\)"
        for read in (
            lambda: catalog.get_approval("victim", "a1"),
            lambda: catalog.approvals("victim"),
            lambda: catalog.decide_approval(
                "victim", "a1", granted=True, by="alice", note=None, at=T0
            ),
        ):
            with pytest.raises(StoreDamaged, match=where):
                read()
        listed = {a.job_id: a for a in catalog.approvals()}
        assert listed["good"] == _approval("good")
        assert "approvals (job victim, approval a1)" in str(listed["victim"].damaged)
        decided = catalog.decide_approval("good", "a1", granted=True, by="bob", note="ok", at=T0)
        assert catalog.get_approval("good", "a1") == decided

    @requires(Capability.WAITS)
    def test_a_wait_row_without_the_store_key_is_refused_and_confined(
        self, catalog: Catalog, tmp_path: Path, live_pid: int
    ) -> None:
        """A wait row written under another key is refused by get_wait naming the job;
        waits() marks it damaged and lists the others as they are."""
        mine = keyed(catalog, tmp_path / "mine")
        rows = {}
        for job_id, key in (("good", "mine"), ("victim", "theirs")):
            make_job(catalog, job_id)
            epoch = catalog.acquire_lease(job_id, live_owner(live_pid), 30)
            if key == "theirs":  # someone without the store's key writes it
                keyed(catalog, tmp_path / key)
            rows[job_id] = WaitRow(job_id, "timer", "sleep", T0 + 60, T0, 1)
            catalog.hibernate(rows[job_id], epoch=epoch)
        catalog.sealer = mine  # type: ignore[attr-defined]
        with pytest.raises(StoreDamaged, match=r"waits \(job victim\)"):
            catalog.get_wait("victim")
        assert catalog.get_wait("good") == rows["good"]
        listed = {w.job_id: w for w in catalog.waits()}
        assert listed["good"] == rows["good"]
        assert "waits (job victim)" in str(listed["victim"].damaged)
        assert listed["victim"].reason == ""  # nothing of a refused row is passed on
        assert dataclasses.replace(listed["victim"], damaged=None, reason="sleep") == rows["victim"]
