"""numpy arrays that share memory keep sharing it after a restore.

numpy pickles a view as a copy of its elements, so after a restore a view no longer
writes through to its base. This adapter (registered once the agent has imported
numpy) saves a view as (root, dtype, shape, strides, byte offset, writeable), where
the root is the object at the end of the view's base chain: an ndarray that owns its
data, or the bytes/bytearray an array was made over (np.frombuffer; numpy's own
unpickling puts a restored array over a bytearray too). The root is pickled once, as
any shared object, and every view of it is rebuilt over the restored root: no copy
of the data is made, and the root is not saved twice.

A base chain ending in anything else (an mmap, a numpy.memmap's file, a buffer
another library owns) cannot be rebuilt over the same memory: refused, naming the
kind of base and the fix. Views of ndarray subclasses are rebuilt for np.matrix and
np.recarray (no state beyond the array) and refused for others (a masked array keeps
a mask beside its data); subclass instances owning their data pickle as numpy
pickles them, plus their own attributes (__dict__, which numpy's pickling drops), unless
the subclass pickles itself (its own __reduce__). A plain ndarray owning its data is
saved as its bytes (written in-band, no copy) and rebuilt over them, and a view as one
of the array it was taken from when that array owns its data or lies over bytes (where
numpy stops collapsing a view's base chain): `.base` is that array again after a
restore. numpy's own unpickling would put the array over another array over the bytes.
Object arrays are left to numpy's pickling.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from types import NotImplementedType
from typing import TYPE_CHECKING, Any, Literal, NoReturn

from ..serializers._describe import user_type_name
from ._adapters import Reduced, register_adapter, register_optional

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray
from .._abi import pinned

__all__ = ["rebuild_view"]

# Subclasses whose view is the ndarray view re-typed with .view(cls): no other state.
_VIEW_SUBCLASSES: tuple[type, ...] = ()
_NDARRAY: type | None = None
_NDARRAY_REDUCE: tuple[Callable[..., Any], ...] = ()  # ndarray's (__reduce__, __reduce_ex__)


def _load_numpy() -> None:
    global _VIEW_SUBCLASSES, _NDARRAY, _NDARRAY_REDUCE
    import numpy as np

    _VIEW_SUBCLASSES = (np.matrix, np.recarray)
    _NDARRAY = np.ndarray
    _NDARRAY_REDUCE = (np.ndarray.__reduce__, np.ndarray.__reduce_ex__)
    register_adapter(np.ndarray, _reduce_array, subclasses=True)


register_optional("numpy", _load_numpy)


def _kind(obj: object) -> str:
    t = type(obj)
    name = t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"
    if name == "mmap.mmap":
        return "an mmap.mmap (a memory-mapped file)"
    return f"a {name}"


_COPY = (
    "copy it deliberately before snapshot() with np.array(view) (the copy no longer "
    "shares that memory), or open its source through snapstate.resource() so it is "
    "reopened after a restore"
)
_SUBCLASS_COPY = (
    "copy it deliberately before snapshot() with view.copy() (the copy no "
    "longer shares memory with its base), or hold a plain ndarray view"
)


def _refuse(array: NDArray[Any], why: str, fix: str = _COPY) -> NoReturn:
    raise pickle.PicklingError(
        f"a numpy array (shape {array.shape}, dtype {array.dtype}) {why}, so a restore could "
        f"not rebuild it sharing that memory; {fix}"
    )


def _root(array: NDArray[Any]) -> NDArray[Any] | bytes | bytearray:
    """The object owning the memory `array` views: an ndarray owning its data, or a
    bytes/bytearray; anything else is refused."""
    import numpy as np

    base: Any = array.base  # each link of the chain: an object of any kind
    while True:
        if isinstance(base, np.ndarray):
            if base.base is None:
                return base
            base = base.base
        elif type(base).__name__ == "DummyArray" and hasattr(base, "__array_interface__"):
            base = base.base  # np.lib.stride_tricks.as_strided's holder of the base
        elif isinstance(base, memoryview):
            base = base.obj  # np.frombuffer's view of the exporting object
        elif type(base) in (bytes, bytearray):
            root: bytes | bytearray = base
            return root
        else:
            _refuse(array, f"is a view of memory owned by {_kind(base)}")


def _address(root: NDArray[Any] | bytes | bytearray) -> int:
    import numpy as np

    address: int  # __array_interface__ is a dict of Any
    if isinstance(root, np.ndarray):
        address = root.__array_interface__["data"][0]
        return address
    address = np.frombuffer(root, dtype=np.uint8).__array_interface__["data"][0]
    return address


def _reduce_array(array: NDArray[Any]) -> Reduced | NotImplementedType:
    if array.base is None:
        t = type(array)
        if t is _NDARRAY:
            return _reduce_owner(array)
        if (
            not getattr(array, "__dict__", None)
            or (t.__reduce__, t.__reduce_ex__) != _NDARRAY_REDUCE
        ):
            return NotImplemented  # type: ignore[no-any-return]  # owns its data: numpy pickles it
        return _reduce_subclass(array)
    import numpy as np

    t = type(array)
    if t is not np.ndarray and not issubclass(t, _VIEW_SUBCLASSES):
        name = user_type_name(t)  # as the user writes it: numpy.ma.MaskedArray
        if isinstance(array, np.memmap):
            _refuse(array, f"is a {name} over a file")
        _refuse(
            array,
            f"of subclass {name} is a view of another array (its extra state "
            "cannot be rebuilt around the shared memory)",
            _SUBCLASS_COPY,
        )
    base = array.base
    if type(base) is np.ndarray and not isinstance(base.base, np.ndarray) and array.size:
        # Over the array it was taken from (its .base: one owning its data, or one over
        # bytes, where numpy stops collapsing a view's base chain), so .base is that array
        # again: the restored owner lies over its bytes, not over another array.
        rebuilt = _over(array, base, t)
        if rebuilt is not None:
            return rebuilt
    root = _root(array)
    offset = array.__array_interface__["data"][0] - _address(root) if array.size else 0
    shape, strides, dtype = array.shape, array.strides, array.dtype
    writeable = array.flags.writeable
    try:  # the same view over the live root: proves the layout fits
        probe = rebuild_view(root, dtype, shape, strides, offset, writeable, np.ndarray)
    except (TypeError, ValueError) as exc:
        _refuse(array, f"has a layout that cannot be rebuilt over its base ({exc})")
    if array.size and probe.__array_interface__["data"][0] != array.__array_interface__["data"][0]:
        _refuse(array, "has a layout that cannot be rebuilt over its base")
    return (
        rebuild_view,
        (root, dtype, shape, strides, offset, writeable, None if t is np.ndarray else t),
    )


def _over(array: NDArray[Any], base: NDArray[Any], t: type) -> Reduced | None:
    """The view as one of `base` (an ndarray over memory no other ndarray holds), or
    None when its layout cannot be rebuilt over it."""
    import numpy as np

    offset = array.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    shape, strides, dtype = array.shape, array.strides, array.dtype
    writeable = array.flags.writeable
    try:
        probe = rebuild_view(base, dtype, shape, strides, offset, writeable, np.ndarray)
    except (TypeError, ValueError, BufferError):
        return None
    if probe.__array_interface__["data"][0] != array.__array_interface__["data"][0]:
        return None
    return (
        rebuild_view,
        (base, dtype, shape, strides, offset, writeable, None if t is np.ndarray else t),
    )


def _reduce_owner(array: NDArray[Any]) -> Reduced | NotImplementedType:
    """An ndarray owning its data: its bytes in the pickle stream (in-band, no copy made
    to write them), rebuilt as an array over them: a bytearray when it was writable, so a
    view of it is rebuilt with .base being it (numpy's own unpickling puts the array over
    another array over the bytes, and a view's base would then skip it). Object arrays
    and ones in neither C nor Fortran order are left to numpy."""
    if array.dtype.hasobject:
        return NotImplemented  # type: ignore[no-any-return]  # numpy pickles the objects
    order: Literal["C", "F"]
    if array.flags.c_contiguous:
        order = "C"
    elif array.flags.f_contiguous:
        order = "F"
    else:  # pragma: no cover - an array owning its data is laid out in one of both
        return NotImplemented  # type: ignore[no-any-return]
    return (rebuild_owner, (pickle.PickleBuffer(array), array.dtype, array.shape, order))


@pinned("numpy_rebuild_owner")
def rebuild_owner(
    data: bytes | bytearray, dtype: np.dtype[Any], shape: tuple[int, ...], order: Literal["C", "F"]
) -> NDArray[Any]:
    """The array over its restored bytes (read-only when they are bytes: it was)."""
    import numpy as np

    array: NDArray[Any] = np.ndarray(shape, dtype=dtype, buffer=data, order=order)
    return array


def _reduce_subclass(array: NDArray[Any]) -> Reduced:
    """An ndarray subclass instance owning its data with attributes of its own (a.unit =
    "m"): numpy's pickling saves the data but not the instance's __dict__, so it is
    saved beside it (subclasses with their own __reduce__, e.g. masked arrays, keep it)."""
    rv = array.__reduce_ex__(pickle.DEFAULT_PROTOCOL)
    state = rv[2] if len(rv) > 2 else None
    return (rv[0], rv[1], (state, dict(array.__dict__)), None, None, _set_subclass_state)


@pinned("numpy_set_subclass_state")
def _set_subclass_state(array: NDArray[Any], state: tuple[Any, dict[str, Any]]) -> None:
    numpy_state, attrs = state
    if numpy_state is not None:
        array.__setstate__(numpy_state)
    array.__dict__.update(attrs)


@pinned("numpy_rebuild_view")
def rebuild_view(
    root: NDArray[Any] | bytes | bytearray,
    dtype: np.dtype[Any],
    shape: tuple[int, ...],
    strides: tuple[int, ...],
    offset: int,
    writeable: bool,
    cls: type[NDArray[Any]] | None = None,
) -> NDArray[Any]:
    """The view of `root` that was saved: same dtype, shape, strides and byte offset;
    read-only when it was; re-typed as `cls` (np.matrix, np.recarray) when given."""
    import numpy as np

    view = np.ndarray(shape, dtype=dtype, buffer=root, offset=offset, strides=strides)
    if view.flags.writeable != writeable:
        view.flags.writeable = writeable  # raises if the root is read-only: never silent
    if cls is not None and cls is not np.ndarray:
        view = view.view(cls)
    return view
