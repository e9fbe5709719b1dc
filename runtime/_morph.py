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
import weakref
from collections.abc import Callable
from dataclasses import dataclass

from .._abi import pinned
from ..serializers import _bytecode as bc
from ..serializers._codeid import find_code
from ._frames import CALL, GENERATOR, GENERATOR_CREATED, INSTANCE, FrameRecord
from ._layout import LAYOUT, NULL

__all__ = [
    "build_resume_chain",
    "rebuild_generator",
    "rebuild_async_step",
    "unmorph",
    "morph_record",
    "is_morph",
    "restoring",
]


@dataclass(frozen=True)
class _MorphInfo:
    original: types.CodeType
    prologue: int  # units before the original body
    call_start: int
    call_end: int
    pending: FrameRecord  # the record without its values: where the frame is paused
    created: FrameRecord | None  # whole record of a generator not started yet


# id(morph code) -> (weak reference to it, info). Entries go away with their code, so
# a restored job's saved values are not kept alive by the registry.
_MORPHS: dict[int, tuple[weakref.ref[types.CodeType], _MorphInfo]] = {}


def _register(morph: types.CodeType, info: _MorphInfo) -> None:
    key = id(morph)

    def forget(_ref: weakref.ref[types.CodeType], key: int = key) -> None:
        _MORPHS.pop(key, None)

    _MORPHS[key] = (weakref.ref(morph, forget), info)


def _info(code: types.CodeType) -> _MorphInfo | None:
    hit = _MORPHS.get(id(code))
    return hit[1] if hit is not None and hit[0]() is code else None


def morph_record(code: types.CodeType) -> FrameRecord | None:
    """The record of a restored generator that has not started yet (its values are
    still in its prologue), or None."""
    info = _info(code)
    return info.created if info is not None else None


def is_morph(code: types.CodeType) -> bool:
    return _info(code) is not None


def restoring(code: types.CodeType, offset: int) -> bool:
    """The instruction at byte `offset` of `code` is a restored frame's own machinery,
    not the agent's next line: its prologue, or the jump's landing, the rest of the
    very instruction the frame was paused in (a debugger steps over both)."""
    info = _info(code)
    if info is None:
        return False
    unit = offset // 2  # f_lasti counts bytes; a code unit is two
    return unit < info.prologue or unit == info.prologue + info.pending.resume


def unmorph(code: types.CodeType, unit: int) -> tuple[types.CodeType, int, FrameRecord | None]:
    """Map (code, unit) of a possibly restored frame to the original code and unit.

    The third item says where the frame is paused (pending instruction, resume
    offset, result kind) when it is still in its prologue's call, i.e. its inner frame
    has not returned yet."""
    info = _info(code)
    if info is None:
        return code, unit, None
    if unit >= info.prologue:
        return info.original, unit - info.prologue, None
    if info.call_start <= unit < info.call_end:
        return info.original, info.pending.pending, info.pending
    raise RuntimeError(f"{code.co_qualname} was captured inside its restore prologue (unit {unit})")


class _Values(list[object]):
    """The values a morph prologue loads (locals, stack items). Code objects hash
    their constants, so this list hashes by identity; the prologue empties it once
    everything is loaded, so the restored frames own their values alone."""

    __hash__ = object.__hash__  # type: ignore[assignment]  # hashable on purpose

    def __eq__(self, other: object) -> bool:
        return self is other


_INLINE = (type(None), bool, int, float, str, bytes)


class _Prologue:
    """Bytecode and constants of a morph prologue under construction."""

    def __init__(self, code: types.CodeType) -> None:
        self.out = bytearray()
        self.consts = list(code.co_consts)
        self.values = _Values()
        self._values_index = self.const(self.values)

    def const(self, value: object) -> int:
        self.consts.append(value)
        return len(self.consts) - 1

    def emit(self, opname: str, arg: int = 0) -> None:
        bc.emit(self.out, opname, arg)

    def push(self, value: object) -> None:
        if type(value) in _INLINE:
            self.emit("LOAD_CONST", self.const(value))
            return
        self.values.append(value)
        self.emit("LOAD_CONST", self._values_index)
        self.emit("LOAD_CONST", self.const(len(self.values) - 1))
        self.emit("BINARY_SUBSCR")

    def call(self, fn: object) -> None:
        """Call `fn` (a constant of the code) with no arguments."""
        index = self.const(fn)
        for name, arg in LAYOUT.CALL_SEQUENCE:
            self.emit(name, index if arg == "fn" else arg)

    def release_values(self) -> None:
        if self.values:
            self.call(self.values.clear)
            self.emit("POP_TOP")

    @property
    def units(self) -> int:
        return len(self.out) // 2


def build_morph_code(
    rec: FrameRecord,
    inner: Callable[[], object] | None,
    value_fn: Callable[[], object] | None,
) -> types.CodeType:
    code = find_code(rec.code)
    nargs = (
        code.co_argcount
        + code.co_kwonlyargcount
        + bool(code.co_flags & inspect.CO_VARARGS)
        + bool(code.co_flags & inspect.CO_VARKEYWORDS)
    )
    pro = _Prologue(code)
    if rec.kind != CALL:
        pro.emit("RETURN_GENERATOR")
        pro.emit("POP_TOP")
    pro.emit("RESUME", 0)
    for i, value in enumerate(rec.slots):
        if value is NULL:
            if i < nargs:  # argument slots were filled with dummy defaults
                pro.emit("DELETE_FAST", i)
            continue
        pro.push(value)
        pro.emit("STORE_FAST", i)  # cell and free slots receive the cell itself
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
    pro.release_values()
    call_start = pro.units
    if rec.kind == CALL:
        pro.call(inner if inner is not None else value_fn)
        if rec.result == INSTANCE:  # Class() evaluates to the instance, not __init__'s None
            pro.emit("POP_TOP")
            pro.emit("LOAD_CONST", pro.const(_Values([rec.instance])))
            pro.emit("LOAD_CONST", pro.const(0))
            pro.emit("BINARY_SUBSCR")
    elif rec.kind == GENERATOR:
        pro.push(None)  # the re-executed YIELD_VALUE yields this
        wrap = _async_yield_wrap(code, rec.resume)
        if wrap is not None:  # an async generator's yield: wrapped as the original was
            pro.emit(*wrap)
    call_end = pro.units
    pro.emit("JUMP_FORWARD", rec.resume)  # relative to the end of the prologue
    prologue = pro.units

    entries = [
        bc.ExceptionEntry(
            e.start + prologue, e.end + prologue, e.target + prologue, e.depth, e.lasti
        )
        for e in bc.exception_entries(code)
    ]
    position = None
    if rec.kind == CALL:
        for e in bc.exception_entries(code):
            if e.start <= rec.pending < e.end:
                entries.insert(
                    0,
                    bc.ExceptionEntry(call_start, call_end, e.target + prologue, e.depth, e.lasti),
                )
                break
        position = list(code.co_positions())[rec.pending]

    table = bc.linetable_no_location(call_start)
    if position and position[0] is not None:
        table += bc.linetable_positions(
            call_end - call_start, position[0] - code.co_firstlineno, position
        )
        table += bc.linetable_positions(prologue - call_end, code.co_firstlineno - position[0])
    else:
        table += bc.linetable_no_location(prologue - call_start)
    table += code.co_linetable

    morph = code.replace(
        co_code=bytes(pro.out) + code.co_code,
        co_consts=tuple(pro.consts),
        co_exceptiontable=bc.encode_exception_table(entries),
        co_linetable=bytes(table),
        co_stacksize=max(code.co_stacksize, len(rec.stack) + 6) + 2,
    )
    pending = FrameRecord(
        code=rec.code,
        slots=[],
        stack=[],
        resume=rec.resume,
        pending=rec.pending,
        kind=rec.kind,
        result=rec.result,
        instance=rec.instance,
        lineno=rec.lineno,
    )
    _register(
        morph,
        _MorphInfo(
            code,
            prologue,
            call_start,
            call_end,
            pending,
            rec if rec.kind == GENERATOR_CREATED else None,
        ),
    )
    return morph


def build_morph_function(
    rec: FrameRecord,
    inner: Callable[[], object] | None = None,
    value_fn: Callable[[], object] | None = None,
) -> types.FunctionType:
    morph = build_morph_code(rec, inner, value_fn)
    module = sys.modules[rec.code.module]
    n_free = len(morph.co_freevars)
    closure = None
    if n_free:
        closure = tuple(
            c if isinstance(c, types.CellType) else types.CellType()
            for c in rec.slots[len(rec.slots) - n_free :]
        )
    fn = types.FunctionType(
        morph, module.__dict__, morph.co_name, (None,) * morph.co_argcount, closure
    )
    kwonly = morph.co_varnames[morph.co_argcount : morph.co_argcount + morph.co_kwonlyargcount]
    fn.__kwdefaults__ = {name: None for name in kwonly} or None
    fn.__qualname__ = morph.co_qualname
    return fn


def build_resume_chain(
    records: list[FrameRecord], value_fn: Callable[[], object]
) -> types.FunctionType:
    """records innermost first -> a zero-argument function that resumes the outermost
    frame; the innermost frame receives value_fn() as snapshot()'s result."""
    fn: types.FunctionType | None = None
    for i, rec in enumerate(records):
        fn = build_morph_function(rec, inner=fn, value_fn=value_fn if i == 0 else None)
    assert fn is not None  # a snapshot holds at least the entry function's frame
    return fn


@pinned("rebuild_async_step")
def rebuild_async_step(gen: object) -> object:
    """The `async for` step (asend) in progress of an async generator restored paused
    inside an await of its body: advancing it once runs the generator's restore
    prologue up to that await, where it hands its await over as the original did."""
    step = gen.asend(None)  # type: ignore[attr-defined]
    if step.send(None) is not None:
        raise RuntimeError("restoring an async generator's step yielded a value")
    return step


def _async_yield_wrap(code: types.CodeType, yield_unit: int) -> tuple[str, int] | None:
    """The instruction wrapping the value an async generator's `yield` at `yield_unit`
    hands its consumer (ASYNC_GEN_WRAP, or CALL_INTRINSIC_1 from 3.12); None for any
    other YIELD_VALUE (a generator's, an await's)."""
    if not code.co_flags & inspect.CO_ASYNC_GENERATOR:
        return None
    before = [ins for ins in bc.instructions(code) if ins.end <= yield_unit]
    if before and before[-1].opname in ("ASYNC_GEN_WRAP", "CALL_INTRINSIC_1"):
        return before[-1].opname, before[-1].arg
    return None


@pinned("rebuild_generator")
def rebuild_generator(rec: FrameRecord) -> object:
    """A generator, coroutine or async generator object in the state the record
    describes. A suspended one is advanced once, re-executing its original YIELD_VALUE,
    so it is paused at the very instruction it was paused at: send(), throw() and
    close() then run the same try/except/finally blocks as on the original. A coroutine
    paused at an await re-yields None to nobody; its awaited object (on its value
    stack) is untouched until the coroutine is next sent a value."""
    gen = build_morph_function(rec)()
    if rec.kind == GENERATOR:
        if isinstance(gen, types.CoroutineType):
            if gen.send(None) is not None:
                raise RuntimeError(f"restoring {gen.__qualname__}() yielded a value")
        elif isinstance(gen, types.AsyncGeneratorType):
            if _async_yield_wrap(find_code(rec.code), rec.resume) is None:
                return gen  # paused inside an await: its `async for` step primes it
            try:
                gen.asend(None).send(None)
            except StopIteration:
                pass  # it yielded its (wrapped) value: paused at that yield
            else:
                raise RuntimeError(f"restoring {gen.__qualname__}() did not reach its yield")
        else:
            next(gen)
    return gen
