"""Spec: jobs (JobCatalog): create, read, list, status, delete."""

from __future__ import annotations

import pytest

from snapstate._errors import (
    JobExists,
    JobNotFound,
    StaleWriter,
    StoreError,
)
from snapstate.serializers._catalog import Catalog
from snapstate.serializers._store import (
    JobRow,
    Owner,
    WaitRow,
)

from ._support import (
    ENTRY,
    HOST,
    T0,
    Capability,
    FakeClock,
    Spec,
    live_owner,
    make_job,
    requires,
    row,
    state,
)

__all__ = ["JobsSpec"]


class JobsSpec(Spec):
    """The specs of JobCatalog."""

    capability = Capability.JOBS

    def test_create_and_get_job(self, catalog: Catalog, clock: FakeClock) -> None:
        """create_job stores every field (entry and argv round-trip), starts as running with
        no resumes, stamps created/updated with the catalog clock, and logs `created`."""
        created = make_job(catalog)
        got = catalog.get_job("job")
        assert got == created
        assert got == JobRow("job", ENTRY, ["--x", "1"], "running", T0, T0, 0, None, None, None)
        fork = catalog.create_job("child", ENTRY, [], parent="job", fork_seq=3)
        assert (fork.parent, fork.fork_seq) == ("job", 3)
        assert [e.kind for e in catalog.events("job")] == ["created"]
        assert [e.kind for e in catalog.events("child")] == ["created"]
        assert "job@3" in catalog.events("child")[0].detail

    def test_create_existing_job_raises_job_exists_and_changes_nothing(
        self, catalog: Catalog, clock: FakeClock
    ) -> None:
        """A taken id raises JobExists (a StoreError); the existing job is untouched."""
        make_job(catalog)
        before = state(catalog)
        clock.advance(5)
        with pytest.raises(JobExists, match="job"):
            catalog.create_job("job", {"module": "other", "function": "f"}, [])
        assert state(catalog) == before
        assert issubclass(JobExists, StoreError)

    def test_unknown_job_raises_job_not_found(self, catalog: Catalog) -> None:
        """get_job, set_status and acquire_lease of an unknown id raise JobNotFound."""
        make_job(catalog)
        with pytest.raises(JobNotFound, match="nope"):
            catalog.get_job("nope")
        with pytest.raises(JobNotFound):
            catalog.set_status("nope", "done")
        with pytest.raises(JobNotFound):
            catalog.acquire_lease("nope", Owner.me(), 30)
        assert [j.job_id for j in catalog.list_jobs()] == ["job"]

    def test_list_jobs_oldest_first(self, catalog: Catalog, clock: FakeClock) -> None:
        """list_jobs returns every job, oldest first (creation time, then id)."""
        assert catalog.list_jobs() == []
        make_job(catalog, "b")
        clock.advance(1)
        make_job(catalog, "a")
        make_job(catalog, "c")  # same time as "a": by id
        clock.advance(1)
        make_job(catalog, "0-last")
        assert [j.job_id for j in catalog.list_jobs()] == ["b", "a", "c", "0-last"]

    @requires(Capability.LEASES, Capability.SNAPSHOTS, Capability.WAITS)
    def test_job_listing_of_the_newest_jobs(
        self, catalog: Catalog, clock: FakeClock, live_pid: int
    ) -> None:
        """job_listing(limit) counts every job and gives the newest `limit` (all with
        None) oldest first, as list_jobs orders them, with the snapshot rows (by
        sequence), lease and wait row of exactly those jobs."""
        for job_id in ("a", "b", "c", "d"):
            make_job(catalog, job_id)
            clock.advance(1)
        for job_id, seqs in (("b", 2), ("c", 1), ("d", 3)):
            epoch = catalog.acquire_lease(job_id, live_owner(live_pid), 30)
            for seq in range(1, seqs + 1):
                catalog.commit_snapshot(row(seq, epoch, job_id, label=f"{job_id}{seq}"))
        wait = WaitRow("c", "timer", "sleep", T0 + 60, T0, 1)
        catalog.hibernate(wait, epoch=catalog.get_lease("c").epoch)  # type: ignore[union-attr]
        every = catalog.job_listing()
        assert every.total == 4 and [j.job_id for j in every.jobs] == ["a", "b", "c", "d"]
        assert list(every.jobs) == catalog.list_jobs()
        newest = catalog.job_listing(2)
        assert newest.total == 4 and [j.job_id for j in newest.jobs] == ["c", "d"]
        assert {k: [r.seq for r in v] for k, v in newest.snapshots.items()} == {
            "c": [1],
            "d": [1, 2, 3],
        }
        assert newest.snapshots["d"][2] == catalog.snapshots("d")[2]
        assert set(newest.leases) == {"c", "d"} and newest.leases["d"] == catalog.get_lease("d")
        assert dict(newest.waits) == {"c": catalog.get_wait("c")}
        assert "b" not in newest.snapshots and "b" in every.snapshots
        assert catalog.job_listing(10).jobs == every.jobs

    def test_set_status_without_epoch(self, catalog: Catalog, clock: FakeClock) -> None:
        """Without an epoch, set_status always applies: status, error and updated change
        and the status is logged with the error as detail."""
        make_job(catalog)
        clock.advance(7)
        catalog.set_status("job", "failed", error="ValueError: boom")
        job = catalog.get_job("job")
        assert (job.status, job.error, job.updated) == ("failed", "ValueError: boom", T0 + 7)
        catalog.set_status("job", "waiting")
        job = catalog.get_job("job")
        assert (job.status, job.error) == ("waiting", None)
        assert [(e.kind, e.detail) for e in catalog.events("job")][1:] == [
            ("failed", "ValueError: boom"),
            ("waiting", ""),
        ]

    def test_set_status_with_the_current_epoch(self, catalog: Catalog, live_pid: int) -> None:
        """With the lease's current epoch, set_status applies."""
        make_job(catalog)
        epoch = catalog.acquire_lease("job", live_owner(live_pid), 30)
        catalog.set_status("job", "done", epoch=epoch)
        assert catalog.get_job("job").status == "done"

    def test_set_status_with_a_stale_epoch_raises_and_changes_nothing(
        self, catalog: Catalog, clock: FakeClock, live_pid: int, dead_pid: int
    ) -> None:
        """With an epoch that no longer holds the lease (taken over, released, or never
        held), set_status raises StaleWriter and changes nothing: not the status, not the
        error, not `updated`, not the timeline."""
        make_job(catalog)
        first = catalog.acquire_lease("job", Owner(HOST, dead_pid), 30)
        second = catalog.acquire_lease("job", live_owner(live_pid), 30)  # dead pid: taken over
        assert second > first
        before = state(catalog)
        clock.advance(3)
        with pytest.raises(StaleWriter, match=f"epoch {first}"):
            catalog.set_status("job", "failed", epoch=first, error="stale")
        with pytest.raises(StaleWriter):
            catalog.set_status("job", "done", epoch=second + 1)
        assert state(catalog) == before
        catalog.release_lease("job", second)
        with pytest.raises(StaleWriter):
            catalog.set_status("job", "done", epoch=second)
        assert catalog.get_job("job").status == "running"

    def test_delete_job(self, catalog: Catalog, live_pid: int) -> None:
        """delete_job removes the job and all its rows (snapshots, lease, events); other
        jobs are untouched; the id is then free."""
        make_job(catalog)
        make_job(catalog, "other")
        for job_id in ("job", "other"):
            epoch = catalog.acquire_lease(job_id, live_owner(live_pid), 30)
            catalog.commit_snapshot(row(1, epoch, job_id))
        other = state(catalog, "other")
        catalog.delete_job("job")
        with pytest.raises(JobNotFound):
            catalog.get_job("job")
        assert catalog.snapshots("job") == [] and catalog.events("job") == []
        assert catalog.get_lease("job") is None
        assert [j.job_id for j in catalog.list_jobs()] == ["other"]
        assert state(catalog, "other") == other
        make_job(catalog)
        assert catalog.snapshots("job") == [] and catalog.get_lease("job") is None
