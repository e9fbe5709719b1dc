"""Deep object graphs: a second dump that keeps the pickler's nesting shallow.

The C pickler writes an object's state inside the save() call that created it, so a
linked list nests 2-3 C levels per link, and the C recursion limit stops it after a
few hundred links: on 3.11 the Python recursion limit (1000) counts those levels, on
3.12 a limit fixed at compile time (C_RECURSION_LIMIT, 1500), on 3.13 another
(Py_C_RECURSION_LIMIT, 10000 on Linux). When an ordinary dump fails that way,
dumps() dumps again with a DeepPickler (the common case never comes here):

- a plain object (made by `copyreg.__newobj__(cls)`, state applied by the default
  BUILD: no __reduce__, __setstate__, __hash__ or __getattr__ of its own; dataclasses
  and __slots__ classes are plain) and a cell are created and memoized where they are
  met, and their state is queued and written later in the same stream (memo GET,
  state, BUILD). A chain of such objects then nests one level whatever its length, and
  shared objects stay shared: one pickler, one memo, one pass.
- any other object may look at what it holds while it is rebuilt (its constructor
  call, its __setstate__, its hash as a dict key): the queue is drained into the stream
  before it is opened, after its constructor's arguments and again before its state,
  so everything it holds is complete by then, as in an ordinary dump, and no queued
  state meets it half-built (which would build it twice). Plain objects' deferred BUILDs are not
  observable otherwise: their hash is their identity and nothing of theirs runs.
- builtin containers still nest (lists and dicts two C levels each, tuples one): the
  C recursion budget is raised for the dump by what a quarter of the thread's stack
  holds (a few hundred bytes a level measured; 1 KiB counted), so 1,000-deep nesting
  fits every version and deeper nesting ends in a RecursionError, which dumps() reports
  with the path, never a crash. On 3.11 that budget is the recursion limit, which an
  agent may have raised far beyond what the stack holds: every dump runs with it
  bounded (`bounded`).
"""

from __future__ import annotations

import collections
import copyreg
import ctypes
import resource
import sys
import threading
import types
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from .._abi import pinned
from ._pickler import FreezePickler
from ._pickler import Rooted as _Root

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

    from ._reduced import Reduced

__all__ = ["dump_deep", "bounded", "too_deep", "message", "TOO_DEEP"]

TOO_DEEP = (
    "nested too deeply to save: lists, dicts, tuples or objects with their own "
    "__reduce__, __setstate__ or __hash__ (frozen dataclasses too) nested inside each "
    "other more than about {levels} deep (Python's C recursion limit); flatten the "
    "structure (e.g. keep the links in a list) before snapshot()"
)

# Objects whose reduction needs no flush: they hold nothing that is still being built.
_ATOMS = (type(None), bool, int, float, complex, str, bytes, type)


def too_deep(exc: BaseException) -> bool:
    """Whether a pickling error is the recursion limit (cloudpickle turns RecursionError
    into a PicklingError)."""
    return isinstance(exc, RecursionError) or isinstance(exc.__cause__, RecursionError)


def _inert(value: object, depth: int = 0) -> bool:
    """Whether `value` holds nothing that can still be waiting for its state: atoms,
    classes, and small tuples and dicts of those."""
    if isinstance(value, _ATOMS):
        return True
    if depth > 2:
        return False
    if type(value) is tuple and len(value) <= 16:
        return all(_inert(v, depth + 1) for v in value)
    if type(value) is dict and len(value) <= 16:
        return all(_inert(k, depth + 1) and _inert(v, depth + 1) for k, v in value.items())
    return False


def _is_plain(t: type) -> bool:
    try:
        return (
            not issubclass(t, type)
            and t not in copyreg.dispatch_table
            and t.__reduce_ex__ is object.__reduce_ex__
            and t.__reduce__ is object.__reduce__
            and getattr(t, "__setstate__", None) is None
            and (t.__hash__ is object.__hash__ or t.__hash__ is None)
            and t.__getattribute__ is object.__getattribute__
            and getattr(t, "__getattr__", None) is None
        )
    except Exception:  # a class whose attributes cannot even be looked up
        return False


@pinned("deep_first")
def _first(value: object, _flushed: object) -> object:
    """Loads as `value`, once everything queued before it has been applied."""
    return value


@pinned("deep_call_flushed")
def _call_flushed(func: Callable[..., object], args: tuple[Any, ...], _flushed: object) -> object:
    return func(*args)


@pinned("deep_applied")
def _applied(obj: object) -> object:
    return obj


class _Flush:
    """A point in the stream where every queued state is written."""

    __slots__ = ()


class _Later:
    """An object's state, written after a flush."""

    __slots__ = ("state",)

    def __init__(self, state: object):
        self.state = state


class _Apply:
    """One queued state: loads as its object with the state applied."""

    __slots__ = ("reduction",)
    reduction: Reduced

    def __init__(self, obj: object, state: object, setter: Callable[[Any, Any], object] | None):
        self.reduction = (_applied, (obj,), state, None, None, setter)


class DeepPickler(FreezePickler):
    def __init__(self, file: SupportsWrite[bytes], protocol: int = 5):
        super().__init__(file, protocol=protocol)
        self._queue: collections.deque[_Apply] = collections.deque()
        # type -> (plain?, dispatch_table reducer)
        self._kinds: dict[type, tuple[bool, Callable[[Any], Reduced] | None]] = {}
        self._opened: dict[int, object] = {}  # objects flushed before (kept alive)

    def reducer_override(self, obj: Any) -> Reduced | types.NotImplementedType:  # type: ignore[override]  # see FreezePickler
        t = type(obj)
        if t is _Apply:
            queued: _Apply = obj
            return queued.reduction
        if t is _Flush:
            # Loads as a throwaway list; its items apply the queued states. The C pickler
            # fetches the next item before saving the current one at the start of a batch,
            # hence the None barrier before stopping (see _drain).
            return (list, (), None, self._drain())
        if t is _Later:
            return (_first, (obj.state, _Flush()))
        if t is _Root:
            return (_first, (obj.value, _Flush()))
        rv = super().reducer_override(obj)
        if t is types.CellType:
            assert not isinstance(rv, str) and len(rv) == 6  # FreezePickler's for a cell
            self._queue.append(_Apply(obj, rv[2], rv[5]))
            return (rv[0], rv[1])
        if rv is NotImplemented:
            if issubclass(t, type) or t is types.FunctionType:
                return NotImplemented  # type: ignore[no-any-return]  # saved by reference: holds nothing (mypy#363)
            kind = self._kinds.get(t)
            if kind is None:
                reduce: Callable[[Any], Reduced] | None = self.dispatch_table.get(t)
                kind = self._kinds[t] = (reduce is None and _is_plain(t), reduce)
            plain, reduce = kind
            rv = reduce(obj) if reduce is not None else obj.__reduce_ex__(self.proto)
            if not isinstance(rv, tuple):
                return NotImplemented  # type: ignore[no-any-return]  # a global name: saved by reference (mypy#363)
            if (
                plain
                and rv[0] is copyreg.__newobj__  # type: ignore[attr-defined]  # not in typeshed
                and len(rv[1]) == 1
                and rv[1][0] is t
                and len(rv) <= 5
            ):
                full = tuple(rv) + (None,) * (5 - len(rv))
                if full[2] is not None:
                    self._queue.append(_Apply(obj, full[2], None))
                return (full[0], full[1], None, full[3], full[4])
        if issubclass(t, type):
            # A class saved by value: rebuilding it looks at nothing of its instances, and
            # it may be saved between a plain object's creation and its memoization (as
            # the class of NEWOBJ), where a flush would meet that object unmemoized.
            return rv
        if self._queue and id(obj) not in self._opened:
            # Apply what is queued before this object is opened: a queued state that
            # refers to it would otherwise meet it half-saved (not memoized until its
            # constructor call) and build it a second time. Loads as the object itself:
            # saved again inside, for real this time (already in _opened).
            self._opened[id(obj)] = obj
            return (_first, (_Flush(), obj))
        func, args, state, items, pairs, setter = tuple(rv) + (None,) * (6 - len(rv))
        if not _inert(args):
            func, args = _call_flushed, (func, args, _Flush())
        if state is not None and not _inert(state):
            state = _Later(state)
        return (func, args, state, items, pairs, setter)

    def _drain(self) -> Iterator[_Apply | None]:
        queue = self._queue
        barrier = False
        while queue or not barrier:
            if queue:
                barrier = False
                yield queue.popleft()
            else:
                barrier = True  # all but this item saved by the next fetch
                yield None


def _stack_levels() -> int:
    """Extra C recursion levels a quarter of this thread's stack holds: the main
    thread's stack limit, or the size threads are created with (glibc's default for
    threads is the same stack limit)."""
    size = threading.stack_size()
    if threading.current_thread() is threading.main_thread() or not size:
        soft = resource.getrlimit(resource.RLIMIT_STACK)[0]
        size = soft if soft > 0 else 8 << 20
    return max(0, min(size, 256 << 20) // 4 // 1024)


# 3.12 PyThreadState (Include/cpython/pystate.h): prev, next, interp, _status (4 bytes),
# then int py_recursion_remaining, py_recursion_limit, c_recursion_remaining.
_TSTATE_PY_LIMIT, _TSTATE_C_REMAINING = 32, 36
_C_RECURSION_LIMIT = 1500
# A prototype of our own: setting restype on ctypes.pythonapi's would change it for all.
_THREAD_STATE_GET = ctypes.PYFUNCTYPE(ctypes.c_void_p)(("PyThreadState_Get", ctypes.pythonapi))


def _c_budget() -> ctypes.c_int | None:
    """The current thread's c_recursion_remaining as a ctypes int (3.12), or None when
    the thread state does not look as expected (then nothing is raised)."""
    if sys.version_info[:2] != (3, 12):
        return None
    else:
        base = _THREAD_STATE_GET()
        if not base:  # (never NULL: CPython aborts first)
            return None
        limit = ctypes.c_int.from_address(base + _TSTATE_PY_LIMIT)
        remaining = ctypes.c_int.from_address(base + _TSTATE_C_REMAINING)
        if limit.value != sys.getrecursionlimit() or not 0 < remaining.value <= _C_RECURSION_LIMIT:
            return None
        return remaining


def dump_deep(dump: Callable[[object, type[FreezePickler]], bytes], obj: object) -> bytes:
    """`dump(obj, pickler_class)` with a DeepPickler and the C recursion budget raised
    by what a quarter of the stack holds: through the recursion limit on 3.11, the
    thread state's C counter on 3.12 (a compile-time constant there). 3.13's C limit
    (10,000) is already sized for the stack."""
    if sys.version_info >= (3, 13):
        return dump(_Root(obj), DeepPickler)
    elif sys.version_info >= (3, 12):
        budget = _c_budget()
        if budget is None:
            return dump(_Root(obj), DeepPickler)
        before = budget.value
        budget.value = before + _stack_levels()
        try:
            return dump(_Root(obj), DeepPickler)
        finally:
            budget.value = before  # every C level entered has been left again
    else:
        return _with_limit(_safe_limit(), dump, _Root(obj), DeepPickler)


def _safe_limit() -> int:
    """3.11: a recursion limit the C stack holds while pickling (the C pickler counts
    against it): the default 1000 for Python frames, plus the stack's levels."""
    return 1000 + _stack_levels()


def _with_limit(limit: int, dump: Callable[..., bytes], *args: object) -> bytes:
    before = sys.getrecursionlimit()
    try:
        sys.setrecursionlimit(limit)
    except RecursionError:  # already deeper than that: leave it
        return dump(*args)
    try:
        return dump(*args)
    finally:
        sys.setrecursionlimit(before)


def bounded(dump: Callable[[object], bytes], obj: object) -> bytes:
    """`dump(obj)`; on 3.11, with a recursion limit the agent raised (for its own deep
    recursion) lowered for the dump to what the C stack holds: past that, the C pickler
    would overflow the stack (a crash) instead of raising RecursionError."""
    if sys.version_info >= (3, 12):
        return dump(obj)
    else:
        if sys.getrecursionlimit() <= 1000:
            return dump(obj)  # _safe_limit() is never below 1000
        safe = _safe_limit()
        if sys.getrecursionlimit() <= safe:
            return dump(obj)
        return _with_limit(safe, dump, obj)


def levels() -> int:
    """About how deep nested lists or dicts a deep dump can save here (two C levels
    each), for messages."""
    if sys.version_info >= (3, 13):
        return 10000 // 2
    elif sys.version_info >= (3, 12):
        return (_C_RECURSION_LIMIT + (_stack_levels() if _c_budget() is not None else 0)) // 2
    else:
        return _safe_limit() // 2


def message() -> str:
    return TOO_DEEP.format(levels=f"{levels() // 100 * 100:,}")
