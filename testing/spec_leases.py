"""Spec: leases (LeaseCatalog): epochs that only grow, no takeover of a live lease
(not even forced), takeover of a stale one, heartbeats, release, and the status a
job shows while its runner is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from snapstate._errors import (
    LeaseHeld,
    StaleWriter,
    StoreError,
)
from snapstate.serializers._catalog import Catalog
from snapstate.serializers._fs import pid_alive, process_start
from snapstate.serializers._store import (
    JobRow,
    LeaseRow,
    Owner,
)

from ._support import (
    HOST,
    T0,
    Capability,
    FakeClock,
    Spec,
    lease,
    live_owner,
    make_job,
    state,
)

__all__ = ["LeasesSpec"]


class LeasesSpec(Spec):
    """The specs of LeaseCatalog."""

    capability = Capability.LEASES

    def test_acquire_returns_increasing_epochs(
        self, catalog: Catalog, clock: FakeClock, live_pid: int
    ) -> None:
        """Every acquisition returns a larger epoch than any before it (after a release,
        after a takeover), sets the job running with no error, and counts resumes only
        when resuming=True."""
        make_job(catalog)
        me = live_owner(live_pid)
        epochs = [catalog.acquire_lease("job", me, 30)]
        catalog.set_status("job", "failed", epoch=epochs[-1], error="boom")
        catalog.release_lease("job", epochs[-1])
        epochs.append(catalog.acquire_lease("job", me, 30, resuming=True))
        job = catalog.get_job("job")
        assert (job.status, job.error, job.resume_count) == ("running", None, 1)
        clock.advance(31)  # expired: taken over
        epochs.append(catalog.acquire_lease("job", Owner("elsewhere", 1), 30, resuming=True))
        catalog.release_lease("job", epochs[-1])
        epochs.append(catalog.acquire_lease("job", me, 30))
        assert epochs == sorted(set(epochs)) and len(epochs) == 4
        assert catalog.get_job("job").resume_count == 2
        assert lease(catalog).epoch == epochs[-1]
        other = make_job(catalog, "other")
        assert other.resume_count == 0
        assert catalog.acquire_lease("other", me, 30) >= 1

    def test_get_lease_fields(self, catalog: Catalog, clock: FakeClock, live_pid: int) -> None:
        """get_lease returns owner (host, pid, start time), epoch, expiry and heartbeat;
        None when the job has no lease."""
        make_job(catalog)
        assert catalog.get_lease("job") is None
        owner = live_owner(live_pid)
        epoch = catalog.acquire_lease("job", owner, 30)
        assert catalog.get_lease("job") == LeaseRow("job", owner, epoch, T0 + 30, T0)
        assert lease(catalog).is_live(T0 + 29)
        assert not lease(catalog).is_live(T0 + 30)

    def test_lease_held_while_another_owner_holds_a_live_lease(
        self, catalog: Catalog, clock: FakeClock, live_pid: int
    ) -> None:
        """While another owner's lease is live (live pid on this host, or any owner on
        another host before expiry) acquire_lease raises LeaseHeld naming the holder, and
        nothing changes: same lease, same epoch, no resume counted, no event."""
        make_job(catalog)
        make_job(catalog, "remote")
        holder = live_owner(live_pid)
        catalog.acquire_lease("job", holder, 30)
        catalog.acquire_lease("remote", Owner("other-host", 4242), 30)
        before = state(catalog), state(catalog, "remote")
        clock.advance(29)
        with pytest.raises(LeaseHeld) as info:
            catalog.acquire_lease("job", Owner.me(), 30, resuming=True)
        assert f"pid {live_pid} on {HOST}" in str(info.value)
        with pytest.raises(LeaseHeld, match="pid 4242 on other-host"):
            catalog.acquire_lease("remote", Owner.me(), 30, resuming=True)
        with pytest.raises(LeaseHeld):  # the holder itself gets no second lease either
            catalog.acquire_lease("job", holder, 30)
        assert (state(catalog), state(catalog, "remote")) == before
        assert issubclass(LeaseHeld, StoreError)

    @pytest.mark.parametrize("how", ["expired", "dead-pid", "reused-pid", "zombie"])
    def test_stale_lease_is_taken_over_without_force(
        self, catalog: Catalog, clock: FakeClock, live_pid: int, dead_pid: int, how: str
    ) -> None:
        """A stale lease is taken over without force: expired (any host), or held on this
        host by a process that is gone: a dead pid, a pid now used by another process (its
        start time differs), or a killed runner not yet reaped (a zombie). The new epoch
        is larger and the lease names the new owner."""
        make_job(catalog)
        zombie = None
        if how == "expired":
            holder = Owner("other-host", 4242)
        elif how == "dead-pid":
            holder = Owner(HOST, dead_pid, 0)
        elif how == "reused-pid":
            holder = Owner(HOST, live_pid, process_start(live_pid) + 1)
        else:
            zombie = subprocess.Popen(["sleep", "600"])
            holder = live_owner(zombie.pid)
            zombie.send_signal(signal.SIGKILL)
            deadline = time.monotonic() + 10
            while pid_alive(zombie.pid):
                assert time.monotonic() < deadline, "the killed process never became a zombie"
                time.sleep(0.001)
            assert os.path.exists(f"/proc/{zombie.pid}")  # not reaped yet
        try:
            first = catalog.acquire_lease("job", holder, 30)
            if how == "expired":
                with pytest.raises(LeaseHeld):
                    catalog.acquire_lease("job", Owner.me(), 30)
                clock.advance(30)
            assert not lease(catalog).is_live(clock())
            second = catalog.acquire_lease("job", Owner.me(), 30, resuming=True)
        finally:
            if zombie is not None:
                zombie.wait()
        assert second == first + 1
        held = lease(catalog, "job")
        assert (held.owner, held.epoch) == (Owner.me(), second)
        assert catalog.effective_status(catalog.get_job("job"), clock()) == "running"

    def test_force_never_takes_over_a_live_lease(
        self, catalog: Catalog, clock: FakeClock, live_pid: int
    ) -> None:
        """force never takes over a live lease, not even once the holder missed two
        heartbeats (a paused runner may still send what it dispatched until its lease
        expires; the runtime waits it out): LeaseHeld with a message saying so, nothing
        changed. Once the lease has expired it is taken, with or without force, and a
        forced takeover is noted in the timeline. A heartbeat makes the lease fresh again."""
        make_job(catalog)
        holder = live_owner(live_pid)
        first = catalog.acquire_lease("job", holder, 100)  # expires at T0 + 100
        clock.advance(20)  # heartbeat 20 s old
        before = state(catalog)
        with pytest.raises(
            LeaseHeld,
            match="--force never takes over a runner that is heartbeating; it waits out the lease",
        ):
            catalog.acquire_lease("job", Owner.me(), 30, force=True)
        catalog.heartbeat("job", first, 100)  # heartbeat at T0 + 20
        clock.advance(68)  # 68 s old: two beats missed
        assert lease(catalog).is_live(clock())
        for force in (True, False):
            with pytest.raises(LeaseHeld):
                catalog.acquire_lease("job", Owner.me(), 30, force=force)
        clock.advance(31.9)  # expires in 0.1 s
        with pytest.raises(LeaseHeld):
            catalog.acquire_lease("job", Owner.me(), 30, force=True)
        held = lease(catalog, "job")
        assert (held.owner, held.epoch, held.heartbeat) == (holder, first, T0 + 20)
        assert catalog.events("job") == before[2]  # refusals left no trace
        clock.advance(0.1)  # expired
        second = catalog.acquire_lease("job", Owner.me(), 30, force=True)
        assert second == first + 1
        assert lease(catalog).owner == Owner.me()
        assert "forced, after the previous lease expired" in catalog.events("job")[-1].detail

    def test_heartbeat_extends_the_lease(
        self, catalog: Catalog, clock: FakeClock, live_pid: int
    ) -> None:
        """heartbeat(epoch, ttl) moves expiry to now + ttl and records the heartbeat, so a
        lease that would have expired stays held."""
        make_job(catalog, "beating")
        make_job(catalog, "silent")
        holder = Owner("other-host", 4242)  # liveness by expiry alone
        beating = catalog.acquire_lease("beating", holder, 10)
        catalog.acquire_lease("silent", holder, 10)
        clock.advance(8)
        catalog.heartbeat("beating", beating, 10)
        held = lease(catalog, "beating")
        assert (held.expires, held.heartbeat) == (T0 + 18, T0 + 8)
        clock.advance(7)  # T0 + 15: silent expired, beating not
        with pytest.raises(LeaseHeld):
            catalog.acquire_lease("beating", live_owner(live_pid), 10)
        assert catalog.acquire_lease("silent", live_owner(live_pid), 10) == 2

    def test_heartbeat_after_takeover_or_release_raises_stale_writer(
        self, catalog: Catalog, clock: FakeClock, live_pid: int
    ) -> None:
        """A heartbeat with an epoch that lost the lease (taken over, or released) raises
        StaleWriter and leaves the current lease as it was."""
        make_job(catalog)
        old = catalog.acquire_lease("job", Owner("other-host", 4242), 10)
        clock.advance(11)
        new = catalog.acquire_lease("job", live_owner(live_pid), 10)
        held = lease(catalog, "job")
        clock.advance(1)
        with pytest.raises(StaleWriter, match=f"epoch {old}"):
            catalog.heartbeat("job", old, 10)
        assert catalog.get_lease("job") == held
        catalog.heartbeat("job", new, 10)
        catalog.release_lease("job", new)
        with pytest.raises(StaleWriter):
            catalog.heartbeat("job", new, 10)
        assert catalog.get_lease("job") is None

    def test_release(self, catalog: Catalog, clock: FakeClock, live_pid: int) -> None:
        """release_lease with the current epoch removes the lease (the job shows as
        interrupted if still running); with an old epoch it removes nothing; with no lease
        it is a no-op."""
        make_job(catalog)
        catalog.release_lease("job", 1)  # nothing to release
        old = catalog.acquire_lease("job", Owner("other-host", 1), 10)
        clock.advance(11)
        new = catalog.acquire_lease("job", live_owner(live_pid), 10)
        catalog.release_lease("job", old)
        assert lease(catalog).epoch == new
        catalog.release_lease("job", new)
        assert catalog.get_lease("job") is None
        assert catalog.effective_status(catalog.get_job("job"), clock()) == "interrupted"
        catalog.release_lease("job", new)

    def test_effective_status(
        self, catalog: Catalog, clock: FakeClock, live_pid: int, dead_pid: int
    ) -> None:
        """A running job is shown as running only while its lease is live; with no lease,
        an expired one, or one held by a dead process of this host it is 'interrupted'.
        Every other status is shown as stored."""
        make_job(catalog)

        def job() -> JobRow:
            return catalog.get_job("job")

        assert catalog.effective_status(job(), clock()) == "interrupted"  # no lease
        epoch = catalog.acquire_lease("job", Owner("other-host", 1), 30)
        assert catalog.effective_status(job(), clock()) == "running"
        assert catalog.effective_status(job(), T0 + 30) == "interrupted"  # expired
        clock.advance(31)
        catalog.acquire_lease("job", Owner(HOST, dead_pid), 30)
        assert catalog.effective_status(job(), clock()) == "interrupted"  # dead pid
        clock.advance(31)
        epoch = catalog.acquire_lease("job", live_owner(live_pid), 30)
        assert catalog.effective_status(job(), clock()) == "running"
        for status in ("waiting", "done", "failed", "parked", "interrupted"):
            catalog.set_status("job", status, epoch=epoch)
            assert catalog.effective_status(job(), clock()) == status
