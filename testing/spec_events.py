"""Spec: the job's timeline and counters (EventCatalog)."""

from __future__ import annotations

from snapstate.serializers._catalog import Catalog
from snapstate.serializers._store import (
    EventRow,
    Owner,
)

from ._support import (
    T0,
    Capability,
    CatalogBackend,
    FakeClock,
    Spec,
    make_job,
    row,
)

__all__ = ["EventsSpec"]


class EventsSpec(Spec):
    """The specs of EventCatalog."""

    capability = Capability.EVENTS

    def test_events_are_kept_in_order(self, catalog_backend: CatalogBackend) -> None:
        """events() returns the job's timeline in the order it happened, even when the
        clock stands still or goes backwards; other jobs' events are not mixed in."""
        clock = FakeClock()
        catalog = catalog_backend.open(clock=clock)
        make_job(catalog)
        make_job(catalog, "other")
        epoch = catalog.acquire_lease("job", Owner("other-host", 1), 30)
        catalog.commit_snapshot(row(1, epoch))
        clock.advance(-100)
        catalog.log_event("job", "note", "clock went back")
        catalog.log_event("other", "note", "not mine")
        catalog.commit_snapshot(row(2, epoch, label="two"))
        catalog.set_status("job", "done", epoch=epoch)
        events = catalog.events("job")
        assert [(e.kind, e.detail) for e in events] == [
            ("created", "entry /agents/agent.py"),
            ("lease", "epoch 1 taken by pid 1 on other-host"),
            ("snapshot", "1"),
            ("note", "clock went back"),
            ("snapshot", "2 (two)"),
            ("done", ""),
        ]
        assert all(isinstance(e, EventRow) and e.job_id == "job" for e in events)
        assert [e.at for e in events][:3] == [T0, T0, T0]
        assert [(e.kind, e.detail) for e in catalog.events("other")] == [
            ("created", "entry /agents/agent.py"),
            ("note", "not mine"),
        ]

    def test_metrics(self, catalog: Catalog) -> None:
        """bump_metric adds to a counter (starting from nothing), set_metric overwrites;
        metrics() returns the job's own, and delete_job removes them."""
        make_job(catalog)
        make_job(catalog, "other")
        assert catalog.metrics("job") == {}
        catalog.bump_metric("job", "retries")
        catalog.bump_metric("job", "retries", by=4)
        catalog.set_metric("job", "restart_to_progress_s", 1.5)
        catalog.set_metric("job", "restart_to_progress_s", 0.25)
        catalog.bump_metric("other", "retries")
        assert catalog.metrics("job") == {"retries": 5, "restart_to_progress_s": 0.25}
        catalog.delete_job("job")
        assert catalog.metrics("job") == {}
        assert catalog.metrics("other") == {"retries": 1}
