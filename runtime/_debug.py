"""`snaprun debug JOB[@SEQ]`: a snapshot restored in the replay's sandbox, with a
debugger in the agent's innermost frame (docs/debugging.md).

The run is `Job.replay(at, debugger=session)` (runtime/_job.py): effects served from the
ledger and none sent, scratch copies of the files and databases, nothing written to the
store. This module is the session the job is handed (the `Debugger` protocol of
runtime/_job.py): the job calls `restored(frame)` where the restored agent continues
after its snapshot() and `snapshot_taken(info, frame)` after each snapshot() of the run
(which writes nothing), both in the agent's greenlet; the session decides where to stop
(at the restored snapshot, or with `--until` at a later snapshot() named by its label or
sequence number) and opens the debugger PYTHONBREAKPOINT names there.

pdb (the default) is set up as `pdb.set_trace(frame)` would, on the agent's frame rather
than the caller's: every frame of the agent's stack is traced, snapstate's own modules
are skipped (stepping never stops in the hub), and the agent's outermost frame is the
bottom, so `up` ends at main(). Quitting pdb (`q`, or the end of its input) ends the
session right there: the agent stays paused, none of its code runs after it (no
BdbQuit raised through the agent's except blocks).
"""

from __future__ import annotations

import importlib
import inspect
import pdb
import sys
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING

from ._morph import restoring

if TYPE_CHECKING:
    from _typeshed import TraceFunction

    from ._job import Job
    from ._switch import SnapshotInfo

__all__ = ["Session", "QUIT", "parse_until"]

# snapstate's own frames (the hub, snapshot(), the ledger) and greenlet's: never stopped in.
_SKIP = ("snapstate", "snapstate.*", "greenlet", "greenlet.*")

QUIT = "the debugger was quit (q, or the end of its input)"  # Job.replay_stop's reason

_Hook = Callable[[FrameType], object]


def parse_until(value: str | None) -> int | str | None:
    """`--until`: a snapshot's sequence number (digits) or its label."""
    if value is None:
        return None
    return int(value) if value.isascii() and value.isdigit() else value


def _load_hook(value: str) -> _Hook | None:
    """PYTHONBREAKPOINT as breakpoint() reads it: "0" -> None (no stop); unset, empty
    or pdb.set_trace -> the session's own pdb; a dotted name -> that callable, given the
    frame as `frame=` where it takes one (as pdb's and ipdb's set_trace do). ValueError
    names a callable that cannot be imported."""
    if value == "0":
        return None
    if value in ("", "pdb.set_trace"):
        return _stop_in_pdb
    module_name, dot, name = value.rpartition(".")
    try:
        hook = getattr(importlib.import_module(module_name if dot else "builtins"), name)
    except Exception as exc:  # ImportError, AttributeError; a relative name ("..")
        raise ValueError(
            f"PYTHONBREAKPOINT={value!r} names nothing that can be imported ({exc}); unset "
            "it for pdb, or set it to 0 to run the sandboxed job without stopping"
        ) from None
    if not callable(hook):
        raise ValueError(f"PYTHONBREAKPOINT={value!r} is not callable")
    if _takes_frame(hook):
        return lambda frame: hook(frame=frame)
    return lambda frame: hook()


def _takes_frame(hook: Callable[..., object]) -> bool:
    try:
        parameters = inspect.signature(hook).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature
        return False
    return any(
        p.name == "frame" and p.kind is not p.POSITIONAL_ONLY or p.kind is p.VAR_KEYWORD
        for p in parameters
    )


def _stop_in_pdb(frame: FrameType) -> None:
    raise AssertionError("replaced by the session's pdb")  # a marker, never called


class Session:
    """One `snaprun debug` session: where it stops and with which debugger."""

    def __init__(self, job: Job, until: int | str | None, hook: str) -> None:
        self.job = job
        self.until = until
        self.reached = False  # the stop asked for (the restored snapshot, or --until)
        self.stops = 0  # how many times a debugger was opened
        self._hook = _load_hook(hook)  # ValueError: PYTHONBREAKPOINT names nothing
        self._named = hook
        self._pdb: _SessionPdb | None = None
        self.failed: str | None = None  # the debugger PYTHONBREAKPOINT names raised

    @property
    def stopping(self) -> bool:
        """A debugger is opened at the stops (PYTHONBREAKPOINT is not 0)."""
        return self._hook is not None

    # ----------------------------------------------------- called by the job (the agent's greenlet)
    def restored(self, frame: FrameType) -> None:
        if self.until is None:
            self.reached = True
            self._stop(frame)

    def snapshot_taken(self, info: SnapshotInfo, frame: FrameType) -> None:
        if self.until is None or self.reached:
            return
        if info.seq == self.until or (isinstance(self.until, str) and info.label == self.until):
            self.reached = True
            self._stop(frame)

    # ----------------------------------------------------- the debugger
    def _stop(self, frame: FrameType) -> None:
        if self._hook is None:
            return  # PYTHONBREAKPOINT=0: the sandboxed run goes on
        self.stops += 1
        if self._hook is not _stop_in_pdb:
            try:
                self._hook(frame)
            except (Exception, SystemExit) as exc:  # the debugger's failure, not the agent's
                self.failed = (
                    f"the debugger PYTHONBREAKPOINT={self._named!r} names raised "
                    f"{type(exc).__name__}: {exc}"
                )
                self.close()
                self.job.end_replay(self.failed)  # the agent stays paused
            return
        if self._pdb is None:
            self._pdb = _SessionPdb(self)
        self._pdb.stop_at(frame)

    def quit(self) -> None:
        """End the session here: the agent stays paused; the run ends (replay_stop)."""
        self.close()
        self.job.end_replay(QUIT)

    def close(self) -> None:
        """No more tracing (the run is over, or ends now)."""
        sys.settrace(None)


class _SessionPdb(pdb.Pdb):
    """pdb on the restored agent's stack (the module docstring)."""

    def __init__(self, session: Session) -> None:
        super().__init__(skip=list(_SKIP))
        self._session = session

    def stop_at(self, frame: FrameType) -> None:
        """As `set_trace(frame)`, stopping at once, with the agent's outermost frame as
        the bottom of the stack."""
        self.reset()
        bottom = frame
        walk: FrameType | None = frame
        while walk is not None and not self.is_skipped_module(walk.f_globals.get("__name__", "")):
            walk.f_trace = self.trace_dispatch
            bottom, walk = walk, walk.f_back
        self.botframe = bottom
        # No stop (pdb's own code is traced from here) until a command says where.
        self._set_stopinfo(bottom, None, -1)  # type: ignore[attr-defined]
        sys.settrace(self.trace_dispatch)
        self.interaction(frame, None)
        self._quit_if_asked()

    def _quit_if_asked(self) -> None:
        if self.quitting:
            self._session.quit()

    def stop_here(self, frame: FrameType) -> bool:
        """Only in the agent's own code: a frame whose callers reach the agent's
        outermost frame without passing through snapstate (never the hub's frames, nor
        the libraries snapstate calls while it freezes or serves an effect)."""
        if not super().stop_here(frame):
            return False
        walk: FrameType | None = frame
        while walk is not None:
            if walk is self.botframe:
                return True
            if self.is_skipped_module(walk.f_globals.get("__name__", "")):
                return False
            walk = walk.f_back
        return False

    def dispatch_line(self, frame: FrameType) -> TraceFunction:
        """A restored frame's prologue (and its landing back on the paused line) is no
        line of the agent's: `next` goes on to the agent's next line."""
        if restoring(frame.f_code, frame.f_lasti):
            return self.trace_dispatch
        return super().dispatch_line(frame)

    # Every stop ends in one of these: a quit there ends the session instead of raising
    # BdbQuit into the agent's code.
    def user_line(self, frame: FrameType) -> None:
        super().user_line(frame)
        self._quit_if_asked()

    def user_call(self, frame: FrameType, argument_list: None) -> None:
        super().user_call(frame, argument_list)
        self._quit_if_asked()

    def user_return(self, frame: FrameType, return_value: object) -> None:
        super().user_return(frame, return_value)
        self._quit_if_asked()

    def user_exception(
        self, frame: FrameType, exc_info: tuple[type[BaseException], BaseException, object]
    ) -> None:
        super().user_exception(frame, exc_info)  # type: ignore[arg-type]
        self._quit_if_asked()
