"""The root logger's configuration the job made (logging.basicConfig(...) in main(), or
root.addHandler / root.setLevel) is job state: saved at every snapshot and put back on
the resumed process's root logger, so logging does not silently stop after a resume.

Handlers already on the root logger when the job started (or was restored) belong to
the host process (a test runner's, an embedding application's): never saved, never
removed. Handlers the job added are saved through the handler adapters
(resources._stdlib) in the snapshot's single pickling pass, so a handler the agent
also holds keeps its identity. On restore, handlers the fresh import of the agent added
to the root logger are replaced by the saved ones (and closed unless another logger
uses them), as resources._stdlib does for a named logger.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

# also read by runtime/_api.py: one rule for whether a replaced handler may be closed
from ..resources._stdlib import _used_elsewhere as _used_elsewhere

if TYPE_CHECKING:
    from ._job import Job

__all__ = ["baseline", "begin", "capture", "restore"]


def baseline() -> tuple[list[logging.Handler], int]:
    """The root logger's handlers and level now: the host's, before the agent runs."""
    root = logging.getLogger()
    return (list(root.handlers), root.level)


def begin(job: Job) -> None:
    """Before the agent's module is imported to run or restore the job (Job.create
    takes it earlier, before it loads the entry point): the root logger as it is now
    is the host's."""
    if getattr(job, "_root_log_baseline", None) is None:
        job._root_log_baseline = baseline()


def _baseline(job: Job) -> tuple[list[logging.Handler], int]:
    return getattr(job, "_root_log_baseline", None) or ([], logging.WARNING)


def capture(job: Job) -> tuple[int | None, list[logging.Handler]] | None:
    """(level or None when the job did not change it, handlers the job added); None
    when the job did not touch the root logger."""
    root = logging.getLogger()
    handlers, level = _baseline(job)
    added = [h for h in root.handlers if not any(h is b for b in handlers)]
    saved_level = (
        root.level if (root.level != level or getattr(job, "_root_log_owned", False)) else None
    )
    if not added and saved_level is None:
        return None
    return (saved_level, added)


def restore(job: Job, state: tuple[int | None, list[logging.Handler]] | None) -> None:
    """Put the saved level and handlers back on this process's root logger."""
    if state is None:
        return
    level, saved = state
    root = logging.getLogger()
    host, _ = _baseline(job)
    fresh = [h for h in root.handlers if not any(h is b for b in host)]
    replaced = [h for h in fresh if not any(h is s for s in saved)]
    root.handlers[:] = [h for h in root.handlers if any(h is b for b in host)] + list(saved)
    if level is not None:
        root.setLevel(level)
        job._root_log_owned = True  # saved again at the next snapshot
    for handler in replaced:  # added by the fresh import, now unused
        if not _used_elsewhere(handler):
            handler.close()
