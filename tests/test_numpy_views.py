"""numpy arrays that share memory at a snapshot share it after the restore: in-process
round trips through the snapshot pickler (serializers._pickler.dumps/loads) for every
layout, and refusals, naming the path and the kind of base, where the memory belongs
to something a restore cannot rebuild."""

from __future__ import annotations

import gc
import mmap
import pickle

import numpy as np
import pytest

from snapstate.serializers import _pickler


def _round_trip(obj):
    return _pickler.loads(_pickler.dumps(obj))


def _views(root):
    ro = root[2]
    ro.flags.writeable = False
    return {
        "slice": root[1:3, ::2],
        "negative strides": root[::-1, ::-2],
        "transpose (Fortran order)": root.T,
        "0-d": root[1, 2, ...],
        "reinterpreted dtype": root.view(np.uint8)[1:3, 8:40],
        "read-only": ro,
        "view of a view": root[1:][:, 1:][::2],
    }


def test_views_share_memory_with_their_restored_root():
    """Every layout (slice, negative strides, transpose, 0-d, another dtype, read-only,
    a view of a view) comes back equal, with the same strides and writeable flag,
    sharing the restored root's memory: a write through a view changes the root."""
    root = np.arange(24.0).reshape(4, 6)
    views = _views(root)
    out = _round_trip({"root": root, **views})
    restored = out["root"]
    for name, original in views.items():
        view = out[name]
        assert type(view) is np.ndarray, name
        assert view.dtype == original.dtype and view.shape == original.shape, name
        assert view.strides == original.strides, name
        assert np.array_equal(view, original), name
        assert np.shares_memory(view, restored), name
        assert view.flags.writeable == original.flags.writeable, name
    out["negative strides"][0, 0] = -1.0  # root[3, 5]
    out["0-d"][...] = -2.0  # root[1, 2]
    assert restored[3, 5] == -1.0 and restored[1, 2] == -2.0
    assert out["slice"][0, 1] == -2.0  # root[1, 2], seen by a sibling view
    with pytest.raises(ValueError):
        out["read-only"][0] = 1.0


def test_fortran_root_empty_and_object_views():
    """A Fortran-ordered root, an empty view, and views of an object-dtype array share
    the restored root (an object view's write is seen in its base)."""
    fortran = np.asfortranarray(np.arange(12).reshape(3, 4))
    objects = np.array([1, "two", None, [3]], dtype=object)
    out = _round_trip((fortran, fortran[:, 1:], fortran[1:1], objects, objects[1::2]))
    f, fview, empty, objs, oview = out
    assert f.flags.f_contiguous and fview.strides == fortran[:, 1:].strides
    fview[0, 0] = 100
    assert f[0, 1] == 100
    assert empty.shape == (0, 4) and empty.dtype == fortran.dtype
    oview[1] = "four"
    assert objs.tolist() == [1, "two", None, "four"]


def test_root_pickled_once_and_views_survive_a_chain():
    """The root's data is written once however many views hold it (a numpy pickle of the
    same views writes every view's elements again), and a restored root's views
    survive a second round trip (a chain of restores) still sharing memory."""
    root = np.zeros(1_000_000)
    views = [root[i:] for i in range(5)]
    ours = _pickler.dumps((root, views))
    plain = pickle.dumps((root, views), protocol=5)
    assert len(ours) < root.nbytes * 1.01 < 5 * root.nbytes < len(plain)
    again = _round_trip(_round_trip((root, views)))
    again[1][4][0] = 7.0
    assert again[0][4] == 7.0 and all(np.shares_memory(v, again[0]) for v in again[1])


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_views_over_bytes_and_bytearray_and_subclasses():
    """np.frombuffer views keep their bytearray (a write shows in it) or bytes (still
    read-only); np.matrix and np.recarray views keep their type and their base."""
    data = bytearray(16)
    ints = np.frombuffer(data, dtype=np.int32)[1:]
    frozen = b"abcdefgh"
    chars = np.frombuffer(frozen, dtype=np.uint8)[2:]
    matrix = np.matrix([[1, 2], [3, 4]])
    rec = np.rec.array([(1, 2.0), (3, 4.0)], dtype=[("a", int), ("b", float)])
    out = _round_trip((data, ints, frozen, chars, matrix, matrix[1], rec, rec[1:]))
    data2, ints2, frozen2, chars2, matrix2, row2, rec2, recview2 = out
    ints2[0] = 7
    assert data2[4:8] == b"\x07\x00\x00\x00"
    assert bytes(chars2) == b"cdefgh" and not chars2.flags.writeable and frozen2 == frozen
    assert type(row2) is np.matrix and np.shares_memory(row2, matrix2)
    row2[0, 0] = 30
    assert matrix2[1, 0] == 30
    assert type(recview2) is np.recarray
    recview2.a[0] = 9
    assert rec2.a.tolist() == [1, 9]


def _refusal(value, name="view") -> str:
    with pytest.raises(_pickler.UnpicklableError) as info:
        _pickler.dumps({"v": value}, roots=lambda: [(f"local {name!r}", value)])
    return str(info.value)


def test_views_of_foreign_memory_are_refused_naming_the_base_and_the_fix(tmp_path):
    """A view of an mmap, a numpy.memmap and a masked array view are refused (never
    saved as a detached copy): the message gives the path, the kind of base and the
    fix (np.array(view) to copy deliberately, or resource())."""
    region = mmap.mmap(-1, 64)
    view = np.frombuffer(region, dtype=np.uint8)[4:]
    message = _refusal(view)
    assert message.startswith("local 'view' is a numpy array")
    assert "local 'view' -> numpy.ndarray" in message
    assert "mmap.mmap (a memory-mapped file)" in message
    assert "np.array(view)" in message and "resource()" in message
    mapped = np.memmap(tmp_path / "data.bin", dtype=np.uint8, mode="w+", shape=(8,))
    message = _refusal(mapped, "mapped")
    assert "local 'mapped' -> numpy.memmap" in message and "over a file" in message
    del mapped
    masked = np.ma.masked_array(np.arange(4.0), mask=[0, 1, 0, 0])
    message = _refusal(masked, "masked")
    assert "numpy.ma.MaskedArray is a view of another array" in message
    assert "view.copy()" in message
    del view
    gc.collect()  # the refusal's traceback held the view (a cycle)
    region.close()


def test_a_view_keeps_the_array_it_was_taken_from_as_its_base():
    """`.base` is the array a view was taken from after a restore, as before it: a view of
    an array owning its data (flat = arr.flatten(); inner = flat[2:5]), a view of an
    array over bytes (np.frombuffer), a Fortran-ordered owner's column; read-only owners
    stay read-only, and writes still reach the base."""
    arr = np.arange(12.0).reshape(3, 4)
    flat = arr.flatten()  # owns its data
    inner = flat[2:5]
    over = np.frombuffer(bytes(range(16)), dtype=np.uint8)
    part = over[3:9]
    fortran = np.asfortranarray(np.arange(6.0).reshape(2, 3))
    column = fortran[:, 1]
    frozen = np.arange(4)
    frozen.flags.writeable = False
    state = {"flat": flat, "inner": inner, "over": over, "part": part}
    state.update(fortran=fortran, column=column, frozen=frozen, window=frozen[1:3])
    assert inner.base is flat and part.base is over and column.base is fortran
    back = _round_trip(state)
    assert back["inner"].base is back["flat"]
    assert back["part"].base is back["over"]
    assert back["column"].base is back["fortran"]
    assert back["window"].base is back["frozen"]
    assert not back["frozen"].flags.writeable and not back["window"].flags.writeable
    assert back["fortran"].flags.f_contiguous and back["column"].tolist() == [1.0, 4.0]
    back["inner"][0] = -1.0
    assert back["flat"][2] == -1.0
