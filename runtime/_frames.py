"""What a frozen frame is: the record the capture side writes and the restore side
reads. Kept apart from both so the pickler can name it without importing either."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .._abi import pinned
from ..serializers._codeid import CodeRef

__all__ = ["FrameRecord", "CALL", "GENERATOR", "GENERATOR_CREATED", "VALUE", "INSTANCE"]

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
