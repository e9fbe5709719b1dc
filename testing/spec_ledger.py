"""Spec: the effect ledger (LedgerCatalog): rows recorded once, under the lease's
fence (a dispatch also under its deadline), settled by hand once no runner holds the
job."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from snapstate._errors import (
    JobNotFound,
    LeaseHeld,
    StaleWriter,
    StoreError,
)
from snapstate.serializers._catalog import Catalog
from snapstate.serializers._store import (
    EffectKind,
    EffectState,
    Owner,
)

from ._support import (
    T0,
    Capability,
    FakeClock,
    Spec,
    effect,
    lease,
    live_owner,
    make_job,
    state,
)

__all__ = ["LedgerSpec"]


class LedgerSpec(Spec):
    """The specs of LedgerCatalog."""

    capability = Capability.LEDGER

    def test_record_effects_round_trip_and_are_fenced(
        self, catalog: Catalog, clock: FakeClock, live_pid: int
    ) -> None:
        """record_effects stores rows (every field, bytes results included) read back by
        effect() and effects() in ordinal order; a batch is all-or-nothing: an ordinal
        recorded twice raises StoreError and nothing of that batch is kept; replace=True
        overwrites; a stale epoch raises StaleWriter with nothing changed; epoch None
        records without a lease; an empty batch is a no-op."""
        make_job(catalog)
        old = catalog.acquire_lease("job", Owner("other-host", 1), 10)
        rows = [effect(2), effect(1, external_id="ext-1", note="n")]
        catalog.record_effects(rows, epoch=old)
        assert catalog.effects("job") == [rows[1], rows[0]]
        assert catalog.effect("job", 2) == rows[0] and catalog.effect("job", 3) is None
        with pytest.raises(StoreError, match="effect"):
            catalog.record_effects([effect(3), effect(1, state="confirmed")], epoch=old)
        assert catalog.effects("job") == [rows[1], rows[0]]
        confirmed = effect(1, state="confirmed", attempts=2, updated=T0 + 1)
        catalog.record_effects([confirmed], epoch=old, replace=True)
        assert catalog.effect("job", 1) == confirmed
        clock.advance(11)
        new = catalog.acquire_lease("job", live_owner(live_pid), 10)
        before = catalog.effects("job"), state(catalog)
        for batch, replace in (([effect(3)], False), ([effect(1, state="failed")], True)):
            with pytest.raises(StaleWriter):
                catalog.record_effects(batch, epoch=old, replace=replace)
            assert (catalog.effects("job"), state(catalog)) == before
        catalog.record_effects([], epoch=old)
        catalog.record_effects([effect(3)], epoch=new)
        catalog.release_lease("job", new)
        catalog.record_effects([effect(4)], epoch=None)
        assert [e.ordinal for e in catalog.effects("job")] == [1, 2, 3, 4]
        make_job(catalog, "other")
        assert catalog.effects("other") == []

    def test_reconcile_effect_checks_the_lease_and_writes_in_one_transaction(
        self, catalog: Catalog, clock: FakeClock, live_pid: int
    ) -> None:
        """reconcile_effect is refused (LeaseHeld) while a live lease holds the job, with
        the ledger, metrics and job unchanged; once the lease has expired it sets
        the effect's state, result and note, counts it and turns a parked job
        interrupted. An unknown job, an unknown or value effect, or a settled effect is
        refused with nothing changed."""
        make_job(catalog)
        catalog.record_effects(
            [
                effect(1, state="ambiguous"),
                effect(2, state="confirmed"),
                dataclasses.replace(effect(3, state="ambiguous"), kind=EffectKind.VALUE),
            ],
            epoch=None,
        )
        epoch = catalog.acquire_lease("job", live_owner(live_pid), 30)
        catalog.set_status("job", "parked", epoch=epoch)
        before = state(catalog), catalog.effects("job"), catalog.metrics("job")
        args: dict[str, Any] = {
            "state": EffectState.CONFIRMED,
            "result": b"sealed",
            "note": "by hand",
        }
        with pytest.raises(LeaseHeld):
            catalog.reconcile_effect("job", 1, **args)
        assert (state(catalog), catalog.effects("job"), catalog.metrics("job")) == before
        clock.advance(31)  # the holder's lease expired (not released)
        for ordinal, error in ((2, "confirmed"), (3, "no effect 3"), (9, "no effect 9")):
            with pytest.raises(StoreError, match=error):
                catalog.reconcile_effect("job", ordinal, **args)
        with pytest.raises(JobNotFound):
            catalog.reconcile_effect("nope", 1, **args)
        assert (state(catalog), catalog.effects("job"), catalog.metrics("job")) == before
        settled = catalog.reconcile_effect("job", 1, **args)
        assert (settled.state, settled.result, settled.note, settled.updated) == (
            "confirmed",
            b"sealed",
            "by hand",
            T0 + 31,
        )
        assert catalog.effect("job", 1) == settled and catalog.metrics("job") == {"reconciled": 1}
        assert catalog.get_job("job").status == "interrupted"

    def test_effect_by_key_finds_the_first_row_of_a_key(self, catalog: Catalog) -> None:
        """effect_by_key returns the row with that idempotency key (the lowest ordinal if
        several share it), None for an unknown key or another job's."""
        make_job(catalog)
        make_job(catalog, "other")
        rows = [effect(3), dataclasses.replace(effect(5), key="key-3"), effect(4)]
        catalog.record_effects(rows, epoch=None)
        assert catalog.effect_by_key("job", "key-3") == rows[0]
        assert catalog.effect_by_key("job", "key-4") == rows[2]
        assert catalog.effect_by_key("job", "key-9") is None
        assert catalog.effect_by_key("other", "key-3") is None

    def test_a_dispatch_needs_time_left_on_the_lease(
        self, catalog: Catalog, clock: FakeClock, live_pid: int
    ) -> None:
        """record_effects with `ttl` (a dispatch) renews the lease to now + ttl and
        returns that deadline, but only while the lease has more than `margin` seconds
        left: otherwise StaleWriter saying nothing was sent, with no row recorded and
        the lease unchanged; a stale epoch is refused the same way."""
        make_job(catalog)
        epoch = catalog.acquire_lease("job", live_owner(live_pid), 30)  # expires T0 + 30
        clock.advance(10)
        assert catalog.record_effects([effect(1)], epoch=epoch, ttl=30, margin=5) == T0 + 40
        assert (lease(catalog).expires, lease(catalog).heartbeat) == (T0 + 40, T0 + 10)
        clock.advance(26)  # 4 s left, under the 5 s margin
        before = catalog.effects("job"), lease(catalog)
        with pytest.raises(StaleWriter, match="was not sent"):
            catalog.record_effects([effect(2)], epoch=epoch, ttl=30, margin=5)
        with pytest.raises(StaleWriter):
            catalog.record_effects([effect(2)], epoch=epoch + 1, ttl=30, margin=1)
        assert (catalog.effects("job"), lease(catalog)) == before
        assert catalog.record_effects([effect(2)], epoch=epoch, ttl=30, margin=3) == T0 + 66
        assert [e.ordinal for e in catalog.effects("job")] == [1, 2]

    def test_delete_job_removes_its_ledger(self, catalog: Catalog) -> None:
        """delete_job removes the job's ledger rows; another job's stay."""
        make_job(catalog)
        make_job(catalog, "other")
        catalog.record_effects([effect(1), effect(2)], epoch=None)
        catalog.record_effects([effect(1, "other")], epoch=None)
        catalog.delete_job("job")
        assert catalog.effects("job") == [] and catalog.effect("job", 1) is None
        assert catalog.effects("other") == [effect(1, "other")]
