"""An unpickler that runs nothing: for looking at a snapshot (`snaprun inspect`).

Unpickling normally imports modules and calls whatever the pickle names (reducers,
`__setstate__`, cloudpickle's function and class builders, the resource adapters
that reopen files): code execution. `loads()` here never imports and never calls
anything the pickle names. Every global is a placeholder class recording its
`module.qualname`; calling it (REDUCE, NEWOBJ, INST) makes an `Inert` object that
keeps the arguments, and BUILD, APPENDS, SETITEMS and state setters only record
their state. Builtin scalars and containers load as themselves (their opcodes build
them without calling anything). `render()` shows the result readably:
`Notebook(title='draft', pages=['p1'])`, `<function agent.step>`, resources by
kind and path (`open file '/tmp/log.txt' (mode 'a', at byte 120)`).
"""

from __future__ import annotations

import gc
import itertools
import pickle
import reprlib
from collections.abc import Callable, Iterable
from typing import Any, cast

from .._abi import NAMES
from ._buffer import BufferReader, StreamReader

__all__ = [
    "loads",
    "load",
    "Inert",
    "InertType",
    "render",
    "attributes",
    "cell_contents",
    "is_code_object",
    "NULL",
]

_MAX_ITEMS = 6
_MAX_STRING = 80
_MAX_LENGTH = 400
_DEPTH = 4


class _Null:
    """What snapstate's NULL marker (an empty local slot or stack entry, which pickles
    by name as snapstate.runtime._layout.NULL) loads as here: the runtime's own marker
    would need its frame layout imported, and this reader imports nothing."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<NULL>"


NULL = _Null()


class InertType(type):
    """The type of every placeholder class: calling one makes an Inert object (or,
    for a known state setter, records the state on its target)."""

    _module: str
    _qualname: str

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 2 and not kwargs and _is_state_setter(cls._qualname):
            target, state = args
            if isinstance(target, Inert):
                target.__setstate__(state)
                target._setter = cls._qualname
                return None
            if isinstance(target, InertType):  # cloudpickle's _class_setstate
                names = state[0] if isinstance(state, tuple) and state else state
                if isinstance(names, dict) and isinstance(names.get("__module__"), str):
                    target._module = names["__module__"]
                return None
        if (
            cls._module.startswith("cloudpickle")
            and cls._qualname in ("_make_skeleton_class", "_make_skeleton_enum")
            and len(args) > 2
        ):
            # a class pickled by value: a placeholder class, so that NEWOBJ can make
            # its instances
            name = args[2] if cls._qualname == "_make_skeleton_enum" else args[1]
            return _placeholder("", name if isinstance(name, str) else "?")
        obj = Inert.__new__(cast("type[Inert]", cls), *args, **kwargs)  # (a class of Inert's)
        obj._called = True  # REDUCE: shown with its full dotted name
        return obj

    def __repr__(cls) -> str:  # a class or function the pickle names by reference
        return f"<{_dotted(cls._module, cls._qualname)}>"


def _is_state_setter(qualname: str) -> bool:
    name = qualname.rsplit(".", 1)[-1].lower()
    return (
        "setstate" in name
        or (name.lstrip("_").startswith("set_") and name.endswith("state"))
        or name in ("_fill_cell", "cell_set")
    )


_NO_KWARGS: dict[str, Any] = {}  # shared by every stand-in called without keywords


class Inert(metaclass=InertType):
    """A stand-in for an object the pickle would have built: what built it, with
    which arguments, and the state, items and attributes given to it afterwards.
    Slotted, its item lists made on first use: a state of millions of small objects
    decodes into about 100 bytes per stand-in plus its state (`inspect` within bounds)."""

    __slots__ = ("_args", "_kwargs", "_state", "_items", "_pairs", "_called", "_setter", "_callee")
    _module, _qualname = "", "?"
    # set per object by __new__ (decoded values: anything)
    _args: tuple[Any, ...]
    _kwargs: dict[str, Any]
    _state: Any
    _items: list[Any] | tuple[()]
    _pairs: list[tuple[Any, Any]] | tuple[()]
    _called: bool
    _setter: str | None  # the state setter that gave it its state
    _callee: Inert | None  # the decoded object this is a call of

    def __new__(cls, *args: Any, **kwargs: Any) -> Inert:
        obj = object.__new__(cls)
        obj._args, obj._kwargs, obj._state = args, kwargs or _NO_KWARGS, None
        obj._items, obj._pairs, obj._called, obj._setter, obj._callee = (), (), False, None, None
        return obj

    def __init__(self, *args: Any, **kwargs: Any):
        pass

    # what the unpickler may call on the objects it builds: record only
    def __setstate__(self, state: Any) -> None:
        self._state = state

    def _item_list(self) -> list[Any]:
        if isinstance(self._items, tuple):
            self._items = []
        return self._items

    def append(self, item: Any) -> None:
        self._item_list().append(item)

    def extend(self, items: Iterable[Any]) -> None:
        self._item_list().extend(items)

    def add(self, item: Any) -> None:
        self._item_list().append(item)

    def __setitem__(self, key: Any, value: Any) -> None:
        if isinstance(self._pairs, tuple):
            self._pairs = []
        self._pairs.append((key, value))

    def __call__(self, *args: Any, **kwargs: Any) -> Inert:
        """A call of a decoded object (e.g. cloudpickle's `_builtin_type(name)(...)`)."""
        call: Inert = _CALL(*args, **kwargs)
        call._callee = self
        return call

    def __repr__(self) -> str:
        return render(self)

    @property
    def kind(self) -> str:
        """module.qualname of what would have built this object."""
        return _dotted(type(self)._module, type(self)._qualname)


def _dotted(module: str, qualname: str) -> str:
    return qualname if module in ("builtins", "") else f"{module}.{qualname}"


def _placeholder(module: str, qualname: str) -> InertType:
    return InertType(
        qualname.rsplit(".", 1)[-1],
        (Inert,),
        {"_module": module, "_qualname": qualname, "__slots__": ()},
    )


_CALL = _placeholder("", "<call>")

_SCALARS = (str, bytes, bytearray, int, float, complex, bool, type(None))
_SAFE_BUILTINS = {
    "set": set,
    "frozenset": frozenset,
    "complex": complex,
    "slice": slice,
    "bytes": bytes,
    "bytearray": bytearray,
}


def _plain(value: object) -> bool:
    """A builtin scalar or a (flat) builtin container of scalars: safe to pass to a
    builtin constructor (no code of the pickle's runs, no size argument)."""
    if isinstance(value, (tuple, list, set, frozenset)):
        return all(type(v) in _SCALARS for v in value)
    return type(value) in _SCALARS and type(value) is not int


def _safe_builtin(module: str, name: str) -> Callable[..., object]:
    fn: Callable[..., object] = _SAFE_BUILTINS[name]
    placeholder = _placeholder(module, name)

    def build(*args: Any) -> object:
        if all(_plain(a) for a in args):  # e.g. set([1, 2]); never bytes(10**12)
            try:
                return fn(*args)
            except (TypeError, ValueError):
                pass
        return placeholder(*args)

    return build


def _call_decoded(func: Any, args: tuple[Any, ...], _flushed: object) -> object:
    if (
        isinstance(func, InertType)
        and (func._module, func._qualname) == ("copyreg", "__newobj__")
        and args
        and isinstance(args[0], InertType)
    ):
        cls = cast("type[Inert]", args[0])  # (every InertType is a class made of Inert)
        return cls.__new__(cls, *args[1:])  # as NEWOBJ decodes
    try:
        return func(*args)
    except TypeError:  # not a placeholder: nothing to call
        return _placeholder("", "<call>")(func, *args)


# The helpers of a deep dump (serializers/_deep.py) only pass values through: decoded
# as such, so a deep snapshot reads like an ordinary one. They call nothing but
# placeholders.
_DEEP_DUMP: dict[str, Callable[..., object]] = {
    "_applied": lambda obj: obj,
    "_first": lambda value, _flushed: value,
    "_call_flushed": _call_decoded,
}


class InertUnpickler(pickle.Unpickler):
    """find_class never imports: it returns a placeholder (a few builtin value types
    excepted, and snapstate's own NULL marker)."""

    def __init__(self, file: BufferReader | StreamReader):
        super().__init__(file)
        self._classes: dict[tuple[str, str], object] = {}

    def find_class(self, module: str, name: str) -> object:
        key = (str(module), str(name))
        hit = self._classes.get(key)
        if hit is None:
            cache_key = key
            if key[0] == "snapstate._abi" and key[1] in NAMES:  # shown by what it is now
                module, _, attr = NAMES[key[1]].partition(":")
                key = (module, attr)
            if key == ("snapstate.runtime._layout", "NULL"):
                hit = NULL
            elif key[0] == "builtins" and key[1] in _SAFE_BUILTINS:
                hit = _safe_builtin(*key)
            elif key[0] == "snapstate.serializers._deep" and key[1] in _DEEP_DUMP:
                hit = _DEEP_DUMP[key[1]]
            else:
                hit = _placeholder(*key)
            self._classes[cache_key] = hit
        return hit

    def persistent_load(self, pid: object) -> object:
        return _placeholder("<persistent id>", repr(pid)[:40])()


def loads(data: bytes | bytearray | memoryview) -> object:
    """Decode a pickle into builtin values and Inert placeholders, running nothing."""
    return load(BufferReader(data))


def load(file: BufferReader | StreamReader) -> object:
    """loads() from a reader: a verified body streamed piece by piece (serializers/
    _snapfile.py's open_verified) is decoded as it is read, never held whole."""
    enabled = gc.isenabled()
    gc.disable()  # millions of new containers would trigger useless collections
    try:
        return InertUnpickler(file).load()
    finally:
        if enabled:
            gc.enable()


# ------------------------------------------------------------------------ reading
def attributes(obj: object) -> dict[Any, Any]:
    """The attributes an Inert object would have had (its BUILD state)."""
    if not isinstance(obj, Inert):
        return {}
    state = obj._state
    attrs: dict[Any, Any] = {}
    if (
        obj._setter == "_set_exception_state"
        and isinstance(state, tuple)
        and state
        and isinstance(state[0], dict)
    ):
        return dict(state[0])  # (attributes, cause, context, suppress, traceback)
    if (
        isinstance(state, tuple)
        and len(state) == 2
        and all(s is None or isinstance(s, dict) for s in state)
    ):
        for part in state:
            attrs.update(part or {})
    elif isinstance(state, dict):
        attrs.update(state)
    return attrs


def is_code_object(obj: object) -> bool:
    """A function or class (placeholder), which inspect lists apart from data."""
    if isinstance(obj, InertType):
        return True
    return isinstance(obj, Inert) and _function_name(obj) is not None


def _name_of(kind: str) -> str:
    return kind.rsplit(".", 1)[-1]


def _function_name(obj: Inert) -> str | None:
    kind, args = obj.kind, obj._args
    if kind == "snapstate.serializers._pickler._rebuild_function" and len(args) >= 3:
        module = attributes(args[0]).get("module")
        return f"{module}.{args[2]}" if isinstance(module, str) else str(args[2])
    if kind.startswith("cloudpickle") and kind.endswith("._make_function"):
        attrs = attributes(obj)
        qualname = attrs.get("__qualname__") or _arg(obj, 2, "?")
        module = attrs.get("__module__")
        return f"{module}.{qualname}" if isinstance(module, str) else str(qualname)
    return None


# ------------------------------------------------------------------------ rendering
_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = _MAX_STRING
_REPR.maxlong = 60


def _scalar(value: Any) -> str:
    if isinstance(value, (bytes, bytearray)) and len(value) > _MAX_STRING:
        # reprlib has no bytes method: it would repr the whole value (4x its size) first
        cut = repr(value[: _MAX_STRING // 2])
        return f"{cut[:-1]}...{cut[-1]}" if isinstance(value, bytes) else f"{cut[:-2]}...')"
    try:
        return _REPR.repr(value)
    except ValueError:  # an int too large to print
        return f"<int of {value.bit_length()} bits>"


def render(value: object, depth: int = _DEPTH, *, limit: int = _MAX_LENGTH) -> str:
    """A readable, bounded one-line rendering of a decoded value (at most `limit`
    characters, however large the value)."""
    text = _render(value, depth, set())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _items(values: Iterable[object], depth: int, seen: set[int]) -> str:
    # the first few only: never a copy of a large container
    first = list(itertools.islice(values, _MAX_ITEMS + 1))
    shown = [_render(v, depth - 1, seen) for v in first[:_MAX_ITEMS]]
    if len(first) > _MAX_ITEMS:
        shown.append("...")
    return ", ".join(shown)


def _render(value: object, depth: int, seen: set[int]) -> str:
    if value is NULL:
        return "<NULL>"
    if isinstance(value, InertType):
        return repr(value)
    if isinstance(value, _SCALARS):
        return _scalar(value)
    if id(value) in seen:
        return "<...>"
    if isinstance(value, (list, tuple, set, frozenset, dict)):
        if depth <= 0:
            return {list: "[...]", tuple: "(...)", dict: "{...}"}.get(type(value), "{...}")
        seen.add(id(value))
        try:
            if isinstance(value, dict):
                pairs = list(itertools.islice(value.items(), _MAX_ITEMS + 1))
                shown = [
                    f"{_render(k, depth - 1, seen)}: {_render(v, depth - 1, seen)}"
                    for k, v in pairs[:_MAX_ITEMS]
                ]
                return "{" + ", ".join(shown + (["..."] if len(pairs) > _MAX_ITEMS else [])) + "}"
            inner = _items(value, depth, seen)
            if isinstance(value, list):
                return f"[{inner}]"
            if isinstance(value, tuple):
                return f"({inner},)" if len(value) == 1 else f"({inner})"
            if not value:
                return f"{type(value).__name__}()"
            return f"{{{inner}}}" if isinstance(value, set) else f"frozenset({{{inner}}})"
        finally:
            seen.discard(id(value))
    if isinstance(value, Inert):
        seen.add(id(value))
        try:
            return _render_inert(value, depth, seen)
        finally:
            seen.discard(id(value))
    return f"<{type(value).__name__}>"


def _arg(obj: Inert, i: int, default: object = None) -> Any:
    return obj._args[i] if len(obj._args) > i else default


def _render_inert(obj: Inert, depth: int, seen: set[int]) -> str:
    special = _render_special(obj, depth, seen)
    if special is not None:
        return special
    kind, args = obj.kind, obj._args
    if kind == "copyreg._reconstructor" and isinstance(_arg(obj, 0), InertType):
        kind, args = _dotted(args[0]._module, args[0]._qualname), ()  # protocol 0/1 object
    # an instance (NEWOBJ) by its class name, any other call by its full dotted name
    name = kind if obj._called else _name_of(kind)
    if depth <= 0:
        return f"{name}(...)"
    parts = [_render(a, depth - 1, seen) for a in args]
    parts += [f"{k}={_render(v, depth - 1, seen)}" for k, v in obj._kwargs.items()]
    attrs = attributes(obj)
    if obj._state is not None and not attrs and obj._setter is None:
        parts.append(f"state={_render(obj._state, depth - 1, seen)}")
    for i, (key, value) in enumerate(attrs.items()):
        if i == 2 * _MAX_ITEMS:
            parts.append("...")
            break
        label = key if isinstance(key, str) else _render(key, 0, seen)
        parts.append(f"{label}={_render(value, depth - 1, seen)}")
    if obj._items:
        parts.append(f"items=[{_items(obj._items, depth, seen)}]")
    if obj._pairs:
        parts.append(
            "items={"
            + ", ".join(
                f"{_render(k, depth - 1, seen)}: {_render(v, depth - 1, seen)}"
                for k, v in obj._pairs[:_MAX_ITEMS]
            )
            + "}"
        )
    return f"{name}({', '.join(parts)})"


def _text(value: object, quote: bool = True) -> str:
    if isinstance(value, str) and not quote:
        return value
    return _render(value, 1, set())


def cell_contents(value: object) -> object:
    """What a decoded cell holds (NULL when empty); any other value as is."""
    if (
        isinstance(value, Inert)
        and "cell" in _name_of(value.kind).lower()
        and value.kind.startswith(("snapstate.", "cloudpickle"))
    ):
        state = value._state
        if isinstance(state, tuple) and len(state) == 2:
            return state[1] if state[0] else NULL
        return value._args[0] if value._args else NULL
    return value


def _render_special(obj: Inert, depth: int, seen: set[int]) -> str | None:
    """Functions, cells, generators and the resource adapters, by what built them."""
    kind = obj.kind
    name = _name_of(kind)
    function = _function_name(obj)
    if function is not None:
        return f"<function {function}>"
    if kind == "tempfile._TemporaryFileWrapper":
        opened = _render(attributes(obj).get("file"), 1, set())
        return "named temporary " + opened.removeprefix("open ")
    contents = cell_contents(obj)
    if contents is not obj:
        return "<empty cell>" if contents is NULL else f"<cell: {_render(contents, depth, seen)}>"
    if kind == "getattr" and len(obj._args) == 2:
        return f"{_render(obj._args[0], depth - 1, seen)}.{_text(obj._args[1], False)}"
    if kind.startswith("snapstate.resources."):
        return _render_resource(obj, name)
    if kind.startswith("snapstate.serializers._refs.module_") and len(obj._args) >= 2:
        return f"<{_text(obj._args[0], False)}.{_text(obj._args[1], False)}>"
    if kind == "snapstate.runtime._morph.rebuild_generator":
        record = attributes(_arg(obj, 0))
        ref = attributes(record.get("code"))
        return (
            f"<generator {_text(ref.get('qualname', '?'), False)}() paused at line "
            f"{record.get('lineno', '?')}>"
        )
    if kind == "snapstate.runtime._tasks._task_handle":
        return f"<task {_text(_arg(obj, 0, '?'), False)}>"
    if kind == "snapstate.serializers._pickler._exhausted_generator":
        return "<exhausted generator>"
    if kind == "snapstate.serializers._pickler._finished_coroutine":
        return "<finished coroutine>"
    if kind == "snapstate.serializers._pickler._from_dill":
        data = _arg(obj, 0, b"")
        return f"<object saved with dill ({len(data) if isinstance(data, bytes) else '?'} bytes)>"
    if kind.startswith("cloudpickle") and name in ("_make_skeleton_class", "_make_skeleton_enum"):
        return f"<class {_text(_arg(obj, 1, '?'), False)}>"
    if kind.startswith("cloudpickle") and name == "subimport":
        return f"<module {_text(_arg(obj, 0, '?'), False)}>"
    if kind.startswith("cloudpickle") and name == "_builtin_type":
        return f"<type {_text(_arg(obj, 0, '?'), False)}>"
    callee = obj._callee
    if callee is not None:
        if callee.kind.endswith("._builtin_type") and _arg(callee, 0) == "CodeType":
            return "<code>"
        return (
            f"{_render(callee, depth - 1, seen)}"
            f"({', '.join(_render(a, depth - 1, seen) for a in obj._args)})"
        )
    return None


def _render_resource(obj: Inert, name: str) -> str:
    a = obj._args
    if name == "rebuild_view" and len(a) >= 5:  # resources/_numpy.py
        return (
            f"numpy view (shape {_text(a[2])}, strides {_text(a[3])}, offset "
            f"{_text(a[4])}) of {_render(a[0], 1, set())}"
        )
    if name == "_reopen_file" and len(a) >= 3:
        return f"open file {_text(a[0])} (mode {_text(a[1])}, at byte {_text(a[2])})"
    if name == "_closed_file" and len(a) >= 3:
        return f"closed file {_text(a[1])} (mode {_text(a[2])})"
    if name == "_reopen_sqlite" and a:
        return f"sqlite3 connection {_text(a[0])}"
    if name == "_closed_sqlite":
        return "closed sqlite3 connection"
    if name == "_reopen_tempdir" and a:
        return f"temporary directory {_text(a[0])}"
    if name == "_new_httpx" and a and isinstance(a[0], dict):
        return f"httpx.Client(base_url={_text(a[0].get('base_url'))})"
    if name == "_rebuilt_httpx_response" and len(a) >= 4:
        return f"httpx.Response({_text(a[0])}, url={_text(a[3])})"
    if name == "_new_requests":
        return "requests.Session()"
    if name == "_rebuilt_requests_response" and a and isinstance(a[0], dict):
        return f"requests.Response({_text(a[0].get('status_code'))}, url={_text(a[0].get('url'))})"
    if name == "Handle" and a:
        label = a[2] if len(a) > 2 and isinstance(a[2], str) else _render(a[0], 1, set())
        return f"resource {label!r} (reopened by its factory on first use)"
    if name == "_reopen_named_temp" and a and isinstance(a[0], tuple) and len(a[0]) >= 3:
        path, mode, at = a[0][:3]
        return f"named temporary file {_text(path)} (mode {_text(mode)}, at byte {_text(at)})"
    if name == "_closed_named_temp" and len(a) >= 2:
        return f"closed named temporary file {_text(a[0])} (mode {_text(a[1])})"
    if "temp" in name.lower() and a:
        return f"named temporary file {_text(a[0])}" + (
            f" (mode {_text(a[1])})" if len(a) > 1 else ""
        )
    return f"{name}({', '.join(_render(x, 1, set()) for x in a)})"
