"""State of library objects saved by reference (serializers/_refs.py).

A module attribute of a library is saved by reference so that identity holds, but the
job may have changed it in place (`REGISTRY.items["tool"] = ...`,
`decimal.DefaultContext.prec = 5`) or installed its own object there
(`urllib.request.install_opener(opener)`): a bare reference would bring back the new
process's import-time value. So, per referenced object (only those pay):

  - sentinel-like (its default reduce carries nothing but its class: `object()`,
    dataclasses.MISSING), or not picklable at all (sys.__stdout__, a module's lock),
    or owned elsewhere (os.environ: runtime/_process.py; loggers: by name; objects a
    resource adapter reopens): the plain reference, as before;
  - otherwise reference + its reduce: at load _refs.module_object takes the new
    process's `module.attr` when it is of the same type and can take the state
    (identity kept), else rebuilds the object and sets it back as `module.attr`;
    the state is then put onto it exactly (setstate), items of list/dict subclasses
    replaced.

An object whose state cannot be pickled (a Thread's held locks) keeps the plain
reference: its state is trial-pickled first with the snapshot's pickler.
"""

from __future__ import annotations

import copyreg
import io
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._reduced import Reduced

__all__ = ["reduce", "setstate", "same_reduce", "APPLIERS"]

_PLAIN_TYPES: dict[type, bool] = {}  # type -> saved by the plain reference only
_TRIAL = [False]  # inside a trial pickle: nested refs stay plain


def reduce(obj: object, t: type, module: str, attr: str) -> Reduced | None:
    """The reference + state reduction of obj (`module.attr`), or None for the plain
    reference."""
    if _TRIAL[0] or obj is os.environ:
        return None
    plain = _PLAIN_TYPES.get(t)
    if plain is None:
        plain = _PLAIN_TYPES[t] = _plain_type(t)
    if plain:
        return None
    try:
        rv = obj.__reduce_ex__(5)
    except Exception:
        return None  # cannot be pickled at all: its identity is all it has
    if not isinstance(rv, tuple) or not 2 <= len(rv) <= 5:
        return None
    func, args, state, items, pairs = rv + (None,) * (5 - len(rv))
    newobj = func is copyreg.__newobj__ and len(args) == 1 and args[0] is t  # type: ignore[attr-defined]  # typeshed lacks __newobj__
    container = issubclass(t, (list, dict))
    if newobj and state is None and not container:
        return None  # a sentinel: nothing but its class
    items = list(items) if items is not None else None
    pairs = list(pairs) if pairs is not None else None
    if not _trial((func, args, state, items, pairs)):
        return None
    from ._refs import module_object, module_object_setstate

    return (
        module_object,
        (module, attr, t, func, args, newobj),
        (f"{module}.{attr}", state),
        None if items is None else iter(items),
        None if pairs is None else iter(pairs),
        module_object_setstate,
    )


def _plain_type(t: type) -> bool:
    """Types whose objects keep the plain reference: loggers (they reduce by name to
    the new process's logger) and types a resource adapter reopens or refuses (a
    library's connection or file is that library's, not to be reopened by a restore)."""
    from ._dispatch import adapter_for

    if adapter_for(t) is not None:  # refused handles too: their adapter is the refusal
        return True
    return any(
        c.__module__ == "logging" and c.__name__ in ("Logger", "PlaceHolder", "Manager")
        for c in t.__mro__
    )


def _trial(parts: object) -> bool:
    """Whether parts pickle with the snapshot's pickler (nested references plain)."""
    from ._pickler import FreezePickler

    _TRIAL[0] = True
    try:
        FreezePickler(io.BytesIO(), protocol=5).dump(parts)
        return True
    except Exception:
        return False
    finally:
        _TRIAL[0] = False


def same_reduce(current: object, func: object, args: object) -> bool:
    """Whether the new process's object reduces to the saved constructor call (an
    unchanged value object: datetime.timezone.utc, an enum member, a compiled pattern)."""
    try:
        rv = current.__reduce_ex__(5)
        return rv[0] is func and rv[1] == args
    except Exception:
        return False


_DEFAULT_GETSTATE = getattr(object, "__getstate__", None)


def setstate(obj: Any, state: Any) -> None:
    """pickle's BUILD onto an existing object: __setstate__ if the type has one, else
    its __dict__ replaced (when the type saves its whole __dict__) and slots set."""
    t = type(obj)
    if getattr(t, "__setstate__", None) is not None:
        obj.__setstate__(state)
        return
    slots = None
    if isinstance(state, tuple) and len(state) == 2:
        state, slots = state
    if state is not None:
        attrs = obj.__dict__
        if getattr(t, "__getstate__", None) is _DEFAULT_GETSTATE:
            attrs.clear()  # exact: an attribute the job deleted stays deleted
        attrs.update(state)
    if slots:
        for name, value in slots.items():
            setattr(obj, name, value)


def _apply_decimal_context(ctx: Any, args: tuple[Any, ...]) -> None:
    """A decimal.Context takes its settings as constructor arguments: set them on the
    new process's object instead (decimal's C code keeps its own reference to
    DefaultContext, which a rebuilt object would not replace)."""
    prec, rounding, emin, emax, capitals, clamp, flags, traps = args
    ctx.prec, ctx.rounding, ctx.Emin, ctx.Emax = prec, rounding, emin, emax
    ctx.capitals, ctx.clamp = capitals, clamp
    for signal in list(ctx.flags):
        ctx.flags[signal] = signal in flags
    for signal in list(ctx.traps):
        ctx.traps[signal] = signal in traps


# (type's module, qualname) -> apply(existing object, saved reduce args)
APPLIERS: dict[tuple[str, str], Callable[[Any, tuple[Any, ...]], None]] = {
    ("decimal", "Context"): _apply_decimal_context
}
