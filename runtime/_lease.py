"""One runner per job: the lease a runner holds while it runs a job, kept alive by a
heartbeat thread. Losing it (another runner took the job over after the lease
expired) is noticed by the heartbeat and, at the latest, by the next snapshot's or
effect's compare-and-swap, which then changes nothing.

Fencing the sending of effects (runtime/_effects.py): the transaction that records an
effect as dispatched checks the epoch and that the lease's deadline is more than
dispatch_margin(ttl) away, and renews it; the request must end before that deadline
minus send_guard(ttl). Another runner takes a job over only once its lease has
expired (a runner whose process is gone on this host excepted): `--force` waits out
the lease of a holder that is alive but silent, never takes over a live one.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable

from .._errors import LeaseHeld, SnapstateError, StaleWriter
from ..serializers._catalog import Catalog
from ..serializers._store import LeaseRow, Owner

__all__ = ["Lease", "DEFAULT_TTL", "lease_ttl", "dispatch_margin", "send_guard", "silent"]

DEFAULT_TTL = 30.0
MIN_TTL, MAX_TTL = 1.0, 3600.0
TTL_VARIABLE = "SNAPSTATE_LEASE_TTL"


def lease_ttl() -> float:
    """The lease ttl in seconds: $SNAPSTATE_LEASE_TTL when set (a number in [1, 3600]),
    else DEFAULT_TTL. Anything else is refused, never silently replaced."""
    text = os.environ.get(TTL_VARIABLE)
    if text is None:
        return DEFAULT_TTL
    try:
        ttl = float(text)
    except ValueError:
        ttl = math.nan
    if not MIN_TTL <= ttl <= MAX_TTL:  # also refuses nan and inf
        raise SnapstateError(
            f"{TTL_VARIABLE}={text!r} is not a lease ttl: give a number of seconds from "
            f"{MIN_TTL:.0f} to {MAX_TTL:.0f}, or unset it for the default {DEFAULT_TTL:.0f}s"
        )
    return ttl


def dispatch_margin(ttl: float) -> float:
    """An effect is dispatched only while its runner's lease has more than this left
    (a healthy runner always has at least 2/3 of its ttl: it beats every third)."""
    return ttl / 6


def send_guard(ttl: float) -> float:
    """A request is sent, and must end, this long before the lease deadline recorded
    when it was dispatched."""
    return ttl / 12


def silent(lease: LeaseRow, now: float) -> bool:
    """The holder missed two heartbeats (it beats every third of its ttl)."""
    return now - lease.heartbeat > 2 * (lease.expires - lease.heartbeat) / 3


class Lease:
    def __init__(
        self,
        catalog: Catalog,
        job_id: str,
        ttl: float | None = None,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.catalog, self.job_id = catalog, job_id
        self.ttl = lease_ttl() if ttl is None else ttl
        self.say = say or (lambda message: None)
        self.owner = Owner.me()
        self.epoch: int | None = None
        self.lost: StaleWriter | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self, *, force: bool = False, resuming: bool = False) -> int:
        self.epoch = self._take(force, resuming)
        self._thread = threading.Thread(
            target=self._beat, name=f"snapstate-lease-{self.job_id}", daemon=True
        )
        self._thread.start()
        return self.epoch

    def _take(self, force: bool, resuming: bool) -> int:
        """acquire_lease; with force, a holder that is alive but silent is waited out
        until its lease expires (bounded by one more of its ttl, in case it beats
        again now and then), never taken over before."""
        give_up: float | None = None
        while True:
            try:
                return self.catalog.acquire_lease(
                    self.job_id, self.owner, self.ttl, force=force, resuming=resuming
                )
            except LeaseHeld:
                if not force:
                    raise
                now = time.time()
                lease = self.catalog.get_lease(self.job_id)
                if lease is None or not lease.is_live(now):
                    continue  # it ended meanwhile: try again
                if not silent(lease, now) or (give_up is not None and now >= give_up):
                    raise  # heartbeating (again): never taken over
                if give_up is None:
                    give_up = lease.expires + min(lease.expires - lease.heartbeat, MAX_TTL)
                    self.say(
                        f"job {self.job_id} is held by {lease.owner} (lease epoch "
                        f"{lease.epoch}), alive but silent: no heartbeat for "
                        f"{now - lease.heartbeat:.1f}s. --force waits until its lease expires "
                        f"at {_clock(lease.expires)} (in {lease.expires - now:.1f}s), then "
                        "takes the job over"
                    )
                time.sleep(max(0.0, min(lease.expires, give_up) - now) + 0.01)

    def _beat(self) -> None:
        epoch = self.epoch
        assert epoch is not None  # started by acquire() once the lease is taken
        try:
            while not self._stop.wait(self.ttl / 3):
                try:
                    self.catalog.heartbeat(self.job_id, epoch, self.ttl)
                except StaleWriter as exc:
                    self.lost = exc
                    return
                except Exception:  # a busy or briefly unavailable catalog: next beat
                    continue
        finally:
            self.catalog.close_thread()  # this thread's connection

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self._thread = None

    def release(self) -> None:
        self.stop()
        if self.epoch is not None:
            self.catalog.release_lease(self.job_id, self.epoch)


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t)) + f".{int(t % 1 * 10)}"
