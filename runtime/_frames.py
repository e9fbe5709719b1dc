"""What a frozen frame is: the record the capture side writes and the restore side
reads. Kept apart from both so the pickler can name it without importing either."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import CodeType
from typing import Any

from .._abi import pinned
from ..serializers._codeid import CodeRef, find_code
from ._layout import nlocalsplus

__all__ = [
    "local_names",
    "local_names_for_header",
    "FrameRecord",
    "CALL",
    "GENERATOR",
    "GENERATOR_CREATED",
    "VALUE",
    "INSTANCE",
]

# kinds
CALL = "call"  # paused in a call; resumes when the callee returns
GENERATOR = "generator"  # suspended generator, paused at a yield
GENERATOR_CREATED = "created"  # generator created but never started

# what the pending instruction leaves on the stack when its callee returns
VALUE = "value"  # the callee's return value (call, property, __getitem__)
INSTANCE = "instance"  # the new object: Class() -> __init__ returns None


@pinned("FrameRecord")
@dataclass
class FrameRecord:
    code: CodeRef
    slots: list[Any]  # raw local slots: locals, cell objects, free cells; NULL kept
    stack: list[Any]  # value stack below the pending instruction's result
    resume: int  # code unit where execution continues
    pending: int  # code unit of the instruction the frame is paused in
    kind: str = CALL
    result: str = VALUE
    instance: object = None  # the object Class() returns, for result == INSTANCE
    # stack index -> exception being handled
    handled: dict[int, BaseException | None] = field(default_factory=dict)
    lineno: int = 0  # for messages and `inspect`

    @property
    def where(self) -> str:
        return f"{self.code.qualname}() at {self.code.filename}:{self.lineno}"


def local_names(code: CodeType) -> list[str]:
    names = list(code.co_varnames) + [c for c in code.co_cellvars if c not in code.co_varnames]
    names += list(code.co_freevars)
    return names[: nlocalsplus(code)]


def local_names_for_header(ref: CodeRef) -> list[str] | None:
    """A frame's local slot names, kept in the header so `inspect` can name locals
    without importing the agent's code."""
    try:
        return local_names(find_code(ref))
    except Exception:
        return None
