"""Spec: waits (WaitCatalog): a hibernated job's status and wait row written together
under the lease's fence, and dropped when a runner takes the job again."""

from __future__ import annotations

import pytest

from snapstate._errors import StaleWriter
from snapstate.serializers._catalog import Catalog
from snapstate.serializers._store import Owner, WaitRow

from ._support import T0, Capability, FakeClock, Spec, lease, live_owner, make_job, state

__all__ = ["WaitsSpec"]


def wait(job_id: str = "job", due: float | None = T0 + 60, since: float = T0) -> WaitRow:
    return WaitRow(job_id, "timer", "sleep until the report is due", due, since, 2)


class WaitsSpec(Spec):
    """The specs of WaitCatalog."""

    capability = Capability.WAITS

    def test_hibernate_records_the_wait_and_the_status_together(
        self, catalog: Catalog, clock: FakeClock, live_pid: int
    ) -> None:
        """hibernate sets the job waiting (no error) and stores its wait row with every
        field, logs the reason, and keeps the lease."""
        make_job(catalog)
        epoch = catalog.acquire_lease("job", live_owner(live_pid), 30)
        catalog.set_status("job", "running", epoch=epoch, error="earlier")
        clock.advance(4)
        row = WaitRow("job", "approval", "approval a1 (by alice)", None, T0 + 4, 3, "a1")
        catalog.hibernate(row, epoch=epoch)
        job = catalog.get_job("job")
        assert (job.status, job.error, job.updated) == ("waiting", None, T0 + 4)
        assert catalog.get_wait("job") == row
        assert catalog.waits() == [row]
        events = catalog.events("job")
        assert (events[-1].kind, events[-1].detail) == ("waiting", "approval a1 (by alice)")
        assert lease(catalog).epoch == epoch
        assert catalog.get_wait("other") is None

    def test_hibernate_with_a_stale_epoch_changes_nothing(
        self, catalog: Catalog, clock: FakeClock, live_pid: int
    ) -> None:
        """A writer whose epoch lost the lease cannot hibernate the job: StaleWriter,
        no wait row, status and timeline unchanged."""
        make_job(catalog)
        old = catalog.acquire_lease("job", Owner("other-host", 1), 10)
        clock.advance(11)
        catalog.acquire_lease("job", live_owner(live_pid), 10)
        before = state(catalog)
        with pytest.raises(StaleWriter):
            catalog.hibernate(wait(), epoch=old)
        assert state(catalog) == before
        assert catalog.get_wait("job") is None and catalog.waits() == []

    def test_taking_the_lease_drops_the_wait(self, catalog: Catalog, live_pid: int) -> None:
        """A runner that takes the job's lease polls the wait again: the wait row is
        gone and the job runs; waits() lists the remaining ones by start time."""
        for job_id, since in (("job", T0 + 2), ("second", T0 + 1), ("third", T0 + 3)):
            make_job(catalog, job_id)
            epoch = catalog.acquire_lease(job_id, live_owner(live_pid), 30)
            catalog.hibernate(wait(job_id, since=since), epoch=epoch)
            catalog.release_lease(job_id, epoch)
        assert [w.job_id for w in catalog.waits()] == ["second", "job", "third"]
        catalog.acquire_lease("job", live_owner(live_pid), 30, resuming=True)
        assert catalog.get_wait("job") is None
        assert catalog.get_job("job").status == "running"
        assert [w.job_id for w in catalog.waits()] == ["second", "third"]
