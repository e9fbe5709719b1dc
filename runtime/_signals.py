"""SIGTERM for `snaprun run/resume`: what systemd, Docker and Kubernetes send to stop a
service.

Without a grace period the job stops at once: the signal handler records the stop in
the job's timeline, marks the job interrupted and releases its lease on a fresh
catalog connection, prints the resume command and ends the process with os._exit(143).
No agent code runs after the signal: raising into the agent would run its except and
finally blocks, which run again after the resume.

With `--grace SECONDS` the job runs on to its next snapshot() and stops right after
that snapshot is committed (a deploy loses no work); if the grace runs out first, or
a second SIGTERM comes, it stops as without grace. A job sleeping in the process
through a short wait (sleep() under SNAPSTATE_HIBERNATE_AFTER) when SIGTERM comes
hibernates at that wait at once (a snapshot there, status waiting, exit 3) instead of
sleeping on: its worker (or `snaprun resume`) continues it when it is due.

Ctrl-C (SIGINT) stops the job at once the same way, with exit code 130: a
KeyboardInterrupt raised into the agent would run (and could swallow) its except and
finally blocks, which would then run again after the resume.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any

from .._errors import StaleWriter
from ..serializers._sqlite import SqliteCatalog
from ._clock import SleepInterrupted

if TYPE_CHECKING:
    from ._job import Job

__all__ = ["EXIT_SIGTERM", "EXIT_SIGINT", "SigtermHandler"]

EXIT_SIGTERM = 128 + signal.SIGTERM  # 143, as a shell reports a process it stopped
EXIT_SIGINT = 128 + signal.SIGINT  # 130

# What signal.signal() returns: the previous handler.
_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


class SigtermHandler:
    """Installed for the duration of one run or resume of `job`."""

    def __init__(self, job: Job, grace: float | None = None) -> None:
        self.job = job
        self.grace = grace
        self.pending = False  # a SIGTERM came; waiting for the next snapshot
        self._timer: threading.Timer | None = None
        self._previous: _Handler = None
        self._previous_int: _Handler = None

    def install(self) -> None:
        self._previous = signal.signal(signal.SIGTERM, self._on_sigterm)
        self._previous_int = signal.signal(signal.SIGINT, self._on_sigint)

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None
        if getattr(self, "_previous_int", None) is not None:
            signal.signal(signal.SIGINT, self._previous_int)
            self._previous_int = None

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        if self.job.finishing:
            return  # the run is over and its outcome is being recorded
        self._abandon_transaction()
        self._stop("Ctrl-C: stopped", code=EXIT_SIGINT, signal_name="Ctrl-C")

    # ------------------------------------------------------------ the signal
    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        if self.job.finishing:
            return  # the run is over and its outcome is being recorded
        if self.grace and not self.pending:
            self.pending = True
            self.job.after_commit = self._stop_after_snapshot
            self._timer = threading.Timer(self.grace, self._grace_ran_out)
            self._timer.daemon = True
            self._timer.start()
            self.job.no_naps = True  # a wait reached from now on hibernates at once
            if getattr(self.job, "napping", False):
                # Sleeping in the process through a short wait: hibernate at that wait
                # now (a snapshot there, exit 3) instead of sleeping through the grace.
                _write(
                    f"snaprun: SIGTERM: job {self.job.job_id} hibernates at the wait it sleeps in\n"
                )
                self.job.napping = False
                raise SleepInterrupted
            _write(
                f"snaprun: SIGTERM: job {self.job.job_id} stops at its next snapshot "
                f"(grace {self.grace:g}s)\n"
            )
            return
        if self.pending:
            detail = f"SIGTERM: stopped; no snapshot within the grace of {self.grace:g}s"
        else:
            detail = "SIGTERM: stopped"
        self._abandon_transaction()
        self._stop(detail)

    def _grace_ran_out(self) -> None:
        # Delivered to the main thread, so a sleep or a blocking read there is woken.
        ident = threading.main_thread().ident
        assert ident is not None  # the main thread is running
        signal.pthread_kill(ident, signal.SIGTERM)

    def _stop_after_snapshot(self, seq: int) -> None:
        """On the hub, right after snapshot `seq` was committed: no transaction open."""
        self._stop(f"SIGTERM: stopped right after snapshot {seq} (--grace)")

    # ------------------------------------------------------------ stopping
    def _abandon_transaction(self) -> None:
        """The signal may have interrupted the main thread between the statements of a
        catalog transaction (e.g. committing a snapshot): roll it back, as a kill there
        would, so that the bookkeeping below does not wait for a lock this very thread
        holds. Atomicity keeps the catalog as it was before that transaction."""
        db = getattr(getattr(self.job.home.catalog, "_local", None), "db", None)
        if db is not None and db.in_transaction:
            try:
                db.execute("ROLLBACK")
            except Exception:
                pass

    def _stop(self, detail: str, code: int = EXIT_SIGTERM, signal_name: str = "SIGTERM") -> None:
        job = self.job
        try:
            sys.stdout.flush()  # the agent's output so far (not agent code)
        except Exception:
            pass
        try:
            _record_stop(job, detail)
        except Exception as exc:  # a failing store: the dead runner shows interrupted
            _write(f"snaprun: could not record the stop in the store ({exc})\n")
        _write(
            f"snaprun: job {job.job_id} stopped by {signal_name} (left interrupted); "
            f"continue it with: snaprun resume {job.job_id}\n"
        )
        os._exit(code)


def _record_stop(job: Job, detail: str) -> None:
    catalog = job.home.catalog
    if isinstance(catalog, SqliteCatalog):  # a connection of its own, no shared state
        catalog = SqliteCatalog(
            catalog.directory,
            clock=catalog.clock,
            synchronous=catalog.synchronous,
            sealer=catalog.sealer,
        )
    if job.epoch is None:  # no lease taken yet: the job is not this runner's
        catalog.log_event(job.job_id, "interrupted", detail)
        return
    try:
        catalog.set_status(job.job_id, "interrupted", epoch=job.epoch, error=detail)
        catalog.release_lease(job.job_id, job.epoch)
    except StaleWriter:
        pass  # taken over: the job is another runner's now


def _write(text: str) -> None:
    """To stderr without Python's buffered streams (the signal may have interrupted a
    write to them)."""
    try:
        os.write(2, text.encode(errors="replace"))
    except OSError:
        pass
