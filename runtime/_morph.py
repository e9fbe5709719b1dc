"""Restore: turn frame records back into running frames.

For every frame a "morph" code object is built: the original code with a prologue
prepended that stores the saved locals, pushes the saved value stack, calls the next
inner frame's morph (or asks the runtime for snapshot()'s result) and jumps to the
saved resume offset. The exception table is shifted, and the prologue's call inherits
the handler of the original pending instruction, so exceptions from inner frames reach
the same try/except/with blocks; the location table gives that call the original
call's position, so tracebacks read exactly as in an uninterrupted run.

A registry maps every morph code object back to its original, so a restored job can
be frozen again.
"""

from __future__ import annotations

import inspect
import sys
import types
from dataclasses import dataclass

from . import _bytecode as bc
from ._codeid import find_code
from ._frames import CALL, GENERATOR, INSTANCE, FrameRecord
from ._layout import LAYOUT, NULL

__all__ = ["build_resume_chain", "rebuild_generator", "unmorph", "morph_record"]

@dataclass(frozen=True)
class _MorphInfo:
    original: types.CodeType
    prologue: int          # units before the original body
    call_start: int
    call_end: int
    record: FrameRecord


_MORPHS: dict[int, tuple[types.CodeType, _MorphInfo]] = {}


def morph_record(code: types.CodeType) -> FrameRecord | None:
    """The record a morph code object was built from (None for ordinary code)."""
    hit = _MORPHS.get(id(code))
    return hit[1].record if hit is not None and hit[0] is code else None


def unmorph(code: types.CodeType, unit: int) -> tuple[types.CodeType, int, FrameRecord | None]:
    """Map (code, unit) of a possibly restored frame to the original code and unit.

    The third item is the record the morph was built from when the frame is still
    paused in its prologue's call (its inner frame has not returned yet)."""
    hit = _MORPHS.get(id(code))
    if hit is None or hit[0] is not code:
        return code, unit, None
    info = hit[1]
    if unit >= info.prologue:
        return info.original, unit - info.prologue, None
    if info.call_start <= unit < info.call_end:
        return info.original, info.record.pending, info.record
    raise RuntimeError(f"{code.co_qualname} was captured inside its restore prologue (unit {unit})")


class _ConstBox(tuple):
    """Holds a morph's unhashable constants (lists, dicts). A code object hashes its
    constants, so they are fetched from this identity-hashed tuple by index instead."""

    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return self is other


class _Prologue:
    """Bytecode and constants of a morph prologue under construction."""

    def __init__(self, code: types.CodeType):
        self.out = bytearray()
        self.consts = list(code.co_consts)
        self._boxed: list = []
        self._box_index: int | None = None

    def const(self, value) -> int:
        self.consts.append(value)
        return len(self.consts) - 1

    def emit(self, opname: str, arg: int = 0) -> None:
        bc.emit(self.out, opname, arg)

    def push(self, value) -> None:
        try:
            hash(value)
        except TypeError:
            if self._box_index is None:
                self._box_index = self.const(None)
            self._boxed.append(value)
            self.emit("LOAD_CONST", self._box_index)
            self.emit("LOAD_CONST", self.const(len(self._boxed) - 1))
            self.emit("BINARY_SUBSCR")
        else:
            self.emit("LOAD_CONST", self.const(value))

    def call(self, fn) -> None:
        index = self.const(fn)
        for name, arg in LAYOUT.CALL_SEQUENCE:
            self.emit(name, index if arg == "fn" else arg)

    @property
    def units(self) -> int:
        return len(self.out) // 2

    def final_consts(self) -> tuple:
        if self._box_index is not None:
            self.consts[self._box_index] = _ConstBox(self._boxed)
        return tuple(self.consts)


def build_morph_code(rec: FrameRecord, inner, value_fn) -> types.CodeType:
    code = find_code(rec.code)
    nargs = (code.co_argcount + code.co_kwonlyargcount
             + bool(code.co_flags & inspect.CO_VARARGS)
             + bool(code.co_flags & inspect.CO_VARKEYWORDS))
    pro = _Prologue(code)
    if rec.kind != CALL:
        pro.emit("RETURN_GENERATOR")
        pro.emit("POP_TOP")
    pro.emit("RESUME", 0)
    for i, value in enumerate(rec.slots):
        if value is NULL:
            if i < nargs:   # argument slots were filled with dummy defaults
                pro.emit("DELETE_FAST", i)
            continue
        pro.push(value)
        pro.emit("STORE_FAST", i)    # cell and free slots receive the cell itself
    for i, value in enumerate(rec.stack):
        if i in rec.handled:
            # Inside an except/finally body: re-run PUSH_EXC_INFO so the handled
            # exception (sys.exception(), a bare `raise`) is re-established; it leaves
            # the previously handled one, i.e. the saved slot value, on the stack.
            pro.push(rec.handled[i])
            pro.emit("PUSH_EXC_INFO")
            pro.emit("POP_TOP")
        elif value is NULL:
            pro.emit("PUSH_NULL")
        else:
            pro.push(value)
    call_start = pro.units
    if rec.kind == CALL:
        pro.call(inner if inner is not None else value_fn)
        if rec.result == INSTANCE:   # Class() evaluates to the instance, not __init__'s None
            pro.emit("POP_TOP")
            pro.push(rec.instance)
    elif rec.kind == GENERATOR:
        pro.push(None)               # the re-executed YIELD_VALUE yields this
    call_end = pro.units
    pro.emit("JUMP_FORWARD", rec.resume)   # relative to the end of the prologue
    prologue = pro.units

    entries = [bc.ExceptionEntry(e.start + prologue, e.end + prologue, e.target + prologue,
                                 e.depth, e.lasti) for e in bc.exception_entries(code)]
    position = None
    if rec.kind == CALL:
        for e in bc.exception_entries(code):
            if e.start <= rec.pending < e.end:
                entries.insert(0, bc.ExceptionEntry(call_start, call_end, e.target + prologue,
                                                    e.depth, e.lasti))
                break
        position = list(code.co_positions())[rec.pending]

    table = bc.linetable_no_location(call_start)
    if position and position[0] is not None:
        table += bc.linetable_positions(call_end - call_start, position[0] - code.co_firstlineno,
                                        position)
        table += bc.linetable_positions(prologue - call_end, code.co_firstlineno - position[0])
    else:
        table += bc.linetable_no_location(prologue - call_start)
    table += code.co_linetable

    morph = code.replace(
        co_code=bytes(pro.out) + code.co_code, co_consts=pro.final_consts(),
        co_exceptiontable=bc.encode_exception_table(entries), co_linetable=bytes(table),
        co_stacksize=max(code.co_stacksize, len(rec.stack) + 6) + 2)
    _MORPHS[id(morph)] = (morph, _MorphInfo(code, prologue, call_start, call_end, rec))
    return morph


def build_morph_function(rec: FrameRecord, inner=None, value_fn=None) -> types.FunctionType:
    morph = build_morph_code(rec, inner, value_fn)
    module = sys.modules[rec.code.module]
    n_free = len(morph.co_freevars)
    closure = None
    if n_free:
        closure = tuple(c if isinstance(c, types.CellType) else types.CellType()
                        for c in rec.slots[len(rec.slots) - n_free:])
    fn = types.FunctionType(morph, module.__dict__, morph.co_name,
                            (None,) * morph.co_argcount, closure)
    kwonly = morph.co_varnames[morph.co_argcount:morph.co_argcount + morph.co_kwonlyargcount]
    fn.__kwdefaults__ = {name: None for name in kwonly} or None
    fn.__qualname__ = morph.co_qualname
    return fn


def build_resume_chain(records: list[FrameRecord], value_fn) -> types.FunctionType:
    """records innermost first -> a zero-argument function that resumes the outermost
    frame; the innermost frame receives value_fn() as snapshot()'s result."""
    fn = None
    for i, rec in enumerate(records):
        fn = build_morph_function(rec, inner=fn, value_fn=value_fn if i == 0 else None)
    return fn


def rebuild_generator(rec: FrameRecord):
    """A generator object in the state the record describes. A suspended one is
    advanced once, re-executing its original YIELD_VALUE, so it is paused at the very
    instruction it was paused at: send(), throw() and close() then run the same
    try/except/finally blocks as on the original."""
    gen = build_morph_function(rec)()
    if rec.kind == GENERATOR:
        next(gen)
    return gen
