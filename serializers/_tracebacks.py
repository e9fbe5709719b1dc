"""Tracebacks across a snapshot.

Traceback and frame objects cannot be pickled, yet an exception held at a snapshot
(the one an except body is handling, one kept in a variable) must print the same
traceback after a restore. Each traceback entry is saved as its code identity, line
and instruction offset. On restore, a real frame object is made for every entry by
running a stub of the original code whose prepended prologue raises at once; a
TracebackType is then built on that frame with the original instruction offset
(shifted past the prologue), so file, line, function name and the column carets all
come from the original code.
"""

from __future__ import annotations

import inspect
import sys
import types
from typing import Any, TypeAlias

from . import _bytecode as bc
from . import _dispatch
from ._codeid import CodeRef, code_ref, find_code

__all__ = ["save_traceback", "rebuild_traceback"]


class _StubRaise(BaseException):
    """Raised by a stub's prologue to obtain a frame object; never escapes."""


_STUB_CACHE: dict[int, tuple[types.CodeType, types.CodeType, int]] = {}

# One traceback entry: (code identity or None, file name, name, qualname, line, unit).
Entry: TypeAlias = tuple[CodeRef | None, str, str, str, int, int]


def save_traceback(tb: types.TracebackType | None) -> list[Entry]:
    entries: list[Entry] = []
    while tb is not None:
        frame = tb.tb_frame
        code, unit = _dispatch.code_position(frame.f_code, max(tb.tb_lasti, 0) // 2)
        module = frame.f_globals.get("__name__")
        ref = None
        if (
            isinstance(module, str)
            and sys.modules.get(module) is not None
            and sys.modules[module].__dict__ is frame.f_globals
        ):
            ref = code_ref(code, module)
        entries.append((ref, code.co_filename, code.co_name, code.co_qualname, tb.tb_lineno, unit))
        tb = tb.tb_next
    return entries


def _raising_stub(code: types.CodeType) -> tuple[types.CodeType, int]:
    hit = _STUB_CACHE.get(id(code))
    if hit is not None and hit[0] is code:
        return hit[1], hit[2]
    pro = bytearray()
    if code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR):
        bc.emit(pro, "RETURN_GENERATOR")
        bc.emit(pro, "POP_TOP")
    bc.emit(pro, "RESUME", 0)
    bc.emit(pro, "LOAD_CONST", len(code.co_consts))
    bc.emit(pro, "RAISE_VARARGS", 1)
    prologue = len(pro) // 2
    entries = [
        bc.ExceptionEntry(
            e.start + prologue, e.end + prologue, e.target + prologue, e.depth, e.lasti
        )
        for e in bc.exception_entries(code)
    ]
    stub = code.replace(
        co_code=bytes(pro) + code.co_code,
        co_consts=code.co_consts + (_StubRaise,),
        co_exceptiontable=bc.encode_exception_table(entries),
        co_linetable=bytes(bc.linetable_no_location(prologue)) + code.co_linetable,
    )
    _STUB_CACHE[id(code)] = (code, stub, prologue)
    return stub, prologue


def _frame_running(code: types.CodeType, globals_: dict[str, Any]) -> types.FrameType:
    """A frame object of `code` (a stub that raised in its prologue)."""
    closure = tuple(types.CellType() for _ in code.co_freevars) or None
    fn = types.FunctionType(code, globals_, code.co_name, (None,) * code.co_argcount, closure)
    if code.co_kwonlyargcount:
        names = code.co_varnames[code.co_argcount : code.co_argcount + code.co_kwonlyargcount]
        fn.__kwdefaults__ = dict.fromkeys(names)
    try:
        result = fn()
        # isinstance, as inspect.isgenerator() and co. test (their types forbid send)
        if isinstance(result, (types.GeneratorType, types.CoroutineType)):
            result.send(None)
        elif isinstance(result, types.AsyncGeneratorType):
            result.asend(None).send(None)
    except _StubRaise as exc:
        tb = exc.__traceback__
        assert tb is not None  # a caught exception has its traceback
        while tb.tb_next is not None:
            tb = tb.tb_next
        return tb.tb_frame
    raise RuntimeError(f"stub of {code.co_qualname} did not raise")


def _entry_frame(
    ref: CodeRef | None, filename: str, name: str, qualname: str, lineno: int, unit: int
) -> tuple[types.FrameType, int]:
    if ref is not None:
        try:
            code = find_code(ref)
        except Exception:
            code = None
        if code is not None:
            stub, prologue = _raising_stub(code)
            return _frame_running(stub, sys.modules[ref.module].__dict__), (unit + prologue) * 2
    # Code that cannot be found again (exec'd, changed): a stub raising at that line.
    source = "\n" * max(lineno - 1, 0) + "raise __snapstate_stub__"
    stub = compile(source, filename, "exec").replace(co_name=name, co_qualname=qualname)
    globals_ = {"__snapstate_stub__": _StubRaise, "__name__": "__snapstate_traceback__"}
    try:
        exec(stub, globals_)
    except _StubRaise as exc:
        tb = exc.__traceback__
        assert tb is not None  # a caught exception has its traceback
        while tb.tb_next is not None:
            tb = tb.tb_next
        return tb.tb_frame, tb.tb_lasti
    raise RuntimeError("traceback stub did not raise")  # pragma: no cover


def rebuild_traceback(entries: list[Entry]) -> types.TracebackType | None:
    tb = None
    for ref, filename, name, qualname, lineno, unit in reversed(entries):
        frame, lasti = _entry_frame(ref, filename, name, qualname, lineno, unit)
        tb = types.TracebackType(tb, frame, lasti, lineno)
    return tb
