"""Job ids: the one place that says what a job id may be.

A job id names a folder of the store (snapshots/<job>/), so it is validated at every
entry (run, fork, resume --as, import, the Python API, every command that takes one)
before anything runs or is created: letters, digits, '.', '_' and '-', starting with a
letter or digit (so never '.' or '..'), at most MAX_LENGTH characters.
"""

from __future__ import annotations

import re

from .._errors import InvalidJobId

__all__ = ["MAX_LENGTH", "validate_job_id", "is_valid_job_id", "derive_job_id", "parse_ref"]

MAX_LENGTH = 128
_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def is_valid_job_id(job_id: object) -> bool:
    return (
        isinstance(job_id, str)
        and 0 < len(job_id) <= MAX_LENGTH
        and _PATTERN.fullmatch(job_id) is not None
    )


def validate_job_id(job_id: object, *, what: str = "job id") -> str:
    """Return job_id, or raise InvalidJobId naming it and the rule."""
    if is_valid_job_id(job_id):
        return job_id  # type: ignore[return-value]
    shown = repr(job_id)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    raise InvalidJobId(
        f"{what} {shown} is not allowed: use letters, digits, '.', '_' and '-', starting "
        f"with a letter or digit, at most {MAX_LENGTH} characters"
    )


def derive_job_id(base: str, suffix: str) -> str:
    """A valid generated id `<base>-<suffix>`: characters outside the alphabet in `base`
    become '-', and `base` is shortened so the whole id fits MAX_LENGTH (a script named
    `my agent!.py`, the fork of a fork of a fork). `suffix` must itself be valid."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", base).lstrip("._-") or "job"
    safe = safe[: MAX_LENGTH - len(suffix) - 1].rstrip("-")
    return validate_job_id(f"{safe or 'job'}-{suffix}")


def parse_ref(ref: str) -> tuple[str, int | None]:
    """(job id, seq or None) of JOB or JOB@SEQ (ASCII digits only); InvalidJobId for a
    bad job id."""
    match = re.fullmatch(r"(.+?)(?:@([0-9]+))?", ref, re.DOTALL)
    if match is None:
        return validate_job_id(ref), None
    return validate_job_id(match.group(1)), int(match.group(2)) if match.group(2) else None
