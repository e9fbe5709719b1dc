"""Raw access to CPython's interpreter frames, driven by one table per minor version.

The table modules (_cpython311, _cpython312, _cpython313) hold every version-specific
fact; this module turns them into a ctypes view and checks, at import, that the view
matches the running interpreter on a probe frame. An unknown version or a mismatch
raises ImportError naming the version, instead of reading garbage later.
"""

from __future__ import annotations

import ctypes
import importlib
import sys
import types
from collections.abc import Generator

from .._abi import pinned

__all__ = [
    "LAYOUT",
    "NULL",
    "IFrame",
    "nlocalsplus",
    "iframe_of",
    "read_pointers",
    "true_previous",
    "generator_handled_exception",
    "object_at",
    "replace_stack_top",
    "set_task_cancelling",
]

_SUPPORTED = {(3, 11): "_cpython311", (3, 12): "_cpython312", (3, 13): "_cpython313"}
_VERSION = sys.version_info[:2]


def check_supported(implementation: str, version: tuple[int, int], full: str) -> str:
    """The name of the layout table for this interpreter, or ImportError naming it."""
    if implementation != "cpython" or version not in _SUPPORTED:
        raise ImportError(
            f"snapstate's freeze engine supports CPython 3.11, 3.12 and 3.13; this is "
            f"{implementation} {full}. Run the agent under one of those."
        )
    return _SUPPORTED[version]


_TABLE = check_supported(sys.implementation.name, _VERSION, sys.version.split()[0])

import greenlet  # noqa: E402  (after the version check: its message comes first)

LAYOUT = importlib.import_module(f"{__package__}.{_TABLE}")

_P = ctypes.c_void_p


class IFrame(ctypes.Structure):
    _fields_ = LAYOUT.IFRAME_FIELDS


_LOCALSPLUS_OFFSET = ctypes.sizeof(IFrame)
# PyFrameObject: PyObject_HEAD, f_back, then f_frame (the _PyInterpreterFrame pointer).
_F_FRAME_OFFSET = object.__basicsize__ + ctypes.sizeof(_P)


class _Null:
    """Marker for a NULL pointer in a local slot or on the value stack."""

    __slots__ = ()
    _instance: _Null | None = None

    def __new__(cls) -> _Null:
        if cls._instance is None:
            cls._instance = object.__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "<NULL>"

    def __reduce__(self) -> str:
        return "NULL"


NULL = pinned("NULL")(_Null())  # saved as snapstate._abi.NULL


def nlocalsplus(code: types.CodeType) -> int:
    """Number of local slots (locals, cells, free variables) of `code`."""
    return (
        code.co_nlocals
        + len([c for c in code.co_cellvars if c not in code.co_varnames])
        + len(code.co_freevars)
    )


def object_at(address: int) -> object:
    """The Python object at `address` (a borrowed reference)."""
    return ctypes.cast(address, ctypes.py_object).value


def iframe_of(frame: types.FrameType) -> tuple[int, IFrame]:
    """Address and ctypes view of the interpreter frame behind a frame object."""
    address = _P.from_address(id(frame) + _F_FRAME_OFFSET).value
    assert address is not None  # a frame object always points to its interpreter frame
    view = IFrame.from_address(address)
    if getattr(view, LAYOUT.CODE_FIELD) != id(frame.f_code) or view.frame_obj != id(frame):
        raise RuntimeError(
            f"interpreter frame of {frame.f_code.co_qualname} does not match the CPython "
            f"{_VERSION[0]}.{_VERSION[1]} layout table; this interpreter build is not supported"
        )
    return address, view


def iframe_at(address: int) -> IFrame:
    return IFrame.from_address(address)


def code_of(view: IFrame) -> object:
    return object_at(getattr(view, LAYOUT.CODE_FIELD))


def read_pointers(address: int, start: int, stop: int) -> list[object]:
    """localsplus[start:stop] of the interpreter frame at `address`; NULL kept as NULL."""
    if stop <= start:
        return []
    array = (_P * stop).from_address(address + _LOCALSPLUS_OFFSET)
    return [object_at(p) if p else NULL for p in array[start:stop]]


_INCREF = ctypes.pythonapi.Py_IncRef
_INCREF.argtypes = [ctypes.py_object]
_INCREF.restype = None
_DECREF = ctypes.pythonapi.Py_DecRef
_DECREF.argtypes = [ctypes.py_object]
_DECREF.restype = None


def replace_stack_top(frame: types.FrameType, old: object, new: object) -> None:
    """Put `new` in place of `old` at the top of a suspended frame's value stack (what
    a coroutine paused at an await sends to: its awaited iterator)."""
    address, view = iframe_of(frame)
    index = view.stacktop - 1
    array = (_P * (index + 1)).from_address(address + _LOCALSPLUS_OFFSET)
    if index < nlocalsplus(frame.f_code) or array[index] != id(old):
        raise RuntimeError(f"{frame.f_code.co_qualname}() does not hold that awaited object")
    _INCREF(new)
    array[index] = id(new)
    _DECREF(old)


def set_task_cancelling(task: object, count: int) -> None:
    """Give a task not started yet the cancellation count (Task.cancelling()) a saved
    task had, with no cancellation pending: asyncio has no API to set it."""
    field = ctypes.c_int.from_address(id(task) + LAYOUT.TASK_NUM_CANCELS_OFFSET)
    cancelling = getattr(task, "cancelling")  # noqa: B009 (an asyncio.Task)
    if field.value != cancelling() or getattr(task, "_must_cancel", True):
        raise RuntimeError("asyncio's Task does not match the layout table")
    field.value = count
    if cancelling() != count:
        field.value = 0
        raise RuntimeError("asyncio's Task does not match the layout table")


def true_previous(frame: types.FrameType, view: IFrame) -> int:
    """Address of the frame that really called `frame` (greenlet rewrites `previous`
    of a suspended greenlet's frames on 3.12+ and keeps the original aside)."""
    if LAYOUT.FRAME_DATA_OFFSET is None:
        return view.previous or 0
    return _P.from_address(id(frame) + LAYOUT.FRAME_DATA_OFFSET).value or 0


def is_init_shim(view: IFrame) -> bool:
    """3.13: the hidden frame CALL_ALLOC_AND_ENTER_INIT runs after __init__."""
    if LAYOUT.INIT_SHIM_NAME is None:
        return False
    code = code_of(view)
    return (
        isinstance(code, types.CodeType)
        and code.co_name == LAYOUT.INIT_SHIM_NAME
        and code.co_filename == LAYOUT.INIT_SHIM_NAME
    )


def generator_handled_exception(gen: object) -> BaseException | None:
    """The exception a suspended generator is handling (its gi_exc_state), or None."""
    address = _P.from_address(id(gen) + LAYOUT.GEN_EXC_VALUE_OFFSET).value
    if not address:
        return None
    value = object_at(address)
    return value if isinstance(value, BaseException) else None


# --------------------------------------------------------------------------- self-check
def _self_check() -> None:
    marker_a, marker_b = object(), object()
    seen: dict[str, object] = {}

    def callee(x: object) -> object:
        seen["frame"] = sys._getframe()
        parent = greenlet.getcurrent().parent
        assert parent is not None  # the probe runs in a greenlet of its own
        return parent.switch()

    def caller(a: object, b: object) -> tuple[list[object], object]:
        c = [a, b]
        return (c, callee(a))

    g = greenlet.greenlet(caller)
    g.switch(marker_a, marker_b)
    try:
        top = g.gr_frame
        assert top is not None  # the probe greenlet is paused in callee()
        callee_frame = top.f_back if top.f_code is not callee.__code__ else top
        assert callee_frame is not None
        caller_frame = callee_frame.f_back
        assert caller_frame is not None
        caller_addr, caller_view = iframe_of(caller_frame)
        callee_addr, callee_view = iframe_of(callee_frame)
        n = nlocalsplus(caller.__code__)
        slots = read_pointers(caller_addr, 0, n)
        if slots[0] is not marker_a or slots[1] is not marker_b:
            raise RuntimeError("local slots are not where the table says")
        if caller_view.stacktop < n:
            raise RuntimeError("the caller's stack pointer was not saved")
        stack = read_pointers(caller_addr, n, caller_view.stacktop)
        if not stack or stack[0] is not slots[2]:
            raise RuntimeError("the value stack is not where the table says")
        if true_previous(callee_frame, callee_view) != caller_addr:
            raise RuntimeError(
                "the callee's original `previous` pointer is not where the table says"
            )
    finally:
        g.throw(greenlet.GreenletExit)

    def gen() -> Generator[int, None, None]:
        try:
            raise KeyError("probe")
        except KeyError as exc:
            seen["exc"] = exc
            yield 1

    it = gen()
    next(it)
    if generator_handled_exception(it) is not seen["exc"]:
        raise RuntimeError("a generator's handled exception is not where the table says")
    it.close()


def verify_layout() -> None:
    """ImportError naming the version when the table does not match this interpreter."""
    try:
        _self_check()
    except (RuntimeError, ValueError) as exc:
        raise ImportError(
            f"snapstate's CPython {_VERSION[0]}.{_VERSION[1]} frame layout table does not "
            f"match this interpreter ({sys.version.split()[0]}): {exc}"
        ) from None


verify_layout()
