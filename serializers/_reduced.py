"""The type of a pickle reduction: what __reduce__, a copyreg reducer, a resource
adapter and Pickler.reducer_override return (see the pickle documentation, "object.
__reduce__"). As typeshed's pickle._ReducedType, plus the sixth item, the state setter
(Python 3.8+), which typeshed leaves out. The arguments, state and items are the
pickled object's own: arbitrary, so Any."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeAlias

__all__ = ["Reduced"]

Reduced: TypeAlias = (
    str  # a global name: the object is saved by reference
    | tuple[Callable[..., Any], tuple[Any, ...]]
    | tuple[Callable[..., Any], tuple[Any, ...], Any]
    | tuple[Callable[..., Any], tuple[Any, ...], Any, Iterator[Any] | None]
    | tuple[Callable[..., Any], tuple[Any, ...], Any, Iterator[Any] | None, Iterator[Any] | None]
    | tuple[
        Callable[..., Any],
        tuple[Any, ...],
        Any,
        Iterator[Any] | None,
        Iterator[Any] | None,
        Callable[[Any, Any], object] | None,
    ]
)
