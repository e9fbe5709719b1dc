"""Spec: operations on whole jobs (AdminCatalog): fork, import, prune, rebuild, and a
whole job's rows read and written (`snaprun migrate-store`), each one transaction with
its checks inside it."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from snapstate._errors import (
    ChunksMissing,
    JobExists,
    JobNotFound,
    LeaseHeld,
    SnapshotNotFound,
    StoreError,
)
from snapstate.serializers._catalog import Catalog
from snapstate.serializers._store import (
    ApprovalRow,
    JobCopy,
    JobRow,
    StoredChunk,
    WaitRow,
)

from ._support import (
    ENTRY,
    T0,
    Capability,
    FakeClock,
    Spec,
    body,
    chunk_id,
    chunked_row,
    effect,
    keyed,
    live_owner,
    make_job,
    requires,
    row,
    state,
)

__all__ = ["AdminSpec"]


class AdminSpec(Spec):
    """The specs of AdminCatalog."""

    capability = Capability.ADMIN

    @requires(Capability.LEDGER)
    def test_fork_job_copies_rows_and_inherited_effects_in_one_transaction(
        self, catalog: Catalog, live_pid: int
    ) -> None:
        """fork_job creates the job with the parent's snapshot rows up to the fork point
        (the copies as given, epoch 0) and its ledger rows up to the inherited count, whatever
        the parent's lease; a taken id, a missing parent or snapshot, or files that no
        longer match the parent's rows raise with nothing changed."""
        make_job(catalog)
        epoch = catalog.acquire_lease("job", live_owner(live_pid), 30)
        for seq in (1, 2, 3):
            catalog.commit_snapshot(row(seq, epoch, label=f"l{seq}"))
        catalog.record_effects([effect(1), effect(2), effect(3)], epoch=epoch)
        make_job(catalog, "taken")
        before = state(catalog), state(catalog, "taken"), catalog.effects("job")
        files = {
            seq: dataclasses.replace(
                row(seq, 0, label=f"l{seq}"), job_id="twin", file=f"snapshots/twin/{seq}"
            )
            for seq in (1, 2)
        }
        for args, error in (
            (("job", 2, "taken", files, 1), JobExists),
            (("nope", 2, "twin", files, 1), JobNotFound),
            (("job", 7, "twin", files, 1), SnapshotNotFound),
            (("job", 3, "twin", files, 1), StoreError),
        ):
            with pytest.raises(error):
                catalog.fork_job(*args)
            with pytest.raises(JobNotFound):
                catalog.get_job("twin")
            assert (state(catalog), state(catalog, "taken"), catalog.effects("job")) == before
        twin = catalog.fork_job("job", 2, "twin", files, 1)
        assert (twin.job_id, twin.parent, twin.fork_seq, twin.status, twin.entry, twin.argv) == (
            "twin",
            "job",
            2,
            "running",
            ENTRY,
            ["--x", "1"],
        )
        assert [(r.seq, r.label, r.file, r.epoch) for r in catalog.snapshots("twin")] == [
            (1, "l1", "snapshots/twin/1", 0),
            (2, "l2", "snapshots/twin/2", 0),
        ]
        assert catalog.effects("twin") == [dataclasses.replace(effect(1), job_id="twin")]
        assert catalog.get_lease("twin") is None
        assert ("forked", "snapshot 2 as job twin") in [
            (e.kind, e.detail) for e in catalog.events("job")
        ]

    def test_import_job_creates_the_job_and_its_row_in_one_transaction(
        self, catalog: Catalog
    ) -> None:
        """import_job creates a job holding one snapshot row; a taken id raises JobExists
        and changes nothing."""
        make_job(catalog)
        before = state(catalog)
        with pytest.raises(JobExists):
            catalog.import_job("job", ENTRY, [], row(3, 0), parent="x", source="/tmp/f.snap")
        assert state(catalog) == before
        job = catalog.import_job(
            "copy", ENTRY, ["a"], row(3, 0, "copy", label="c"), parent="job", source="/tmp/f.snap"
        )
        assert (job.parent, job.fork_seq, job.argv) == ("job", 3, ["a"])
        assert catalog.snapshots("copy") == [row(3, 0, "copy", label="c")]
        assert [e.kind for e in catalog.events("copy")] == ["created", "imported"]

    def test_prune_job_is_guarded_by_the_lease(
        self, catalog: Catalog, clock: FakeClock, live_pid: int
    ) -> None:
        """prune_job drops a done job entirely (with finished) or the snapshots beyond the
        rules, never the latest, and returns what it dropped; while a live lease holds the
        job it raises LeaseHeld with nothing changed."""
        make_job(catalog)
        epoch = catalog.acquire_lease("job", live_owner(live_pid), 30)
        for seq in (1, 2, 3, 4):
            catalog.commit_snapshot(row(seq, epoch, created=T0 + seq))
        before = state(catalog)
        with pytest.raises(LeaseHeld):
            catalog.prune_job("job", finished=True, keep_last=1, older_than=None)
        assert state(catalog) == before
        catalog.release_lease("job", epoch)
        assert catalog.prune_job("job", finished=False, keep_last=None, older_than=None) == (
            False,
            [],
        )
        dropped, rows = catalog.prune_job("job", finished=False, keep_last=3, older_than=T0 + 3)
        assert (dropped, [r.seq for r in rows]) == (False, [1, 2])
        dropped, rows = catalog.prune_job("job", finished=False, keep_last=None, older_than=T0 + 99)
        assert (dropped, [r.seq for r in rows]) == (False, [3])
        assert [r.seq for r in catalog.snapshots("job")] == [4]
        assert catalog.prune_job("job", finished=True, keep_last=None, older_than=None) == (
            False,
            [],
        )
        catalog.set_status("job", "done")
        dropped, rows = catalog.prune_job("job", finished=True, keep_last=None, older_than=None)
        assert (dropped, [r.seq for r in rows]) == (True, [4])
        with pytest.raises(JobNotFound):
            catalog.get_job("job")

    def test_rebuild_job_recreates_the_job_its_rows_and_metrics(
        self, catalog: Catalog, live_pid: int
    ) -> None:
        """rebuild_job (`snaprun repair`) recreates a job exactly as given (status,
        error, times, resume count, parent), its snapshot rows and metrics, with its
        next lease epoch above the one given; a taken id raises JobExists with nothing
        changed."""
        job = JobRow("job", ENTRY, ["a"], "failed", T0 - 50, T0 - 5, 3, "up", 2, "rebuilt: lost")
        rows = [row(1, 4), row(2, 7, label="two")]
        catalog.rebuild_job(job, 7, rows, {"repair_unaccepted": 1.0})
        assert catalog.get_job("job") == job
        assert catalog.snapshots("job") == rows
        assert catalog.metrics("job") == {"repair_unaccepted": 1.0}
        assert [(e.kind, e.detail) for e in catalog.events("job")] == [("rebuilt", "rebuilt: lost")]
        before = state(catalog), catalog.metrics("job")
        with pytest.raises(JobExists):
            catalog.rebuild_job(dataclasses.replace(job, status="done"), 9, [], None)
        assert (state(catalog), catalog.metrics("job")) == before
        assert catalog.acquire_lease("job", live_owner(live_pid), 30) == 8

    @requires(Capability.LEDGER, Capability.APPROVALS, Capability.WAITS, Capability.CHUNKS)
    def test_a_whole_job_is_read_and_written_back_with_every_row(
        self, catalog: Catalog, clock: FakeClock, live_pid: int, tmp_path: Path
    ) -> None:
        """read_job_copy returns every row of a job as its own readers do (the job, its
        epoch counter, snapshots, ledger, approvals, wait, timeline, metrics, lease);
        insert_job_copy writes such a copy as a new job in one transaction, every row as
        given (status, times, counters, its epoch counter: the next lease is above it),
        signed by this catalog, with one more event ("migrated") and no lease. A taken
        id raises JobExists, a chunk missing ChunksMissing, with nothing written."""
        keyed(catalog, tmp_path)  # rows signed and checked, as in a store
        make_job(catalog)
        epoch = catalog.acquire_lease("job", live_owner(live_pid), 30)
        ids = [chunk_id(1), chunk_id(2)]
        new = [StoredChunk(i, 1000, b"chunk bytes") for i in ids]
        catalog.commit_snapshot(chunked_row(1, epoch, label="one"), body(ids, new))
        catalog.record_effects([effect(1, state="confirmed"), effect(2, result=None)], epoch=epoch)
        request = ApprovalRow(
            "job", "a1", "purchase", '{"max":5}', "d" * 64, T0, T0 + 60, ["ana"], "pending"
        )
        catalog.add_approval(request, epoch=epoch)
        catalog.decide_approval("job", "a1", granted=True, by="ana", note="ok", at=T0 + 1)
        catalog.set_metric("job", "served_from_ledger", 2)
        clock.advance(3)
        wait = WaitRow("job", "approval", "approval a1", None, T0 + 3, 1, "a1")
        catalog.hibernate(wait, epoch=epoch)
        copy = catalog.read_job_copy("job")
        assert copy.job == catalog.get_job("job") and copy.job.status == "waiting"
        assert copy.epoch == epoch and copy.lease == catalog.get_lease("job")
        assert list(copy.snapshots) == catalog.snapshots("job")
        assert list(copy.effects) == catalog.effects("job")
        assert list(copy.approvals) == catalog.approvals("job")
        assert copy.wait == catalog.get_wait("job") == wait
        assert list(copy.events) == catalog.events("job")
        assert dict(copy.metrics) == catalog.metrics("job") == {"served_from_ledger": 2}
        with pytest.raises(JobNotFound):
            catalog.read_job_copy("nope")

        def moved(job_id: str) -> JobCopy:
            def to(rows: tuple[Any, ...]) -> tuple[Any, ...]:
                return tuple(dataclasses.replace(r, job_id=job_id) for r in rows)

            return JobCopy(
                dataclasses.replace(copy.job, job_id=job_id),
                copy.epoch,
                to(copy.snapshots),
                to(copy.effects),
                to(copy.approvals),
                dataclasses.replace(wait, job_id=job_id),
                to(copy.events),
                copy.metrics,
                copy.lease,
            )

        clock.advance(5)
        twin = moved("twin")
        written = catalog.insert_job_copy(twin, {1: body(ids)}, "from elsewhere")
        assert written == twin.job
        again = catalog.read_job_copy("twin")
        assert again.job == twin.job and again.epoch == epoch and again.lease is None
        assert (again.snapshots, again.effects, again.approvals) == (
            twin.snapshots,
            twin.effects,
            twin.approvals,
        )
        assert again.wait == twin.wait and dict(again.metrics) == dict(twin.metrics)
        assert again.events[:-1] == twin.events
        last = again.events[-1]
        assert (last.kind, last.detail, last.at) == ("migrated", "from elsewhere", T0 + 8)
        assert catalog.manifest("twin", 1) == catalog.manifest("job", 1)
        assert sorted(catalog.runnable_jobs(T0 + 9)) == ["job", "twin"]  # the decision stands
        before = catalog.read_job_copy("twin")
        with pytest.raises(JobExists):
            catalog.insert_job_copy(twin, {1: body(ids)}, "twice")
        assert catalog.read_job_copy("twin") == before
        with pytest.raises(ChunksMissing):
            catalog.insert_job_copy(moved("third"), {1: body([chunk_id(9)])}, "x")
        with pytest.raises(JobNotFound):
            catalog.get_job("third")
        assert catalog.effects("third") == [] and catalog.events("third") == []
        assert catalog.acquire_lease("twin", live_owner(live_pid), 30) == epoch + 1
