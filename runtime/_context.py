"""The job whose agent is running in this process (None in plain Python).

Job (runtime/_job.py) sets it around its run loop; snapshot() and the effect ledger
(runtime/_effects.py) read it here. So the job imports the effects and the effects
never import the job: both import only this module.

A module variable, not a ContextVar: the agent runs in its own greenlet, and a new
greenlet does not see the context variables of the one that started it (the runner's
hub), so a ContextVar set by the hub would read as unset in the agent's code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._job import Job

__all__ = ["active_job", "set_active_job"]

_ACTIVE: Job | None = None


def active_job() -> Job | None:
    """The job whose agent is running here, or None."""
    return _ACTIVE


def set_active_job(job: Job | None) -> Job | None:
    """Make `job` the running one; returns the one it replaces (to set back after)."""
    global _ACTIVE
    outer, _ACTIVE = _ACTIVE, job
    return outer
