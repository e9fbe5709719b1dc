"""Objects of imported modules outside the agent, saved by reference.

A sentinel (`argparse.SUPPRESS`, `dataclasses.MISSING`, a library's
`_sentinel = object()`) or a module singleton (`logging.root`, `sys.__stdout__`)
is compared by identity by the code that defines it. Saved by value it comes back
as a copy, and `value is not SUPPRESS` silently turns true. So an object that is an
attribute of a non-agent module is saved as "module.name" and comes back as that
attribute of the new process's module.

  - Objects that reach the pickler's reducer_override (everything but atoms, str,
    bytes and exact builtin containers) are found with one dict lookup in an index
    id(obj) -> (module, name) of the non-agent modules' attributes, kept per module
    and brought up to date before a dump only when sys.modules changed (never walked
    per object); a hit is verified (`module.name is obj`) before it is used.
  - str sentinels never reach reducer_override (the C pickler saves exact str before
    it), but it checks its memo for them: the memo is seeded with the few module
    strings that look like sentinels, so each is written as a memo GET. The payload
    starts with a preamble that puts the new process's `module.name` strings in the
    loader's memo at the same indices (the state pickle follows in the same stream),
    so plain pickle.loads needs no help, and the inert reader shows them by name.

A referenced object that holds state (a registry the job filled, an opener the job
installed with urllib.request.install_opener, decimal.DefaultContext after `prec = 5`)
is saved as reference + state and comes back as the new process's object with that
state put onto it, or rebuilt and set back as the module's attribute (_libstate).

Not by reference: the agent's own modules (their globals are saved by value with the
job), `__main__`, modules a new process could not import by their sys.modules name
(aliases, modules built at run time without a spec), objects of a class the agent
defined (the agent made them; a fresh import cannot have them), functions, classes
and modules (pickle already saves them by name), objects whose own __reduce__ already
names them, and strings that do not look like sentinels, exact lists, dicts and tuples
(seeding the memo with every module's containers would cost every snapshot).
"""

from __future__ import annotations

import importlib
import io
import os
import pickle
import re
import struct
import sys
import types
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._reduced import Reduced

from .._abi import pinned

__all__ = [
    "INDEX",
    "bind",
    "prepare",
    "reduce",
    "module_attribute",
    "module_string",
    "importable",
    "indexed",
]

# id(obj) -> (module name, attribute name): attributes of non-agent modules.
INDEX: dict[int, tuple[str, str]] = {}
_SEEN: dict[str, tuple[types.ModuleType, int]] = {}  # module name -> (module, dict size)
_STRINGS: dict[int, tuple[str, str, str]] = {}  # id(str) -> (module, name, value)
_EXCLUDED: set[str] = {"__main__"}
_BY_NAME: dict[type, bool] = {}

# Types the pickler never passes to reducer_override, or saves by name itself.
_SKIP = frozenset(
    {
        type(None),
        bool,
        int,
        float,
        complex,
        str,
        bytes,
        bytearray,
        tuple,
        list,
        dict,
        set,
        frozenset,
        types.ModuleType,
        types.FunctionType,
        types.BuiltinFunctionType,
        types.CodeType,
        type(Ellipsis),
        type(NotImplemented),
    }
)
# A str that is a sentinel: '==SUPPRESS==', '--unknown--', '@@@SKIP_HEADER@@@',
# '<missing API key>', or a name saying so.
_SENTINEL_TEXT = re.compile(r"(\W)\1+\w[\w -]*\1\1+|<\w[\w -]*>")
_SENTINEL_NAME = re.compile("sentinel", re.IGNORECASE)
# sys's streams are indexed under their original names only: a redirected
# sys.stdout (a StringIO the agent set) is the agent's object, saved by value.
_SYS_STREAMS = frozenset({"stdin", "stdout", "stderr"})


def bind(agent_modules: Iterable[types.ModuleType]) -> None:
    """Say which modules are the agent's (their objects are saved by value)."""
    names = {m.__name__ for m in agent_modules} | {"__main__"}
    if names != _EXCLUDED:
        _EXCLUDED.clear()
        _EXCLUDED.update(names)
        for name in names:
            _forget(name)
        _WALKED[0] = None


def agent_module_names() -> frozenset[str]:
    """The modules bind() took for the agent's (and __main__)."""
    return frozenset(_EXCLUDED)


def importable(obj: Any) -> bool:
    """Whether obj (a class or function) is what its module and qualified name find."""
    found: object = sys.modules.get(getattr(obj, "__module__", None) or "")
    try:
        for part in obj.__qualname__.split("."):
            found = getattr(found, part)
    except AttributeError:
        return False
    return found is obj


def indexed(obj: object) -> tuple[str, str] | None:
    """(module, attribute) when obj is that attribute of a non-agent module (saved by
    reference), checked against the module itself: an id in the index may be stale."""
    where = INDEX.get(id(obj))
    if where is None:
        return None
    module = sys.modules.get(where[0])
    return where if module is not None and module.__dict__.get(where[1]) is obj else None


def _forget(name: str) -> None:
    if _SEEN.pop(name, None) is not None:
        for key in [k for k, v in INDEX.items() if v[0] == name]:
            del INDEX[key]
        for key in [k for k, v in _STRINGS.items() if v[0] == name]:
            del _STRINGS[key]


def _index_module(name: str, module: types.ModuleType, attrs: dict[str, Any]) -> None:
    in_sys = name == "sys"
    for attr, value in list(attrs.items()):
        t = type(value)  # never isinstance(): it asks lazy proxies __class__
        if t in _SKIP or issubclass(t, type):
            if (
                t is str
                and (_SENTINEL_TEXT.fullmatch(value) or _SENTINEL_NAME.search(attr))
                and attr[:2] != "__"
            ):
                _STRINGS[id(value)] = (name, attr, value)
            continue
        if attr[:2] == "__" and not in_sys:
            continue  # __spec__, __loader__: nobody compares them
        if in_sys and attr in _SYS_STREAMS:
            continue
        INDEX[id(value)] = (name, attr)


_Signature = tuple[int, str | None, int | None]
_WALKED: list[_Signature | None] = [None]  # sys.modules' signature at the last walk


def _signature() -> _Signature:
    """Changes with any import or removal: the size and the last-inserted entry."""
    modules = sys.modules
    try:
        last = next(reversed(modules))
    except (StopIteration, RuntimeError):
        return (len(modules), None, None)
    return (len(modules), last, id(modules.get(last)))


def refresh() -> None:
    """Index the non-agent modules loaded or grown since the last walk. Modules are
    walked only when sys.modules changed (an import): attributes a module gains later
    without any import are not indexed, and are saved by value as before."""
    signature = _signature()
    if signature == _WALKED[0]:
        return
    _WALKED[0] = signature
    seen = _SEEN
    for name in [n for n, (m, _) in seen.items() if sys.modules.get(n) is not m]:
        del seen[name]  # removed or replaced: let the old module go
    for name, module in list(sys.modules.items()):
        if not issubclass(type(module), types.ModuleType) or name in _EXCLUDED:
            continue
        attrs = module.__dict__
        hit = seen.get(name)
        if hit is not None and hit[0] is module and hit[1] == len(attrs):
            continue
        seen[name] = (module, len(attrs))
        # Only modules the import system made under their own name: a new process can
        # import them by that name. Not aliases (__mp_main__ is __main__, requests'
        # copies of urllib3's modules) nor modules built at run time.
        if attrs.get("__name__") == name and attrs.get("__spec__") is not None:
            _index_module(name, module, attrs)


def prepare(pickler: pickle.Pickler, buf: io.BytesIO) -> None:
    """Before a dump: refresh the index, seed the pickler's memo with the sentinel
    strings and write the preamble that loads them at the start of `buf`."""
    refresh()
    strings = []
    for key, (module, attr, value) in list(_STRINGS.items()):
        current = sys.modules.get(module)
        if current is not None and current.__dict__.get(attr) is value:
            strings.append((module, attr, value))
        else:
            del _STRINGS[key]
    if not strings:
        return
    pickler.memo = {id(s[2]): (i, s[2]) for i, s in enumerate(strings)}
    buf.write(_preamble(tuple(strings)))


_PREAMBLES: dict[tuple[tuple[str, str, str], ...], bytes] = {}
_STRING = struct.Struct("<I")


def _preamble(entries: tuple[tuple[str, str, str], ...]) -> bytes:
    """PROTO 5, then module_string(module, name, value) put in memo 0, 1, ... and
    popped; no STOP: the state pickle continues the stream (PROTO may repeat)."""
    out = _PREAMBLES.get(entries)
    if out is None:
        parts = [
            pickle.PROTO + b"\x05",
            pickle.GLOBAL + f"{module_string.__module__}\n{module_string.__qualname__}\n".encode(),
        ]
        for entry in entries:
            parts.append(pickle.DUP)
            for text in entry:
                data = text.encode("utf-8", "surrogatepass")
                parts.append(pickle.BINUNICODE + _STRING.pack(len(data)) + data)
            parts.append(pickle.TUPLE3 + pickle.REDUCE + pickle.MEMOIZE + pickle.POP)
        parts.append(pickle.POP)
        out = _PREAMBLES[entries] = b"".join(parts)
    return out


@pinned("module_string")
def module_string(module: str, attr: str, value: str) -> str:
    """`module.attr` of this process when it is still a str (a sentinel keeps its
    identity), else the saved value (the library dropped it: an equal copy, as
    before). Unused entries cost nothing more, so a missing one is no error."""
    mod = sys.modules.get(module)
    if mod is None:
        try:
            mod = importlib.import_module(module)
        except Exception:
            return value
    current = getattr(mod, attr, None)
    return current if type(current) is str else value


def reduce(obj: object, where: tuple[str, str]) -> Reduced | None:
    """The reduction of an indexed object (None: save it by value after all): a plain
    reference for a sentinel-like object, else reference + state (see _libstate)."""
    module, attr = where
    current = sys.modules.get(module)
    if current is None or current.__dict__.get(attr) is not obj or module in _EXCLUDED:
        return None
    t = type(obj)
    if t.__module__ in _EXCLUDED:
        return None  # the agent's own object that a library holds
    by_name = _BY_NAME.get(t)
    if by_name is None:
        by_name = _BY_NAME[t] = _pickles_by_name(obj)
    if by_name:
        return None
    if obj is os.environ:  # its class is swapped for tracking (runtime/_process)
        return (module_attribute, (module, attr))
    return _libstate.reduce(obj, t, module, attr) or (module_attribute, (module, attr, _kind(t)))


def _kind(t: type) -> str:
    return f"{t.__module__}.{t.__qualname__}"


def _pickles_by_name(obj: object) -> bool:
    """Whether obj's own __reduce__ names it (e.g. snapstate's NULL): pickle keeps
    its identity already and readers know it by that name."""
    t = type(obj)
    if t.__reduce_ex__ is object.__reduce_ex__ and t.__reduce__ is object.__reduce__:
        return False
    try:
        return isinstance(obj.__reduce_ex__(5), str)
    except Exception:
        return False


@pinned("module_attribute")
def module_attribute(module: str, attr: str, kind: str | None = None) -> object:
    """The object `module.attr` of this process (a snapshot's reference to it). With
    `kind` (the saved object's type), an object of another type is refused: it cannot
    be the job's (typically the job had installed its own object there, whose state
    could not be saved, and this process's module has its import-time value)."""
    mod = importlib.import_module(module)
    try:
        current = getattr(mod, attr)
    except AttributeError:
        raise AttributeError(
            f"the snapshot refers to {module}.{attr} (an object of module {module}), which "
            f"module {module} no longer has"
        ) from None
    if kind is not None and _kind(type(current)) != kind:
        from .._errors import ResourceReopenError

        raise ResourceReopenError(
            f"the snapshot refers to {module}.{attr}, a {kind} in the job's process (an object "
            f"the job put into module {module}, whose state cannot be saved), but "
            f"{module}.{attr} is {type(current).__name__} in this process: the job's object "
            "cannot come back. Make that object in the agent's own code after snapshot() (or "
            "keep it out of the library module while a snapshot is taken)."
        )
    return current


_MISSING = object()


@pinned("module_object")
def module_object(
    module: str,
    attr: str,
    t: type,
    func: Callable[..., object],
    args: tuple[Any, ...],
    newobj: bool,
) -> object:
    """`module.attr` of this process, to take the saved state (module_object_setstate
    and the saved items follow): the fresh object when it is of the saved type and can
    take the state (identity kept with every reference the library holds), else an
    object rebuilt from the saved reduce and set back as `module.attr` (the job had
    installed its own object there, or changed one that takes its value only when
    built, like a decimal.Context without an applier)."""
    mod = importlib.import_module(module)
    current = mod.__dict__.get(attr, _MISSING)
    if type(current) is t or _kind(type(current)) == _kind(t):  # t may be a copy by value
        if newobj:  # built with no arguments: all it holds is its state
            if issubclass(t, list):
                list.clear(current)  # the saved items are appended next
            elif issubclass(t, dict):
                dict.clear(current)
            return current
        applier = _libstate.APPLIERS.get((t.__module__, t.__qualname__))
        if applier is not None:
            applier(current, args)
            return current
        if _libstate.same_reduce(current, func, args):
            return current
    obj = func(*args)
    setattr(mod, attr, obj)
    return obj


@pinned("module_object_setstate")
def module_object_setstate(obj: object, named_state: tuple[str, Any]) -> None:
    """Put a saved state onto a library object as pickle's BUILD would, but exactly:
    its __dict__ is replaced (an attribute the job deleted stays deleted). A state the
    new process's object does not take fails naming the object, never half-silently."""
    name, state = named_state
    if state is None:
        return
    try:
        _libstate.setstate(obj, state)
    except Exception as exc:
        raise TypeError(
            f"the state the job gave to {name} (a {type(obj).__name__} of that library) "
            f"cannot be put back onto the new process's {name}: {type(exc).__name__}: {exc}. "
            f"The installed version of the library may differ from the job's"
        ) from None


# Library objects the job changed or installed: their state goes with the reference.
from . import _libstate  # noqa: E402
