"""Spec: snapshot rows (SnapshotCatalog): compare-and-swap commits under the lease's
fence, deletion (a rewind), rows copied in without a lease."""

from __future__ import annotations

import pytest

from snapstate._errors import (
    SnapshotNotFound,
    StaleWriter,
    StoreError,
)
from snapstate.serializers._catalog import Catalog
from snapstate.serializers._store import Owner

from ._support import (
    T0,
    Capability,
    FakeClock,
    Spec,
    live_owner,
    make_job,
    row,
    state,
)

__all__ = ["SnapshotsSpec"]


class SnapshotsSpec(Spec):
    """The specs of SnapshotCatalog."""

    capability = Capability.SNAPSHOTS

    @pytest.mark.smoke
    def test_commit_snapshot_in_sequence(
        self, catalog: Catalog, clock: FakeClock, live_pid: int
    ) -> None:
        """commit_snapshot records seq = latest + 1 with every field, moves the job's
        `updated` to the snapshot's time and logs it; snapshots() lists by sequence."""
        make_job(catalog)
        epoch = catalog.acquire_lease("job", live_owner(live_pid), 30)
        assert catalog.latest("job") is None
        rows = [
            row(1, epoch, label="first", created=T0 + 1),
            row(2, epoch, created=T0 + 2),
            row(3, epoch, label="x", created=T0 + 3),
        ]
        for r in rows:
            catalog.commit_snapshot(r)
        assert catalog.snapshots("job") == rows
        assert catalog.latest("job") == rows[-1]
        assert catalog.snapshot("job", 2) == rows[1]
        assert catalog.get_job("job").updated == T0 + 3
        assert [e.detail for e in catalog.events("job") if e.kind == "snapshot"] == [
            "1 (first)",
            "2",
            "3 (x)",
        ]
        with pytest.raises(SnapshotNotFound, match="4"):
            catalog.snapshot("job", 4)

    def test_commit_snapshot_seq_must_be_latest_plus_one(
        self, catalog: Catalog, live_pid: int
    ) -> None:
        """A commit whose seq is not latest + 1 (a repeat, a gap, a step back) raises
        StaleWriter and changes nothing."""
        make_job(catalog)
        epoch = catalog.acquire_lease("job", live_owner(live_pid), 30)
        catalog.commit_snapshot(row(1, epoch))
        catalog.commit_snapshot(row(2, epoch))
        before = state(catalog)
        for seq in (1, 2, 4, 10, 0):
            with pytest.raises(StaleWriter):
                catalog.commit_snapshot(row(seq, epoch, label="intruder"))
            assert state(catalog) == before, seq
        catalog.commit_snapshot(row(3, epoch))
        assert [r.seq for r in catalog.snapshots("job")] == [1, 2, 3]

    def test_stale_writer_commit_changes_nothing(
        self, catalog: Catalog, clock: FakeClock, live_pid: int
    ) -> None:
        """The commit of a writer whose epoch lost the lease raises StaleWriter even with
        the right seq, and leaves snapshots(), events(), get_job() and the lease unchanged;
        the same holds with no lease at all (released)."""
        make_job(catalog)
        old = catalog.acquire_lease("job", Owner("other-host", 4242), 10)
        catalog.commit_snapshot(row(1, old))
        clock.advance(11)
        new = catalog.acquire_lease("job", live_owner(live_pid), 10, resuming=True)
        before = state(catalog)
        clock.advance(1)
        with pytest.raises(StaleWriter, match=f"epoch {old}"):
            catalog.commit_snapshot(row(2, old, created=clock()))
        assert state(catalog) == before
        catalog.commit_snapshot(row(2, new))
        catalog.release_lease("job", new)
        before = state(catalog)
        with pytest.raises(StaleWriter):
            catalog.commit_snapshot(row(3, new))
        assert state(catalog) == before

    def test_commit_needs_a_lease(self, catalog: Catalog) -> None:
        """A job nobody holds accepts no fenced commit (epoch 0 or any other)."""
        make_job(catalog)
        before = state(catalog)
        for epoch in (0, 1):
            with pytest.raises(StaleWriter):
                catalog.commit_snapshot(row(1, epoch))
        assert state(catalog) == before

    def test_delete_snapshot(self, catalog: Catalog, live_pid: int) -> None:
        """delete_snapshot forgets one row (others stay); the sequence then continues from
        the new latest (a rewind); deleting a missing row is a no-op."""
        make_job(catalog)
        epoch = catalog.acquire_lease("job", live_owner(live_pid), 30)
        for seq in (1, 2, 3):
            catalog.commit_snapshot(row(seq, epoch))
        catalog.delete_snapshot("job", 3)
        catalog.delete_snapshot("job", 2)
        catalog.delete_snapshot("job", 7)
        assert [r.seq for r in catalog.snapshots("job")] == [1]
        with pytest.raises(StaleWriter):
            catalog.commit_snapshot(row(3, epoch))
        catalog.commit_snapshot(row(2, epoch, label="again"))
        assert [(r.seq, r.label) for r in catalog.snapshots("job")] == [(1, None), (2, "again")]

    def test_add_snapshot_unfenced(self, catalog: Catalog, live_pid: int) -> None:
        """add_snapshot_unfenced records rows with no lease (fork, import), in any order;
        a taken seq raises StoreError and keeps the original row; fenced commits continue
        after the imported latest."""
        make_job(catalog)
        imported = [row(3, 0, label="c"), row(1, 0, label="a")]
        for r in imported:
            catalog.add_snapshot_unfenced(r)
        assert catalog.snapshots("job") == sorted(imported, key=lambda r: r.seq)
        with pytest.raises(StoreError, match="3"):
            catalog.add_snapshot_unfenced(row(3, 0, label="dup"))
        assert catalog.snapshot("job", 3).label == "c"
        epoch = catalog.acquire_lease("job", live_owner(live_pid), 30)
        catalog.commit_snapshot(row(4, epoch))
        assert [r.seq for r in catalog.snapshots("job")] == [1, 3, 4]
