"""One runner per job: the lease a runner holds while it runs a job, kept alive by a
heartbeat thread. Losing it (another runner took the job over after the lease went
stale) is noticed by the heartbeat and, at the latest, by the next snapshot's
compare-and-swap, which then changes nothing."""

from __future__ import annotations

import threading

from ..serializers._store import Owner, Store
from ._errors import StaleWriter

__all__ = ["Lease", "DEFAULT_TTL"]

DEFAULT_TTL = 30.0


class Lease:
    def __init__(self, catalog: Store, job_id: str, ttl: float = DEFAULT_TTL):
        self.catalog, self.job_id, self.ttl = catalog, job_id, ttl
        self.owner = Owner.me()
        self.epoch: int | None = None
        self.lost: StaleWriter | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self, *, force: bool = False, resuming: bool = False) -> int:
        self.epoch = self.catalog.acquire_lease(self.job_id, self.owner, self.ttl, force=force,
                                                resuming=resuming)
        self._thread = threading.Thread(target=self._beat, name=f"snapstate-lease-{self.job_id}",
                                        daemon=True)
        self._thread.start()
        return self.epoch

    def _beat(self) -> None:
        try:
            while not self._stop.wait(self.ttl / 3):
                try:
                    self.catalog.heartbeat(self.job_id, self.epoch, self.ttl)
                except StaleWriter as exc:
                    self.lost = exc
                    return
                except Exception:   # a busy or briefly unavailable catalog: next beat
                    continue
        finally:
            self.catalog.close()   # this thread's connection

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self._thread = None

    def release(self) -> None:
        self.stop()
        if self.epoch is not None:
            self.catalog.release_lease(self.job_id, self.epoch)
