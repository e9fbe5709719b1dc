"""Spec: what `snaprun worker` asks of a catalog (WorkerCatalog): the jobs it may
start now, its advisory claims on them, and giving up on a job whose runners die."""

from __future__ import annotations

from snapstate.serializers._catalog import Catalog
from snapstate.serializers._store import ApprovalRow, Owner, WaitRow

from ._support import (
    HOST,
    T0,
    Capability,
    FakeClock,
    Spec,
    lease,
    live_owner,
    make_job,
    requires,
)

__all__ = ["WorkerSpec"]


class WorkerSpec(Spec):
    """The specs of WorkerCatalog."""

    capability = Capability.WORKER

    @requires(Capability.WAITS, Capability.APPROVALS)
    def test_runnable_jobs(
        self, catalog: Catalog, clock: FakeClock, live_pid: int, dead_pid: int
    ) -> None:
        """runnable_jobs(now): waiting jobs that are due by `now` or whose approval was
        decided (by due time, or wait start), then running jobs whose runner is gone
        (no lease, an expired one, a dead process), oldest first; never a job a live
        runner holds, one waiting for later, or one whose approval is pending."""
        make_job(catalog, "no-lease")
        clock.advance(1)
        make_job(catalog, "dead-runner")
        catalog.acquire_lease("dead-runner", Owner(HOST, dead_pid), 30)
        make_job(catalog, "live-runner")
        catalog.acquire_lease("live-runner", live_owner(live_pid), 30)
        for job_id, due, since, approval_id in (
            ("due", T0 + 10, T0 + 2, None),
            ("later", T0 + 100, T0 + 2, None),
            ("approval", None, T0 + 3, "a1"),
        ):
            make_job(catalog, job_id)
            epoch = catalog.acquire_lease(job_id, Owner("other-host", 1), 30)
            if approval_id:
                catalog.add_approval(
                    ApprovalRow(job_id, approval_id, "pay", "{}", "d", T0, None, None, "pending"),
                    epoch=epoch,
                )
            kind = "approval" if approval_id else "timer"
            catalog.hibernate(WaitRow(job_id, kind, kind, due, since, 1, approval_id), epoch=epoch)
        assert catalog.runnable_jobs(T0 + 10) == ["due", "no-lease", "dead-runner"]
        assert catalog.runnable_jobs(T0 + 9) == ["no-lease", "dead-runner"]
        catalog.decide_approval("approval", "a1", granted=False, by="bob", note=None, at=T0 + 4)
        assert catalog.runnable_jobs(T0 + 10) == ["approval", "due", "no-lease", "dead-runner"]
        # once the live runner's lease has expired, its job is runnable too
        assert "live-runner" in catalog.runnable_jobs(lease(catalog, "live-runner").expires)

    def test_stopped_jobs(self, catalog: Catalog, clock: FakeClock) -> None:
        """stopped_jobs lists the interrupted jobs, oldest update first."""
        for job_id in ("a", "b", "c", "d"):
            make_job(catalog, job_id)
        assert catalog.stopped_jobs() == []
        catalog.set_status("b", "interrupted")
        clock.advance(1)
        catalog.set_status("a", "interrupted")
        catalog.set_status("c", "failed", error="boom")
        assert catalog.stopped_jobs() == ["b", "a"]

    def test_claims_are_exclusive_while_their_owner_lives(
        self, catalog: Catalog, clock: FakeClock, live_pid: int, dead_pid: int
    ) -> None:
        """claim_job: True for the first owner and again for the same owner; False for
        another while the claim is live; True once the claim expired, its owner's
        process is gone, or its owner released it (one job, or all its claims)."""
        make_job(catalog)
        make_job(catalog, "other")
        me, rival = Owner.me(), live_owner(live_pid)
        assert catalog.claim_job("job", me, 30)
        assert catalog.claim_job("job", me, 30)
        assert not catalog.claim_job("job", rival, 30)
        clock.advance(30)  # expired
        assert catalog.claim_job("job", rival, 30)
        assert not catalog.claim_job("job", me, 30)
        catalog.release_claims(rival, "job")
        assert catalog.claim_job("job", me, 30)
        assert catalog.claim_job("other", me, 30)
        catalog.release_claims(me)
        assert catalog.claim_job("job", rival, 30) and catalog.claim_job("other", rival, 30)
        catalog.release_claims(rival)
        assert catalog.claim_job("job", Owner(HOST, dead_pid), 30)
        assert catalog.claim_job("job", me, 30)  # the dead owner's claim is not live

    def test_give_up_job(self, catalog: Catalog, clock: FakeClock, live_pid: int) -> None:
        """give_up_job marks a running job with no live lease, or an interrupted one,
        failed with the error (its lease dropped, the failure logged) and returns True;
        it leaves a job a live runner holds, a finished or unknown one, and says False."""
        make_job(catalog, "held")
        catalog.acquire_lease("held", live_owner(live_pid), 30)
        make_job(catalog, "expired")
        catalog.acquire_lease("expired", Owner("other-host", 1), 5)
        make_job(catalog, "stopped")
        catalog.set_status("stopped", "interrupted")
        make_job(catalog, "finished")
        catalog.set_status("finished", "done")
        clock.advance(6)
        assert not catalog.give_up_job("held", "runners keep dying")
        assert not catalog.give_up_job("finished", "runners keep dying")
        assert not catalog.give_up_job("nope", "runners keep dying")
        for job_id in ("expired", "stopped"):
            assert catalog.give_up_job(job_id, "runners keep dying")
            job = catalog.get_job(job_id)
            assert (job.status, job.error) == ("failed", "runners keep dying")
            assert catalog.get_lease(job_id) is None
            events = catalog.events(job_id)
            assert (events[-1].kind, events[-1].detail) == ("failed", "runners keep dying")
        assert catalog.get_job("held").status == "running"
        assert catalog.get_job("finished").status == "done"

    def test_worker_heartbeats(self, catalog: Catalog, clock: FakeClock, dead_pid: int) -> None:
        """beat_worker records a worker's info, live for its ttl from the catalog's
        clock; a second beat replaces the info and extends it; workers(now) lists the
        live ones by host and pid, never an expired one, one withdrawn (ttl 0) or one
        whose process on this host is gone."""
        assert catalog.workers(T0) == []
        me, remote = Owner.me(), Owner("other-host", 7, 1)
        catalog.beat_worker(me, {"concurrency": 2, "jobs": ["a"]}, 30)
        catalog.beat_worker(remote, {"concurrency": 1, "jobs": []}, 10)
        catalog.beat_worker(Owner(HOST, dead_pid), {"concurrency": 1}, 30)
        rows = catalog.workers(T0 + 1)
        assert [r.owner for r in rows] == sorted([me, remote], key=lambda o: (o.host, o.pid))
        mine = next(r for r in rows if r.owner == me)
        assert mine.info == {"concurrency": 2, "jobs": ["a"]}
        assert (mine.beat, mine.expires) == (T0, T0 + 30)
        clock.advance(5)
        catalog.beat_worker(me, {"concurrency": 2, "jobs": ["a", "b"]}, 30)
        assert [r.owner for r in catalog.workers(T0 + 11)] == [me]  # remote expired
        mine = catalog.workers(T0 + 11)[0]
        assert mine.info["jobs"] == ["a", "b"] and mine.beat == T0 + 5
        assert mine.expires == T0 + 35
        catalog.beat_worker(me, {"concurrency": 2, "jobs": []}, 0)  # it stops
        assert [r.owner for r in catalog.workers(T0 + 5)] == [remote]
