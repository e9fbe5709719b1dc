"""The pickler that turns a frozen job into bytes.

A cloudpickle Pickler that dumps the whole job in one pass, so objects shared between
frames (self, cells, lists, module globals) keep their identity, and that
  - keeps cells as cells (created empty, filled afterwards: recursive closures work);
  - references code by identity (module, qualname, first line, digest), never by
    value, and rebuilds nested functions and closures with their module's real
    globals and the same cells;
  - rebuilds suspended generators held as values, paused at the same yield (the
    runtime's reducers, registered in the table of serializers/_dispatch.py);
  - keeps an exception's cause, context, notes and traceback;
  - saves objects of imported non-agent modules (sentinels such as argparse.SUPPRESS,
    singletons such as logging.root) by reference, so identity checks hold (_refs);
  - saves open files, sqlite3 connections, HTTP clients and temp directories through
    the resource adapters (snapstate.resources, registered in _dispatch's table), and
    refuses live handles by name;
  - falls back to dill only for an object type cloudpickle refuses (dill is ~30x
    slower, so it is never on the common path), and never for live handles.
"""

from __future__ import annotations

import collections
import copyreg
import io
import pickle
import sys
import types
import warnings
from collections.abc import Callable, Coroutine, Generator, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import cloudpickle
import dill

from .._abi import UnpinnedGlobal, check_global, pinned
from .._errors import IncompatibleSnapshot
from . import _dispatch, _envsecrets, _refs
from ._buffer import BufferReader
from ._codeid import CodeRef, code_ref, find_code
from ._deframe import deframe
from ._describe import explain
from ._tracebacks import Entry, rebuild_traceback, save_traceback

if TYPE_CHECKING:
    from ._reduced import Reduced

    class _CloudPickler(pickle.Pickler):
        """cloudpickle.Pickler, which ships no types: a pickle.Pickler (whose
        reducer_override saves functions and classes by value) with the protocol it
        writes."""

        proto: int

else:
    _CloudPickler = cloudpickle.Pickler

__all__ = ["dumps", "loads", "find_unpicklable"]

_DILL_TYPES: set[type] = set()


@pinned("make_cell")
def _make_cell() -> types.CellType:
    return types.CellType()


@pinned("fill_cell")
def _fill_cell(cell: types.CellType, state: tuple[bool, object]) -> None:
    present, value = state
    if present:
        cell.cell_contents = value


@pinned("rebuild_function")
def _rebuild_function(
    ref: CodeRef, name: str, qualname: str, closure: tuple[types.CellType, ...] | None
) -> types.FunctionType:
    fn = types.FunctionType(find_code(ref), sys.modules[ref.module].__dict__, name, None, closure)
    fn.__qualname__ = qualname
    return fn


# (__defaults__, __kwdefaults__, __dict__, __doc__, __module__)
_FunctionState = tuple[
    tuple[Any, ...] | None, dict[str, Any] | None, dict[str, Any], str | None, str
]


@pinned("set_function_state")
def _set_function_state(fn: types.FunctionType, state: _FunctionState) -> None:
    fn.__defaults__, fn.__kwdefaults__, attrs, fn.__doc__, fn.__module__ = state
    fn.__dict__.update(attrs)


@pinned("exhausted_generator")
def _exhausted_generator() -> Generator[object, None, None]:
    empty: tuple[object, ...] = ()
    gen = (x for x in empty)
    for _ in gen:
        pass
    return gen


@pinned("finished_coroutine")
def _finished_coroutine() -> Coroutine[Any, Any, None]:
    async def finished() -> None:
        return None

    coro = finished()
    coro.close()
    return coro


# (__dict__, __cause__, __context__, __suppress_context__, saved traceback)
_ExceptionState = tuple[
    dict[str, Any],
    BaseException | None,
    BaseException | None,
    bool,
    list[Entry] | types.TracebackType | None,
]


@pinned("set_exception_state")
def _set_exception_state(exc: BaseException, state: _ExceptionState) -> None:
    attrs, cause, context, suppress, traceback = state
    exc.__dict__.update(attrs)
    exc.__cause__, exc.__context__, exc.__suppress_context__ = cause, context, suppress
    if isinstance(traceback, list):  # saved as its entries (files before async jobs)
        exc.__traceback__ = rebuild_traceback(traceback) if traceback else None
    elif isinstance(traceback, types.TracebackType):  # one object with any other reference
        exc.__traceback__ = traceback


@pinned("rebuild_traceback")
def _traceback(entries: list[Entry]) -> types.TracebackType | None:
    """A traceback held as a value (e.g. __aexit__'s `tb`, or an exception's)."""
    return rebuild_traceback(entries)


@pinned("from_dill")
def _from_dill(data: bytes) -> object:
    return dill.loads(data)


@pinned("bare_new")
def bare_new(cls: type) -> object:
    """An instance made without calling cls.__new__ (which needs arguments the default
    reduction does not save), by the __new__ of its nearest built-in base (object, dict,
    list, set): its whole state (and items) is set afterwards."""
    base = next(c for c in cls.__mro__ if not c.__flags__ & _HEAPTYPE)
    new: Any = base.__new__  # the built-in's own: takes the class alone
    made: object = new(cls)
    return made


@pinned("apply_default_state")
def apply_default_state(obj: object, state: object) -> None:
    """pickle's default BUILD without looking anything up on obj first: a class whose
    __getattr__ reads an attribute that is not set yet (a proxy delegating to
    self.client) would recurse without end in pickle's own lookup of __setstate__."""
    slots: Any = None  # pickle's (dict state, slots dict) pair, or the dict state alone
    attrs: Any = state
    if isinstance(state, tuple) and len(state) == 2:
        attrs, slots = state
    if attrs:
        object.__getattribute__(obj, "__dict__").update(attrs)
    if slots:
        for name, value in slots.items():
            setattr(obj, name, value)


_HEAPTYPE = 1 << 9


def _needs_args(t: type) -> bool:
    """Whether t.__new__ is a Python function that takes arguments the default reduction
    never passes (jinja2's Template.__new__(cls, source)), and t's nearest built-in base
    (object, dict, list, set) can make an instance without them (bare_new)."""
    new = next((c.__dict__["__new__"] for c in t.__mro__ if "__new__" in c.__dict__), None)
    func = getattr(new, "__func__", new)
    if not isinstance(func, types.FunctionType):
        return False
    code = func.__code__
    required = code.co_argcount - len(func.__defaults__ or ())
    if required <= 1 and not (code.co_kwonlyargcount - len(func.__kwdefaults__ or {})):
        return False
    # The nearest built-in base makes the instance: one whose __new__ takes no state.
    base = next(c for c in t.__mro__ if not c.__flags__ & _HEAPTYPE)
    return base in (object, dict, list, set)


def _special_kind(t: type) -> int:
    """0: pickle's default way is exact; 1: it needs the state set without lookups (a
    __getattr__ of the class's own); 2: its __new__ needs arguments the default way never
    saves (refused: an adapter that knows the class, such as jinja2's Template, makes it
    with bare_new)."""
    try:
        if (
            issubclass(t, type)
            or t in copyreg.dispatch_table  # taught to pickle by copyreg.pickle()
            or t.__reduce_ex__ is not object.__reduce_ex__
            or t.__reduce__ is not object.__reduce__
            or getattr(t, "__setstate__", None) is not None
            or getattr(t, "__getnewargs_ex__", None) is not None
            or getattr(t, "__getnewargs__", None) is not None
        ):
            return 0
        if _needs_args(t):
            return 2
        return 1 if getattr(t, "__getattr__", None) is not None else 0
    except Exception:  # a class whose attributes cannot even be looked up
        return 0


_SPECIAL: dict[type, int] = {}


class _Unpinned(pickle.PicklingError):
    """snapstate's internal code saved by a path that is not pinned (snapstate/_abi.py)."""


def _check_pinned(obj: object) -> None:
    """Refuse to save a snapstate function or class by reference under any name but a
    public (snapstate.*) or pinned (snapstate._abi.*) one: a file must not depend on
    where snapstate's internals live. Digest-only pickles are never loaded: not checked."""
    module = getattr(obj, "__module__", None)
    if _DIGESTING or type(module) is not str or not module.startswith("snapstate"):
        return
    try:
        name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", "?")
        check_global(module, str(name), saving=True)
    except UnpinnedGlobal as exc:
        raise _Unpinned(str(exc)) from None


class FreezePickler(_CloudPickler):
    # NotImplemented: pickle's own way. [override]: a reduction may have a sixth item, the
    # state setter (pickle takes it, typeshed's type omits it). obj: any object saved.
    def reducer_override(self, obj: Any) -> Reduced | types.NotImplementedType:  # type: ignore[override]
        where = _refs.INDEX.get(id(obj))  # a non-agent module's object: by reference
        if where is not None and (reduced := _refs.reduce(obj, where)) is not None:
            return reduced
        t = type(obj)
        if t in _dispatch.ORDINARY:  # seen before: nothing of ours to do
            return NotImplemented  # type: ignore[no-any-return]  # mypy types it Any (mypy#363)
        if t is types.CellType:
            try:
                state = (True, obj.cell_contents)
            except ValueError:
                state = (False, None)
            return (_make_cell, (), state, None, None, _fill_cell)
        if t is types.FunctionType:
            return self._reduce_function(obj)
        registered = _dispatch.REDUCERS.get(t)  # the runtime's: generators, coroutines
        if registered is not None:
            return registered(obj)
        adapter = _dispatch.adapter_for(t)
        if adapter is not None:
            return adapter(obj)
        if t is types.TracebackType:
            return (_traceback, (save_traceback(obj),))
        if t in _DILL_TYPES:
            return (_from_dill, (dill.dumps(obj, protocol=5),))
        if isinstance(obj, BaseException):
            reduced = obj.__reduce__()
            if isinstance(reduced, str):
                return reduced  # a global name (the exception is a module's singleton)
            traceback = obj.__traceback__  # saved once, however often referenced
            return (
                reduced[0],
                reduced[1],
                (
                    dict(obj.__dict__),
                    obj.__cause__,
                    obj.__context__,
                    obj.__suppress_context__,
                    traceback,
                ),
                None,
                None,
                _set_exception_state,
            )
        if issubclass(t, type):
            reduced = super().reducer_override(obj)
            if reduced is NotImplemented:  # saved by reference
                _check_pinned(obj)
            return reduced
        special = _SPECIAL.get(t)
        if special is None:
            special = _SPECIAL[t] = _special_kind(t)
        if special == 2:
            raise pickle.PicklingError(
                f"{t.__module__}.{t.__qualname__}.__new__ takes arguments that pickle's "
                "default way never saves: rebuilding the object would fail, or would skip "
                "__new__ and whatever it does (an instance cache, a registry). Give the "
                "class a __getnewargs__ that returns those arguments, or teach snapstate: "
                f"snapstate.register_adapter({t.__qualname__}, lambda obj: (rebuild, (...)))"
            )
        if special:
            rv = obj.__reduce_ex__(self.proto)
            if (
                isinstance(rv, tuple)
                and rv[0] is copyreg.__newobj__  # type: ignore[attr-defined]  # not in typeshed
                and rv[1] == (t,)
            ):
                full = tuple(rv) + (None,) * (5 - len(rv))
                make = copyreg.__newobj__  # type: ignore[attr-defined]  # not in typeshed
                return (make, (t,), full[2], full[3], full[4], apply_default_state)
        else:
            _dispatch.ORDINARY.add(t)
        return NotImplemented  # type: ignore[no-any-return]  # mypy types it Any (mypy#363)

    def _reduce_function(self, fn: types.FunctionType) -> Reduced:
        if _dispatch.is_stub(fn.__code__):
            raise pickle.PicklingError(f"function {fn.__qualname__} is a restore stub")
        module = fn.__globals__.get("__name__")
        if (
            not isinstance(module, str)
            or module == "__main__"
            or module not in sys.modules
            or sys.modules[module].__dict__ is not fn.__globals__
            or _refs.importable(fn)
        ):
            reduced = super().reducer_override(fn)
            if reduced is NotImplemented:  # saved by reference
                _check_pinned(fn)
            return reduced
        ref = code_ref(fn.__code__, module)
        try:
            find_code(ref)
        except Exception:
            return super().reducer_override(fn)
        return (
            _rebuild_function,
            (ref, fn.__name__, fn.__qualname__, fn.__closure__),
            (fn.__defaults__, fn.__kwdefaults__, dict(fn.__dict__), fn.__doc__, fn.__module__),
            None,
            None,
            _set_function_state,
        )


class Rooted:
    """The object a deep dump writes (serializers/_deep.py): `value` is the real root."""

    __slots__ = ("value",)

    def __init__(self, value: object):
        self.value = value


def _dump(obj: object, pickler_class: type[FreezePickler] | None = None) -> bytes:
    buf = io.BytesIO()
    pickler = (pickler_class or FreezePickler)(buf, protocol=5)
    if _DIGESTING:
        # The same references, without the process-dependent preamble, and no memo (fast
        # mode) where the graph allows it: memo hits depend on which equal strings happen
        # to be one object in this process, and a digest must not.
        _refs.refresh()
        pickler.fast = True
        try:
            pickler.dump(obj)
            return buf.getvalue()
        except (ValueError, RecursionError, pickle.PicklingError):  # a cycle: memo needed
            buf = io.BytesIO()
            pickler = (pickler_class or FreezePickler)(buf, protocol=5)
    else:
        _refs.prepare(pickler, buf)  # module sentinel strings: memo seeded, preamble first
    preamble = buf.tell()
    for start, _, _ in _dispatch.DUMP_HOOKS:
        start()
    try:
        pickler.dump(obj)
    except BaseException:
        for _, finish, _ in _dispatch.DUMP_HOOKS:
            finish(None, obj)  # the dump failed: nothing to check
        raise
    for _, finish, _ in _dispatch.DUMP_HOOKS:
        # While the culprit of a failed dump is searched for, each part is dumped alone:
        # what holds a weak reference's referent may be another part (not checked then).
        memo = None if _SEARCHING[0] else pickler.memo.copy
        finish(memo, obj.value if isinstance(obj, Rooted) else obj)
    # Without FRAME opcodes: state that did not change keeps its bytes (serializers/_deframe.py).
    return deframe(buf.getbuffer(), preamble)


def _dump_any(obj: object) -> bytes:
    """_dump; for a graph too deep for it (a long linked list), the deep dump."""
    from . import _deep

    try:
        return _deep.bounded(_dump, obj)
    except pickle.PicklingError as exc:
        if not _deep.too_deep(exc):
            raise
        return _deep.dump_deep(_dump, obj)


def _too_deep(error: object) -> bool:
    from . import _deep

    return isinstance(error, BaseException) and _deep.too_deep(error)


# Any error while saving an object is a refusal of that object, named in the user's words:
# a library's own __reduce__ may raise anything (wrapt's NotImplementedError), and that
# must never end the job with a foreign traceback.
_PICKLE_ERRORS = (Exception,)


_DIGESTING = False


_Roots = Callable[[], Iterable[tuple[str, object]]]


def dumps(obj: object, *, roots: _Roots | None = None, digest: bool = False) -> bytes:
    """Pickle `obj` in one pass. On failure, find the first object cloudpickle refuses;
    if it is no live handle and dill can pickle it, use dill for that type and retry;
    otherwise raise UnpicklableError naming the path to it (taken from `roots`, a
    function returning (path, object) pairs that say where obj's parts come from;
    called only on failure).

    digest=True: bytes for a digest only (never unpickled), the same in every process:
    no sentinel-string preamble, whose entries depend on what the process imported."""
    global _DIGESTING
    if digest:
        before, _DIGESTING = _DIGESTING, True
        try:
            return _dumps(obj, roots)
        finally:
            _DIGESTING = before
    try:
        return _envsecrets.scrub(_dumps(obj, roots))
    except _envsecrets.SecretInState as exc:
        where = _holding(roots() if roots else [("value", obj)], exc.value)
        raise UnpicklableError(
            "value", None, _envsecrets.SecretInState(exc.name, exc.value, where)
        ) from None


def _holding(roots: Iterable[tuple[str, object]], secret: str, limit: int = 200_000) -> str | None:
    """The path to a string, byte string or bytearray holding `secret` (breadth first,
    each object once, at most `limit` objects), for the refusal; None if not found."""
    data = secret.encode("utf-8", "surrogatepass")
    queue = collections.deque(roots)
    seen: set[int] = set()
    while queue and len(seen) < limit:
        path, obj = queue.popleft()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, str):
            if secret and secret in obj:
                return path
            continue
        if isinstance(obj, (bytes, bytearray)):
            if data and data in obj:
                return path
            continue
        try:
            queue.extend((path + name, child) for name, child in _children(obj))
        except Exception:
            continue
    return None


def _dumps(obj: object, roots: _Roots | None) -> bytes:
    for _ in range(20):
        try:
            return _dump_any(obj)
        except _dispatch.DumpAgain:  # a hook learned how to save something: once more
            continue
        except _PICKLE_ERRORS as exc:
            chain: list[tuple[str, object]] = []
            path, culprit, error = find_unpicklable(
                roots() if roots else [("value", obj)], exc, chain=chain
            )
            if culprit is None:  # only the whole fails: a weak reference's referent
                chain = []
                path, culprit, error = find_unpicklable(
                    roots() if roots else [("value", obj)], exc, chain=chain, whole=True
                )
            if _too_deep(error):  # never worth the dill fallback
                from . import _deep

                raise UnpicklableError(path, culprit, _deep.message(), chain) from None
            if (
                culprit is None
                or isinstance(error, _Unpinned)  # never worth the dill fallback either
                or isinstance(culprit, _dispatch.HANDLE_TYPES)
                or type(culprit) in _DILL_TYPES
                or _dispatch.adapter_for(type(culprit)) is not None
            ):  # refused by its adapter
                raise UnpicklableError(path, culprit, error, chain) from None
            try:
                with warnings.catch_warnings():  # dill warns as it gives up: not the user's
                    warnings.simplefilter("ignore")
                    dill.loads(dill.dumps(culprit, protocol=5))
            except Exception:
                raise UnpicklableError(path, culprit, error, chain) from None
            _DILL_TYPES.add(type(culprit))
            _dispatch.ORDINARY.discard(type(culprit))
    raise UnpicklableError("value", obj, "too many object types needed the dill fallback")


class _Unpickler(pickle.Unpickler):
    """pickle's Unpickler, refusing a snapstate global that is not pinned: a file names
    only snapstate's public API and snapstate._abi (see _check_pinned)."""

    def find_class(self, module: str, name: str) -> Any:
        if module.startswith("snapstate"):
            try:
                check_global(module, name, saving=False)
            except UnpinnedGlobal as exc:
                raise IncompatibleSnapshot(str(exc)) from None
        return super().find_class(module, name)


def loads(data: bytes | bytearray) -> Any:  # the unpickled state
    try:
        return _Unpickler(BufferReader(data)).load()
    finally:
        for _, _, loaded in _dispatch.DUMP_HOOKS:
            loaded()


class UnpicklableError(Exception):
    """What cannot be saved, in the user's words (serializers._describe): the local or
    global holding it and what it is, the internal path, and `fix`, the advice that fits
    that kind of object (None: the message already says it)."""

    def __init__(
        self,
        path: str,
        culprit: object,
        error: BaseException | str | None,
        chain: Sequence[tuple[str, object]] = (),
    ):
        self.path, self.culprit, self.error = path, culprit, error
        message, self.fix = explain(list(chain), path, culprit, error)
        super().__init__(message)


def _children(obj: object) -> Iterator[tuple[str, object]]:
    if isinstance(obj, dict):
        for k, v in list(obj.items()):
            if not isinstance(k, (str, int, float, bool, type(None), bytes)):
                yield f"<key {_key(k)}>", k  # an object as a key may hold the culprit
            yield f"[{_key(k)}]", v
    elif isinstance(obj, (list, tuple, set, frozenset)):
        for i, v in enumerate(list(obj)):
            yield f"[{i}]", v
    elif isinstance(obj, types.CellType):
        try:
            yield ".cell_contents", obj.cell_contents
        except ValueError:
            pass
    elif isinstance(obj, types.MethodType):
        yield ".__self__", obj.__self__  # a bound method: what it is bound to
        yield ".__func__", obj.__func__
    elif isinstance(obj, types.FunctionType):
        for i, cell in enumerate(obj.__closure__ or ()):
            yield f".<closure {obj.__code__.co_freevars[i]}>", cell
        yield ".__defaults__", obj.__defaults__
    else:
        attrs = getattr(obj, "__dict__", None)
        if isinstance(attrs, dict):
            for k, v in list(attrs.items()):
                yield f".{k}", v
        for cls in type(obj).__mro__:
            for name in (
                getattr(cls, "__slots__", ())
                if isinstance(getattr(cls, "__slots__", ()), (tuple, list))
                else ()
            ):
                if hasattr(obj, name):
                    yield f".{name}", getattr(obj, name)


def _key(key: object) -> str:
    """A dict key as a path step: short values as written, anything else by its type (a
    repr may hold a memory address, or be long)."""
    if isinstance(key, (str, int, float, bool, type(None))):
        text = repr(key)
        return text if len(text) <= 40 else text[:37] + "..."
    if isinstance(key, tuple) and all(isinstance(k, (str, int, bool, type(None))) for k in key):
        return _key(str(key)) if len(repr(key)) > 40 else repr(key)
    return f"<{type(key).__qualname__}>"


def find_unpicklable(
    roots: Iterable[tuple[str, object]],
    first_error: BaseException | None = None,
    _depth: int = 0,
    chain: list[tuple[str, object]] | None = None,
    whole: bool = False,
) -> tuple[str, object, BaseException | None]:
    """(path, object, error) of the deepest object under `roots` that cannot be
    pickled, or (path, None, error) when no single culprit is found. `chain`, if
    given, receives the (path, object) pairs from the root down to the culprit. The
    search never walks back into an object already on its path (a reference cycle): an
    object that fails only through such a cycle is named only when nothing else is.
    Each part is dumped alone, without the check that a weak reference's referent is
    held by another part (it may be another root's); `whole`: with it."""
    searching, _SEARCHING[0] = _SEARCHING[0], not whole
    try:
        path, obj, error, _ = _search(roots, first_error, _depth, chain, frozenset(), set())
    finally:
        _SEARCHING[0] = searching
    return path, obj, error


_SEARCHING = [False]  # inside find_unpicklable


def _search(
    roots: Iterable[tuple[str, object]],
    first_error: BaseException | None,
    depth: int,
    chain: list[tuple[str, object]] | None,
    seen: frozenset[int],
    explored: set[int],
) -> tuple[str, object, BaseException | None, bool]:
    """find_unpicklable's walk; the last item says the culprit fails only through a
    reference cycle back to an object on the path (a weak answer: a sibling may hold
    the real culprit). `seen`: the objects on the path; `explored`: every object already
    tried anywhere, each dumped once (a graph of shared nodes is walked in linear
    time)."""
    fallback: tuple[str, object, BaseException | None, list[tuple[str, object]]] | None = None
    for path, obj in roots:
        if id(obj) in seen or id(obj) in explored:
            continue
        explored.add(id(obj))
        try:
            _dump_any(obj)
            continue
        except _PICKLE_ERRORS as exc:
            error = exc
        mark = len(chain) if chain is not None else 0
        if chain is not None:
            chain.append((path, obj))
        if _too_deep(error):
            return path, obj, error, False  # its parts are as deep: name the outermost
        adapter = _dispatch.adapter_for(type(obj))
        parts = getattr(adapter, "parts", None)  # what an adapter saves of obj, if it says
        if (
            isinstance(obj, _dispatch.HANDLE_TYPES)
            or depth > 40
            or (adapter is not None and parts is None)
        ):
            return path, obj, error, False  # refused by its own adapter: it is the culprit
        try:
            children = list(parts(obj) if parts else _children(obj))
        except Exception:  # an object whose attributes cannot even be read: the culprit
            return path, obj, error, False
        inner = seen | {id(obj)}
        found = _search(
            [(path + name, child) for name, child in children],
            error,
            depth + 1,
            chain,
            inner,
            explored,
        )
        if found[1] is not None and not found[3]:
            return found
        weak = found[1] is not None or any(id(child) in inner for _, child in children)
        if not weak:
            return path, obj, error, False
        if fallback is None:  # fails through a cycle: look at the siblings first
            best = found[:3] if found[1] is not None else (path, obj, error)
            fallback = (*best, chain[mark:] if chain is not None else [])
        if chain is not None:
            del chain[mark:]
    if fallback is not None:
        if chain is not None:
            chain.extend(fallback[3])
        return fallback[0], fallback[1], fallback[2], True
    return "value", None, first_error, False
