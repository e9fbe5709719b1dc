"""The pickler's registration table: what the layers above teach the serializers.

The serializers are the lowest layer: they import nothing from snapstate.runtime or
snapstate.resources. What only those layers know reaches the pickler through this
table, filled when they are imported (as cloudpickle's Pickler takes per-type
reducers from its dispatch table, and copyreg.pickle fills copyreg's):

    register_reducer(cls, reduce)    objects of exactly type `cls` are saved as
                                     reduce(obj) (a pickle reduce tuple), before the
                                     adapters and cloudpickle; the runtime registers
                                     generators and coroutines (runtime/_reducers.py)
    register_adapters(lookup, handles)  lookup(type) -> the adapter that saves that
                                     type, or None; `handles` are types of live handles
                                     no fallback may save by value (resources/_adapters.py)
    register_code_stubs(is_stub, position)  the runtime's restore stubs ("morph" code
                                     objects): is_stub(code) says whether a code object
                                     is one (never pickled), position(code, unit) maps a
                                     unit of it to (original code, unit) for tracebacks

Every entry point gets them: importing any snapstate module imports the `snapstate`
package first, whose facade imports the runtime (which imports runtime/_reducers.py)
and the resources. The defaults are what holds without them: no reducers, no
adapters (a generator or a live handle is then refused loudly, never saved wrong),
and no restore stubs (only the runtime makes them).
"""

from __future__ import annotations

import io
import types
from collections.abc import Callable
from typing import Any

__all__ = [
    "REDUCERS",
    "HANDLE_TYPES",
    "Reduce",
    "register_reducer",
    "register_adapters",
    "register_code_stubs",
    "adapter_for",
    "is_stub",
    "code_position",
    "register_dump_hooks",
    "DumpAgain",
    "adapters_changed",
    "ORDINARY",
    "DUMP_HOOKS",
]

# obj -> a pickle reduce tuple (callable, args, ...); any object: the agent's values
Reduce = Callable[[Any], tuple[Any, ...]]

# exact type -> reduce(obj) (the runtime's generators, coroutines)
REDUCERS: dict[type, Reduce] = {}

# Live operating-system handles: never pickled by value, by any fallback (the
# resources add the types their adapters refuse: sockets, threads, subprocesses).
HANDLE_TYPES: tuple[type, ...] = (io.IOBase,)

_ADAPTER_LOOKUPS: list[Callable[[type], Reduce | None]] = []

# Types the pickler found need nothing of its own (no reducer, adapter or special
# reduction): pickle's way, at once. Emptied whenever a reducer or adapter is added.
ORDINARY: set[type] = set()

# (before each dump, after it with a function returning the pickler's memo (id ->
# (index, object)), after each load): the resources' weak-reference bookkeeping.
DUMP_HOOKS: list[
    tuple[
        Callable[[], None],
        Callable[[Callable[[], dict[int, Any]] | None, object], None],
        Callable[[], None],
    ]
] = []


def _never_stub(code: types.CodeType) -> bool:
    return False


def _same_position(code: types.CodeType, unit: int) -> tuple[types.CodeType, int]:
    return code, unit


_is_stub: Callable[[types.CodeType], bool] = _never_stub
_position: Callable[[types.CodeType, int], tuple[types.CodeType, int]] = _same_position


def register_reducer(cls: type, reduce: Reduce) -> None:
    """Save objects of exactly type `cls` as reduce(obj), a pickle reduce tuple."""
    REDUCERS[cls] = reduce
    ORDINARY.clear()


def register_adapters(
    lookup: Callable[[type], Reduce | None], handles: tuple[type, ...] = ()
) -> None:
    """Take adapters from lookup(type) -> reduce function or None, and refuse
    instances of `handles` in every fallback (dill included)."""
    global HANDLE_TYPES
    if lookup not in _ADAPTER_LOOKUPS:
        _ADAPTER_LOOKUPS.append(lookup)
    ORDINARY.clear()
    HANDLE_TYPES = (*HANDLE_TYPES, *(t for t in handles if t not in HANDLE_TYPES))


class DumpAgain(Exception):
    """Raised by a dump hook that has learned, after the dump, how to save one of its
    objects better (a ContextVar that is a library class's attribute): the caller dumps
    again."""


def register_dump_hooks(
    start: Callable[[], None],
    finish: Callable[[Callable[[], dict[int, Any]] | None, object], None],
    loaded: Callable[[], None],
) -> None:
    """start() before each dump; finish(memo, root) after the dump of root (memo() -> the
    pickler's memo, id -> (index, object); it raises pickle.PicklingError to refuse the
    dump; memo is None when the dump itself failed); loaded()
    after each load has returned its object."""
    DUMP_HOOKS.append((start, finish, loaded))


def adapters_changed() -> None:
    """An adapter was added (or an optional library's adapters loaded): types found
    ordinary so far are looked at again."""
    ORDINARY.clear()


def register_code_stubs(
    is_stub: Callable[[types.CodeType], bool],
    position: Callable[[types.CodeType, int], tuple[types.CodeType, int]],
) -> None:
    """is_stub(code) -> whether code is a restore stub; position(code, unit) ->
    (original code, unit) of a frame running a stub (identity for other code)."""
    global _is_stub, _position
    _is_stub, _position = is_stub, position


def adapter_for(t: type) -> Reduce | None:
    """The registered adapter (reduce function) for objects of type t, or None."""
    for lookup in _ADAPTER_LOOKUPS:
        found = lookup(t)
        if found is not None:
            return found
    return None


def is_stub(code: types.CodeType) -> bool:
    """Whether `code` is one of the runtime's restore stubs."""
    return _is_stub(code)


def code_position(code: types.CodeType, unit: int) -> tuple[types.CodeType, int]:
    """(code, unit) of a frame as the original code: a restore stub maps back to the
    code it restores."""
    return _position(code, unit)
