"""Capture: read a paused greenlet's Python frames into FrameRecords.

With the agent paused inside snapshot(), every frame from snapshot()'s caller out to
the runtime's bootstrap is read through the interpreter-frame layout: raw local
slots (cells kept as cells), the value stack below the pending call's result (NULLs
kept), and where execution resumes. Between two frames there is either a direct
Python call, or C code. C code that only passes a call through (a `*args/**kwargs`
call on 3.11, `Class()` running `__init__`, `obj()` running a Python `__call__`, a
property getter, `__getitem__`) holds no state of its own, so the caller's stack depth
is computed from the bytecode and the frame is captured; any other C code is refused
with a SnapshotError that names both frames and the fix.
"""

from __future__ import annotations

import inspect
import sys
import types
from typing import Any

from .._errors import SnapshotError
from ..serializers import _bytecode as bc
from ..serializers._codeid import code_ref
from . import _layout
from ._frames import CALL, GENERATOR, GENERATOR_CREATED, INSTANCE, VALUE, FrameRecord
from ._layout import LAYOUT, NULL
from ._morph import morph_record, unmorph

__all__ = ["capture_stack", "capture_generator", "describe", "is_async_yield"]

_GENERATOR_LIKE = (
    inspect.CO_GENERATOR
    | inspect.CO_COROUTINE
    | inspect.CO_ASYNC_GENERATOR
    | inspect.CO_ITERABLE_COROUTINE
)

# links between a frame and its callee
_DIRECT, _INIT_SHIM, _C_CODE = "direct", "init-shim", "c"


def describe(frame: types.FrameType) -> str:
    code = frame.f_code
    return f"{code.co_qualname}() at {code.co_filename}:{frame.f_lineno}"


def _kind_of(code: types.CodeType) -> str:
    if code.co_flags & inspect.CO_COROUTINE:
        return "coroutine"
    if code.co_flags & inspect.CO_ASYNC_GENERATOR:
        return "async generator"
    return "generator"


def _module_of(frame: types.FrameType) -> str:
    name = frame.f_globals.get("__name__")
    module = sys.modules.get(name) if isinstance(name, str) else None
    if module is None or module.__dict__ is not frame.f_globals:
        raise SnapshotError(
            f"{describe(frame)} runs in globals that belong to no importable module "
            "(code from exec() or eval()?), so it could not be found again after a restore. "
            "Move that code into a module of the agent."
        )
    assert isinstance(name, str)  # sys.modules[name] is that module
    return name


def _link(
    caller: types.FrameType, caller_addr: int, caller_paused_in_call: bool, callee: types.FrameType
) -> tuple[str, int | None]:
    """How `callee` was called by `caller`: directly, through C code, or (3.13)
    through the hidden frame that finishes an inlined __init__.

    A frame's saved stack pointer is valid only while it is paused in a call the
    interpreter inlined; a frame that called C code is still "executing" (its stack
    pointer lives in a C local), so C code sits between it and its callee. The C
    entry frame itself must not be read: it lived on the greenlet's C stack, which
    greenlet has copied away while the greenlet is suspended."""
    if not caller_paused_in_call:
        return _C_CODE, None
    _, callee_view = _layout.iframe_of(callee)
    previous = _layout.true_previous(callee, callee_view)
    if previous == caller_addr:
        return _DIRECT, None
    if previous:  # a frame in the interpreter's own frame stack: safe to read
        middle = _layout.iframe_at(previous)
        if middle.previous == caller_addr and _layout.is_init_shim(middle):
            return _INIT_SHIM, previous
    raise SnapshotError(
        f"an interpreter frame the engine does not know sits between {describe(callee)} and "
        f"its caller {describe(caller)}. Move the snapshot() (or the wait: sleep(), "
        f"request_approval(), a rate-limited effect) out of {callee.f_code.co_qualname}() "
        "or call it directly from Python code."
    )


def _handled_slots(code: types.CodeType, unit: int) -> list[int]:
    """Value-stack indices holding the previously handled exception, pushed by
    PUSH_EXC_INFO, of every except/finally body enclosing `unit`. Found by following
    the exception table's handler chain: a handler that starts with `COPY 3;
    POP_EXCEPT` is the cleanup of an except body whose saved slot is depth - 1."""
    entries = bc.exception_entries(code)
    slots: list[int] = []
    seen: set[bc.ExceptionEntry] = set()
    while True:
        entry = next((e for e in entries if e.start <= unit < e.end), None)
        if entry is None or entry in seen:
            break
        seen.add(entry)
        first = bc.instruction_at(code, entry.target)
        if first.opname == "COPY" and first.arg == 3 and entry.lasti:
            if bc.instruction_at(code, first.end).opname == "POP_EXCEPT":
                slots.append(entry.depth - 1)
        unit = entry.target
    return sorted(set(slots))


def _callable_of_call(ins: bc.Instruction, stack_before: list[object]) -> object:
    depth = len(stack_before)
    if ins.opname == "CALL_FUNCTION_EX":
        index = depth - 2 - (ins.arg & 1) - (1 if LAYOUT.CALLABLE_FIRST else 0)
        return stack_before[index]
    above = ins.arg + (1 if ins.opname == "CALL_KW" else 0)
    first, second = stack_before[depth - above - 2], stack_before[depth - above - 1]
    if LAYOUT.CALLABLE_FIRST:
        return first
    return second if first is NULL else first


def _code_of_callable(obj: object) -> types.CodeType | None:
    fn = getattr(obj, "__func__", obj)
    code = getattr(fn, "__code__", None)
    return code if isinstance(code, types.CodeType) else None


def _init_code(cls: type) -> types.CodeType | None:
    if type(cls).__call__ is not type.__call__:
        return None
    init = inspect.getattr_static(cls, "__init__", None)
    return _code_of_callable(init)


def _call_slot_code(obj: object) -> types.CodeType | None:
    """Code of the Python function that calling `obj` runs through its type's __call__
    slot, when that C slot only passes the call through: a plain function (also as a
    classmethod, staticmethod or bound method) found on type(obj). None for anything
    else (a callable object, functools.partial, a C method): another C call or C state
    would sit between the frames."""
    call = inspect.getattr_static(type(obj), "__call__", None)
    if isinstance(call, (staticmethod, classmethod, types.MethodType)):
        call = call.__func__  # a bound method's C call only prepends its __self__
    return call.__code__ if isinstance(call, types.FunctionType) else None


def _c_name(obj: object) -> str:
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    module: str | None
    if name is None:
        name = type(obj).__qualname__
        module = type(obj).__module__
    else:
        module = getattr(obj, "__module__", None)
    return f"{module}.{name}" if module and module != "builtins" else str(name)


def _refuse_c_code(frame: types.FrameType, callee: types.FrameType, what: str) -> SnapshotError:
    return SnapshotError(
        f"snapshot() (or a wait that hibernates) inside {callee.f_code.co_qualname}() at "
        f"{callee.f_code.co_filename}:{callee.f_lineno}, which was called by C code ({what}) "
        f"from {describe(frame)}: the C function keeps state between the two frames that "
        "cannot be saved. Move the snapshot() or wait (sleep(), request_approval(), a "
        f"rate-limited effect) out of {callee.f_code.co_qualname}(), e.g. call it from "
        f"{frame.f_code.co_qualname}() before or after that call."
    )


def _pass_through(
    frame: types.FrameType,
    callee: types.FrameType,
    callee_code: types.CodeType,
    callee_record: FrameRecord | None,
    ins: bc.Instruction,
    stack_before: list[object],
    code: types.CodeType,
) -> tuple[str, object]:
    """Result kind and instance when C code between frame and callee only passes the
    call through; a SnapshotError otherwise."""
    if ins.opname in LAYOUT.CALL_OPS:
        target = _callable_of_call(ins, stack_before)
        if isinstance(target, type):
            if _init_code(target) is callee_code:
                instance = (
                    callee_record.slots[0]
                    if callee_record is not None and callee_record.slots
                    else NULL
                )
                if isinstance(instance, types.CellType):
                    instance = instance.cell_contents
                if isinstance(instance, target):
                    return INSTANCE, instance
            elif (
                type(target).__call__ is not type.__call__
                and _call_slot_code(target) is callee_code
            ):
                return VALUE, None  # a metaclass __call__: the call's value is its value
            raise _refuse_c_code(frame, callee, f"{_c_name(target)}(...)")
        if _code_of_callable(target) is callee_code and isinstance(
            getattr(target, "__func__", target), types.FunctionType
        ):
            return VALUE, None
        if (
            not isinstance(target, (types.FunctionType, types.MethodType))
            and _call_slot_code(target) is callee_code
        ):
            return VALUE, None  # obj(...) running type(obj).__call__
        raise _refuse_c_code(frame, callee, f"{_c_name(target)}(...)")
    if ins.opname in LAYOUT.ATTR_OPS:
        owner = stack_before[-1]
        name = code.co_names[ins.arg >> LAYOUT.ATTR_NAME_SHIFT]
        if LAYOUT.ATTR_METHOD_BIT and ins.arg & 1:
            raise _refuse_c_code(frame, callee, f"property {name!r} looked up to be called")
        descriptor = inspect.getattr_static(type(owner), name, None)
        if isinstance(descriptor, property) and _code_of_callable(descriptor.fget) is callee_code:
            return VALUE, None
        raise _refuse_c_code(frame, callee, f"attribute lookup .{name}")
    if ins.opname in LAYOUT.SUBSCR_OPS:
        container = stack_before[-2]
        getitem = inspect.getattr_static(type(container), "__getitem__", None)
        if _code_of_callable(getitem) is callee_code:
            return VALUE, None
        raise _refuse_c_code(frame, callee, "a subscript [...]")
    if ins.opname in LAYOUT.METHOD_ATTR_OPS:
        raise _refuse_c_code(frame, callee, "a property looked up to be called")
    if ins.opname.startswith("FOR_ITER"):
        raise _refuse_c_code(frame, callee, "the for loop's call to __next__")
    raise _refuse_c_code(frame, callee, f"the {ins.opname} instruction")


def _original_code(frame: types.FrameType) -> types.CodeType:
    return unmorph(frame.f_code, max(frame.f_lasti // 2, 0))[0]


def _capture_call_frame(
    frame: types.FrameType, callee: types.FrameType, callee_record: FrameRecord | None
) -> FrameRecord:
    code = frame.f_code
    if code.co_flags & _GENERATOR_LIKE:
        raise SnapshotError(
            f"snapshot() (or a wait that hibernates) inside the body of {_kind_of(code)} "
            f"{describe(frame)}: a running {_kind_of(code)}'s frame is driven by its consumer "
            "and cannot be frozen. Move the snapshot() or the wait (sleep(), "
            f"request_approval(), a rate-limited effect) out of {code.co_qualname}() into the "
            "code that iterates it (a suspended generator held in a variable is frozen fine)."
        )
    module = _module_of(frame)
    addr, view = _layout.iframe_of(frame)
    original, unit, prologue_rec = unmorph(code, frame.f_lasti // 2)
    n = _layout.nlocalsplus(original)
    if prologue_rec is not None:
        ins = bc.instruction_at(original, prologue_rec.pending)
        resume = prologue_rec.resume
    else:
        ins = bc.instruction_at(original, unit)
        resume = ins.end
    try:
        depth_before = bc.stack_depth_before(original, ins)
        below = bc.stack_depth_after(original, ins) - 1
    except ValueError as exc:
        raise SnapshotError(f"cannot compute the value stack of {describe(frame)}: {exc}") from None

    link, _shim = _link(frame, addr, view.stacktop >= n, callee)
    callee_code = _original_code(callee)
    result: str = VALUE
    instance: object = None
    if prologue_rec is not None:
        result, instance = prologue_rec.result, prologue_rec.instance
    elif link == _C_CODE:
        if LAYOUT.PRECALL_POPS_ARGS and ins.opname == "CALL":
            depth_before += ins.arg
        stack_before = _layout.read_pointers(addr, n, n + depth_before)
        result, instance = _pass_through(
            frame, callee, callee_code, callee_record, ins, stack_before, original
        )
    elif link == _INIT_SHIM:
        assert _shim is not None  # _link gives the shim's address with _INIT_SHIM
        instance = _layout.read_pointers(_shim, 0, 1)[0]
        result = INSTANCE
    elif ins.opname in LAYOUT.ATTR_OPS and LAYOUT.ATTR_METHOD_BIT and ins.arg & 1:
        raise _refuse_c_code(frame, callee, "a property looked up to be called")
    elif not (
        ins.opname in LAYOUT.CALL_OPS
        or ins.opname in LAYOUT.ATTR_OPS
        or ins.opname in LAYOUT.SUBSCR_OPS
    ):
        raise _refuse_c_code(frame, callee, f"the {ins.opname} instruction")

    if link != _C_CODE and view.stacktop != n + below:
        raise SnapshotError(
            f"the engine computed a value stack of {below} items for {describe(frame)} but the "
            f"interpreter holds {view.stacktop - n}; this is a snapstate bug, please report it "
            "with the agent's code. The job keeps running; earlier snapshots are valid."
        )

    stack = _layout.read_pointers(addr, n, n + below)
    handled = [
        i
        for i in _handled_slots(original, ins.start)
        if i < len(stack) and (stack[i] is None or isinstance(stack[i], BaseException))
    ]
    return FrameRecord(
        code=code_ref(original, module),
        slots=_layout.read_pointers(addr, 0, n),
        stack=stack,
        resume=resume,
        pending=ins.start,
        kind=CALL,
        result=result,
        instance=instance,
        handled=dict.fromkeys(handled),
        lineno=frame.f_lineno,
    )


def _assign_handled(
    records_outer_first: list[FrameRecord], innermost: BaseException | None
) -> None:
    """The exception handled by each enclosing except body: the previously handled
    exception saved by the next inner handler, or, for the innermost, `innermost`."""
    order = [(rec, i) for rec in records_outer_first for i in sorted(rec.handled)]
    for k, (rec, i) in enumerate(order):
        following = order[k + 1][0].stack[order[k + 1][1]] if k + 1 < len(order) else innermost
        if isinstance(following, BaseException):
            rec.handled[i] = following
        else:
            del rec.handled[i]


def capture_stack(
    top: types.FrameType, stop_code: types.CodeType, handled_exception: BaseException | None
) -> list[FrameRecord]:
    """Records of the frames below `top` (snapshot()'s own frame) down to the frame
    running `stop_code` (excluded), innermost first."""
    records: list[FrameRecord] = []
    # snapshot()'s own frame is not recorded: it has no record to pass on
    callee: types.FrameType = top
    callee_record: FrameRecord | None = None
    frame = top.f_back
    while frame is not None and frame.f_code is not stop_code:
        record = _capture_call_frame(frame, callee, callee_record)
        records.append(record)
        callee, callee_record = frame, record
        frame = frame.f_back
    if frame is None:
        raise SnapshotError(
            "snapshot() was not called from a job's task; run the agent "
            "with `snaprun run` or snapstate.run()"
        )
    _assign_handled(records[::-1], handled_exception)
    return records


def is_async_yield(code: types.CodeType, yield_unit: int) -> bool:
    """The YIELD_VALUE at `yield_unit` of an async generator is a real `yield` (its
    value is wrapped for the consumer), not an await's hand-over to the event loop."""
    if not code.co_flags & inspect.CO_ASYNC_GENERATOR:
        return False
    before = [ins for ins in bc.instructions(code) if ins.end <= yield_unit]
    return bool(before) and before[-1].opname in ("ASYNC_GEN_WRAP", "CALL_INTRINSIC_1")


def _async_generator_created(gen: types.AsyncGeneratorType[Any, Any]) -> bool:
    """Not started yet (3.11 has no ag_suspended: paused at or before its RESUME)."""
    suspended = getattr(gen, "ag_suspended", None)
    if suspended is not None:
        return not suspended and not gen.ag_running
    frame = gen.ag_frame
    if frame is None or gen.ag_running:
        return False
    first = next(i.start for i in bc.instructions(frame.f_code) if i.opname == "RESUME")
    return frame.f_lasti // 2 <= first


def capture_generator(
    gen: types.GeneratorType[Any, Any, Any]
    | types.CoroutineType[Any, Any, Any]
    | types.AsyncGeneratorType[Any, Any],
) -> FrameRecord:
    """Record of a suspended (or not yet started) generator held as a value, of a
    coroutine created or suspended at an await, or of an async generator suspended at
    a `yield` (rebuilt paused there by runtime/_morph.py's rebuild_generator)."""
    if isinstance(gen, types.CoroutineType):
        frame, created = gen.cr_frame, inspect.getcoroutinestate(gen) == inspect.CORO_CREATED
        if gen.cr_running:
            raise SnapshotError(f"coroutine {gen.__qualname__}() is running")
    elif isinstance(gen, types.AsyncGeneratorType):
        frame, created = gen.ag_frame, _async_generator_created(gen)
        # ag_running is also true while an `async for` step (asend) is in progress and
        # the generator is paused inside an await of its body: frozen with that step
        if gen.ag_running and getattr(gen, "ag_suspended", True) is False:
            raise SnapshotError(f"async generator {gen.__qualname__}() is running")
    else:
        frame, created = gen.gi_frame, inspect.getgeneratorstate(gen) == inspect.GEN_CREATED
    assert frame is not None  # the pickler passes only a generator that has a frame
    code = frame.f_code
    module = _module_of(frame)
    addr, view = _layout.iframe_of(frame)
    if created:
        restored = morph_record(code)
        if restored is not None:  # restored unstarted: its slots hold dummies until started
            return restored
        original = code
        resume = next(ins.end for ins in bc.instructions(original) if ins.opname == "RESUME")
        n = _layout.nlocalsplus(original)
        return FrameRecord(
            code=code_ref(original, module),
            slots=_layout.read_pointers(addr, 0, n),
            stack=[],
            resume=resume,
            pending=resume,
            kind=GENERATOR_CREATED,
            lineno=original.co_firstlineno,
        )
    original, after_yield, _ = unmorph(code, frame.f_lasti // 2 + LAYOUT.GEN_RESUME_DELTA)
    ins = bc.instruction_at(original, after_yield - 1)
    if ins.opname != "YIELD_VALUE":
        raise SnapshotError(
            f"{_kind_of(code)} {describe(frame)} is paused in {ins.opname}, not at a "
            "yield; it cannot be frozen"
        )
    if (
        isinstance(gen, types.AsyncGeneratorType)
        and not is_async_yield(original, ins.start)
        and not gen.ag_running  # no `async for` step in progress: a stray await-yield
    ):
        raise SnapshotError(
            f"async generator {describe(frame)} is paused inside an await of its body (a "
            "snapshot or wait inside the async generator): move the snapshot out of "
            f"{original.co_qualname}() into the code that iterates it (an async generator "
            "paused at a yield is frozen fine)"
        )
    n = _layout.nlocalsplus(original)
    stack = _layout.read_pointers(addr, n, view.stacktop)
    record = FrameRecord(
        code=code_ref(original, module),
        slots=_layout.read_pointers(addr, 0, n),
        stack=stack,
        resume=ins.start,
        pending=ins.start,
        kind=GENERATOR,
        lineno=frame.f_lineno,
        handled=dict.fromkeys(
            i
            for i in _handled_slots(original, ins.start)
            if i < len(stack) and (stack[i] is None or isinstance(stack[i], BaseException))
        ),
    )
    _assign_handled([record], _layout.generator_handled_exception(gen))
    return record
