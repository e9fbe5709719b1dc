"""Adapters for the interpreter's own machinery that libraries keep inside their objects:
context variables, weak references, thread-locals and idle event loops (registered on
import; resources._adapters imports this). Each comes back exactly or is refused.

    contextvars.ContextVar     a module's variable is saved by reference (serializers._refs
                               finds it first), a library class's attribute by its class
                               (looked for only when the variable would otherwise be
                               refused: the dump is then made again); any other one is
                               created again with its name and default, one object for
                               every reference to it (the pickle memo), so a library's
                               instance-level variable (pydantic-ai's
                               Agent._override_name) keeps its identity, provided the
                               job's objects hold it (the weak-referent rule below): one a
                               library hides (a private dict) is refused.
    contextvars.Context        its (variable, value) pairs: a new context holding the same
                               values for the same (restored) variables; decimal's own
                               variable (kept in C) through decimal.setcontext. The job
                               keeps its contexts this way: a sync job's agent greenlet's,
                               each greenlet task's and each async task's (runtime/_job.py,
                               runtime/_tasks.py, runtime/_async.py).
    weakref.ref, WeakMethod    the referent is saved in the same pass and the reference
                               rebuilt to it; a dead reference comes back dead. The referent
                               must be held strongly by something else the snapshot saves
                               (a module's object counts: it is saved by reference), else
                               the restored referent would have nothing holding it and die:
                               checked after the dump (`check_referents`), refused by name.
    weakref.finalize           a live one: a new finalizer of the same (restored) object,
                               function, arguments and atexit flag (the object must be held
                               strongly, as above); a called or detached one stays dead.
    weakref.proxy              refused: its referent cannot be read from it.
    WeakValueDictionary,       their live entries, rebuilt as the same class (subclasses'
    WeakKeyDictionary, WeakSet own attributes kept), with the same referent rule.
    threading.local            the attributes the job's thread sees (other threads' values
                               are not the job's), on a new local of the same class.
    asyncio event loop         one not running, not closed, with nothing scheduled (no ready
                               callback, timer, reader, writer or executor work): a new loop
                               of the same class (a provider's private loop), with its
                               exception handler, task factory and slow-callback threshold.
                               A closed loop comes back closed. Anything else is refused:
                               its work cannot continue in another process.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import decimal
import gc
import importlib
import pickle
import threading
import types
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from .._abi import pinned
from ..serializers import _dispatch, _refs
from ..serializers._describe import register_kind
from ._adapters import Reduced, register_adapter
from ._stdlib import _busy

__all__: list[str] = []

_MISSING = object()
_T = TypeVar("_T")


# ------------------------------------------------------------------------ context variables
def _default_of(var: contextvars.ContextVar[Any]) -> object:
    """var's default (its value in an empty context), or _MISSING."""
    try:
        return contextvars.Context().run(var.get)
    except LookupError:
        return _MISSING


def _reduce_contextvar(var: contextvars.ContextVar[Any]) -> Reduced:
    home = _class_home(var)
    if home is not None:  # a library class's attribute: that class's variable
        return (_class_attribute, home)
    # Created again: it must be one only the job's objects hold (an agent's, or a
    # library object's saved with the job), else the library's own reference to it would
    # read another variable than the restored values are set on (checked after the dump).
    _weakly(
        var,
        f"a contextvars.ContextVar {var.name!r} that a library keeps where a snapshot "
        "cannot find it again (not a module or class attribute; e.g. in C code or a "
        "library's own dict), so the values set for it",
    )
    default = _default_of(var)
    if default is _MISSING:
        return (_new_contextvar, (var.name,))
    return (_new_contextvar, (var.name, True, default))


# id(var) -> (var, (module, class qualname, attribute)): ContextVars found to be a library
# class's attribute. Looked for only when a variable would otherwise be refused (the
# search walks the heap twice): check_referents finds it, and the dump is made again.
_CLASS_VARS: dict[int, tuple[contextvars.ContextVar[Any], tuple[str, str, str]]] = {}


def _class_home(var: contextvars.ContextVar[Any]) -> tuple[str, str, str] | None:
    """(module, class qualname, attribute) when var is known to be a class attribute of
    an importable class outside the agent's modules, else None."""
    found = _CLASS_VARS.get(id(var))
    if found is None or found[0] is not var:
        return None
    return None if found[1][0] in _refs.agent_module_names() else found[1]


def _find_class_home(var: contextvars.ContextVar[Any]) -> bool:
    """Look for var among the attributes of the classes holding it (through the garbage
    collector); remember and say whether it is one."""
    for namespace in gc.get_referrers(var):
        if type(namespace) is not dict:
            continue
        for cls in gc.get_referrers(namespace):
            if not isinstance(cls, type) or vars(cls) != namespace:
                continue
            attr = next((k for k, v in namespace.items() if v is var), None)
            if attr is not None and _refs.importable(cls):
                _CLASS_VARS[id(var)] = (var, (cls.__module__, cls.__qualname__, attr))
                return _class_home(var) is not None
    return False


@pinned("class_attribute")
def _class_attribute(module: str, qualname: str, attr: str) -> object:
    obj: object = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return getattr(obj, attr)


@pinned("new_contextvar")
def _new_contextvar(
    name: str, has_default: bool = False, default: object = None
) -> contextvars.ContextVar[Any]:
    if has_default:
        return contextvars.ContextVar(name, default=default)
    return contextvars.ContextVar(name)


def _reduce_context(ctx: contextvars.Context) -> Reduced:
    items: list[tuple[object, object]] = []
    for var, value in ctx.items():
        if var.name == "decimal_context" and isinstance(value, decimal.Context):
            # decimal keeps its variable in C: its context is set the way decimal sets it
            items.append((_DECIMAL, value))
        else:
            items.append(_own((var, value)))  # holds the variable for the reduction only
    return (_new_context, (_own(items),))


class _Decimal:
    """The marker of decimal's own context variable (decimal.setcontext sets it)."""

    def __reduce__(self) -> str:
        return "DECIMAL_CONTEXT"


_DECIMAL = pinned("DECIMAL_CONTEXT")(_Decimal())


@pinned("new_context")
def _new_context(items: list[tuple[Any, object]]) -> contextvars.Context:
    ctx = contextvars.Context()
    for var, value in items:
        if var is _DECIMAL:
            ctx.run(decimal.setcontext, value)  # type: ignore[arg-type]
        else:
            ctx.run(var.set, value)
    return ctx


_reduce_context.parts = lambda ctx: [  # type: ignore[attr-defined]  # read by the pickler
    (f"[{var.name!r}]", value) for var, value in ctx.items()
]
register_adapter(contextvars.ContextVar, _reduce_contextvar)
register_adapter(contextvars.Context, _reduce_context)


# ------------------------------------------------------------------------ weak references
# Saved by name (or by value with their module's globals): never held only weakly.
_BY_NAME = (type, types.FunctionType, types.BuiltinFunctionType, types.ModuleType)


# Per dump being written (a stack: an adapter may pickle something while the outer dump
# runs): the referents reached only through weak references, id -> (referent, where it
# was met); the ids of the tuples and lists the reductions below made to hold them (no
# strong holders); the ids of objects a reduction holds strongly itself (a
# WeakKeyDictionary's values, a WeakValueDictionary's keys). check_referents() runs
# after the dump.
class _Dump:
    __slots__ = ("weak", "own", "strong")

    def __init__(self) -> None:
        self.weak: dict[int, tuple[object, str]] = {}
        self.own: set[int] = set()
        self.strong: set[int] = set()


_DUMPS: list[_Dump] = [_Dump()]


def _weakly(obj: object, what: str) -> object:
    _DUMPS[-1].weak.setdefault(id(obj), (obj, what))
    return obj


def _own(made: _T) -> _T:
    """A tuple or list a reduction made to hold referents: not a strong holder."""
    _DUMPS[-1].own.add(id(made))
    return made


def _strongly(obj: _T) -> _T:
    """An object a weak container holds strongly (saved with it)."""
    _DUMPS[-1].strong.add(id(obj))
    return obj


def _reduce_ref(ref: weakref.ref[Any]) -> Reduced:
    if isinstance(ref, weakref.WeakMethod):
        method = ref()
        if method is None:
            return (_dead_ref, ())
        owner = _weakly(method.__self__, f"a weakref.WeakMethod to {method.__func__.__qualname__}")
        return (_new_weak_method, _own((owner, method.__func__)))
    if type(ref) is not weakref.ref and not isinstance(ref, weakref.KeyedRef):
        # A subclass of the user's or a library's: its own data (attributes, slots) and
        # its callback would not come back on a plain weakref.
        raise pickle.PicklingError(
            f"a weak reference of type {type(ref).__qualname__} (a weakref.ref subclass: "
            "its methods, data or callback would not come back on a plain weakref) cannot "
            "be saved; keep a plain weakref.ref(obj) and what the subclass adds beside it"
        )
    if ref.__callback__ is not None and not isinstance(ref, weakref.KeyedRef):
        raise pickle.PicklingError(
            "a weak reference with a callback (weakref.ref(obj, callback)) cannot be saved: "
            "the callback is the code that runs when its referent dies"
        )
    target = ref()
    if target is None:
        return (_dead_ref, ())
    return (_new_ref, _own((_weakly(target, f"a weak reference to {_name(target)}"),)))


def _name(obj: object) -> str:
    t = type(obj)
    return f"{t.__module__}.{t.__qualname__}".removeprefix("builtins.")


@pinned("new_weakref")
def _new_ref(target: object) -> weakref.ref[Any]:
    _KEEP.append(target)
    return weakref.ref(target)


@pinned("new_weak_method")
def _new_weak_method(owner: object, func: Callable[..., Any]) -> weakref.WeakMethod[Any]:
    _KEEP.append(owner)
    return weakref.WeakMethod(func.__get__(owner))


class _Gone:
    """A referent that no longer exists: a dead weakref is made to one."""


@pinned("dead_weakref")
def _dead_ref() -> weakref.ref[Any]:
    ref = weakref.ref(_Gone())
    assert ref() is None  # CPython frees the object at once
    return ref


# Referents are kept alive while the snapshot loads: the objects that hold them strongly
# may be rebuilt after the reference. The runtime calls release_loaded() after the load.
_KEEP: list[object] = []


def release_loaded() -> None:
    _KEEP.clear()


_BASE_ATTRS: dict[type, frozenset[str]] = {
    cls: frozenset(vars(cls()).keys())
    for cls in (weakref.WeakValueDictionary, weakref.WeakKeyDictionary, weakref.WeakSet)
}


def _weak_container(obj: object, base: type, items: list[Any]) -> Reduced:
    """A weak container as it is saved: its class, the weakref class it is (or
    subclasses), its items (each side held as that class holds it) and a subclass's own
    attributes (not those the base class keeps for itself)."""
    attrs = {k: v for k, v in vars(obj).items() if k not in _BASE_ATTRS[base]}
    return (_new_weak_container, (type(obj), base, items, attrs))


def _reduce_weak_values(d: weakref.WeakValueDictionary[Any, Any]) -> Reduced:
    return _weak_container(
        d,
        weakref.WeakValueDictionary,
        _own(
            [
                _own((_strongly(k), _weakly(v, f"a value of a WeakValueDictionary (key {k!r})")))
                for k, v in d.items()
            ]
        ),
    )


def _reduce_weak_keys(d: weakref.WeakKeyDictionary[Any, Any]) -> Reduced:
    return _weak_container(
        d,
        weakref.WeakKeyDictionary,
        _own(
            [_own((_weakly(k, "a key of a WeakKeyDictionary"), _strongly(v))) for k, v in d.items()]
        ),
    )


def _reduce_weak_set(s: weakref.WeakSet[Any]) -> Reduced:
    return _weak_container(
        s, weakref.WeakSet, _own([_weakly(v, "an item of a WeakSet") for v in s])
    )


@pinned("new_weak_container")
def _new_weak_container(cls: type, base: type, items: list[Any], attrs: dict[str, Any]) -> Any:
    obj: Any = object.__new__(cls)  # weak containers are plain Python classes
    init: Any = vars(base)["__init__"]
    init(obj)
    _KEEP.append(items)
    if base is weakref.WeakSet:
        for item in items:
            obj.add(item)
    else:
        for key, value in items:
            obj[key] = value
    vars(obj).update(attrs)
    return obj


def _refuse_proxy(proxy: object) -> Reduced:
    raise pickle.PicklingError(
        "a weakref.proxy cannot be saved (its referent cannot be read from it, and saving "
        "what it forwards to would make a strong copy); keep weakref.ref(obj) instead and "
        "call it to reach the object"
    )


def _reduce_finalize(fin: weakref.finalize) -> Reduced:  # type: ignore[type-arg]  # generic in typeshed
    info = fin._registry.get(fin)  # type: ignore[attr-defined]  # private: _Info or None
    if info is None:  # called or detached: dead for good
        return (_dead_finalize, ())
    target = info.weakref()
    if target is None:  # pragma: no cover - the registry drops it as the referent dies
        return (_dead_finalize, ())
    owner = _weakly(target, f"the object of a weakref.finalize ({_name(target)})")
    return (
        _new_finalize,
        _own((owner, info.func, tuple(info.args), dict(info.kwargs or {}), bool(info.atexit))),
    )


@pinned("new_finalize")
def _new_finalize(
    target: object,
    func: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    atexit: bool,
) -> weakref.finalize:  # type: ignore[type-arg]
    _KEEP.append(target)
    fin = weakref.finalize(target, func, *args, **kwargs)
    fin.atexit = atexit
    return fin


@pinned("dead_finalize")
def _dead_finalize() -> weakref.finalize:  # type: ignore[type-arg]
    fin = weakref.finalize(_Gone(), print)  # its object dies at once: never called
    fin.detach()
    return fin


register_adapter(weakref.ref, _reduce_ref, subclasses=True)
register_adapter(weakref.ProxyType, _refuse_proxy)
register_adapter(weakref.CallableProxyType, _refuse_proxy)
register_adapter(weakref.finalize, _reduce_finalize, subclasses=True)
register_adapter(weakref.WeakValueDictionary, _reduce_weak_values, subclasses=True)
register_adapter(weakref.WeakKeyDictionary, _reduce_weak_keys, subclasses=True)
register_adapter(weakref.WeakSet, _reduce_weak_set, subclasses=True)


def _start_dump() -> None:
    _DUMPS.append(_Dump())


def check_referents(memo: Callable[[], dict[int, Any]] | None, root: object) -> None:
    """After a dump: every referent reached through a weak reference is also held
    strongly by an object the snapshot saved (a weak container's strong side counts; a
    context variable's Context does not), or is a module's object (saved by reference),
    or is the root object dumped. `memo()` returns the pickler's memo (id -> (index,
    object))."""
    dump = _DUMPS.pop() if len(_DUMPS) > 1 else _DUMPS[0]
    if dump is _DUMPS[0]:  # a dump that did not start through the hooks
        _DUMPS[0] = _Dump()
    if memo is None or not dump.weak:
        return
    unsure = {
        i: v
        for i, v in dump.weak.items()
        if _refs.indexed(v[0]) is None
        and v[0] is not root
        and not isinstance(v[0], _BY_NAME)
        and i not in dump.strong
    }
    if not unsure:
        return
    not_holders = (
        weakref.ref,
        weakref.WeakValueDictionary,
        weakref.WeakKeyDictionary,
        weakref.WeakSet,
        contextvars.Context,
    )
    # What every saved object refers to (the snapshot's objects, not the whole heap).
    remaining = set(unsure)
    for _, holder in memo().values():
        if id(holder) in dump.own or isinstance(holder, not_holders):
            continue
        for ref in gc.get_referents(holder):
            if id(ref) in remaining and ref is unsure[id(ref)][0]:
                remaining.discard(id(ref))
        if not remaining:
            return
    variables = [
        var for key in remaining if isinstance(var := unsure[key][0], contextvars.ContextVar)
    ]
    if [var for var in variables if _find_class_home(var)]:
        # library classes' variables: saved by reference the next time
        raise _dispatch.DumpAgain()
    for key in unsure:
        if key in remaining:
            obj, what = unsure[key]
            raise pickle.PicklingError(
                f"{what} points at an object nothing else in the snapshot holds: after a "
                "restore nothing would keep it alive and the reference would be dead. Keep "
                "the object itself in a variable the snapshot saves, or drop the weak "
                "reference before snapshot()"
            )


_dispatch.register_dump_hooks(_start_dump, check_referents, release_loaded)


# ------------------------------------------------------------------------ thread-locals
def _reduce_local(local: threading.local) -> Reduced:
    return (_new_local, (type(local),), dict(vars(local)))


@pinned("new_thread_local")
def _new_local(cls: type[threading.local]) -> threading.local:
    return cls.__new__(cls)


register_adapter(threading.local, _reduce_local, subclasses=True)


# ------------------------------------------------------------------------ idle event loops
def _busy_loop(loop: asyncio.AbstractEventLoop) -> str | None:
    """Why loop cannot be recreated as a new one, or None when it is idle."""
    if loop.is_running():
        return "it is running"
    ready = getattr(loop, "_ready", ())
    scheduled = [h for h in getattr(loop, "_scheduled", ()) if not h.cancelled()]
    if ready or scheduled:
        return f"it has {len(ready) + len(scheduled)} callback(s) or timer(s) scheduled"
    selector = getattr(loop, "_selector", None)
    if selector is not None:
        own = getattr(loop, "_ssock", None)
        own_fd = own.fileno() if own is not None else None
        fds = [k.fileobj for k in selector.get_map().values() if k.fileobj not in (own, own_fd)]
        if fds:
            return f"it watches {len(fds)} socket(s) or file(s)"
    executor = getattr(loop, "_default_executor", None)
    if isinstance(executor, concurrent.futures.ThreadPoolExecutor) and _busy(executor):
        return "its executor has work queued or running"
    if any(t for t in asyncio.all_tasks(loop) if not t.done()):
        return "it has tasks that have not finished"
    return None


def _reduce_loop(loop: asyncio.AbstractEventLoop) -> Reduced:
    settings = {
        "exception_handler": loop.get_exception_handler(),
        "task_factory": loop.get_task_factory(),
        "slow_callback_duration": getattr(loop, "slow_callback_duration", 0.1),
    }
    if loop.is_closed():  # nothing runs on it again: its settings do not matter
        return (_new_loop, (type(loop), True, loop.get_debug()))
    why = _busy_loop(loop)
    if why is not None:
        raise pickle.PicklingError(
            f"an asyncio event loop ({_name(loop)}) cannot be saved: {why}; its work "
            "cannot continue in another process"
        )
    args = (type(loop), False, loop.get_debug())
    return (_new_loop, args, settings, None, None, _loop_settings)


@pinned("new_event_loop")
def _new_loop(
    cls: type[asyncio.AbstractEventLoop], closed: bool, debug: bool
) -> asyncio.AbstractEventLoop:
    loop = cls()
    loop.set_debug(debug)
    if closed:
        loop.close()
    return loop


@pinned("event_loop_settings")
def _loop_settings(loop: asyncio.AbstractEventLoop, settings: dict[str, Any]) -> None:
    """The loop's exception handler, task factory and slow-callback threshold."""
    loop.set_exception_handler(settings["exception_handler"])
    loop.set_task_factory(settings["task_factory"])
    loop.slow_callback_duration = settings["slow_callback_duration"]


register_adapter(asyncio.BaseEventLoop, _reduce_loop, subclasses=True)
register_kind("_contextvars.ContextVar", "a contextvars.ContextVar", None)
register_kind("_contextvars.Context", "a contextvars.Context", None)
register_kind("weakref.ReferenceType", "a weak reference", None)
register_kind("_weakref.ReferenceType", "a weak reference", None)
